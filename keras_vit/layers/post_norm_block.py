"""`PostNormBlock`: the residual post-norm encoder block, `x + LN(f(x))` (timm's `ResPostBlock`)."""

import keras

from keras_vit.layers._token_mixer import config_values
from keras_vit.layers.block_base import EncoderBlock
from keras_vit.layers.block_kinds import register_block_kind

__all__ = ["PostNormBlock"]


@register_block_kind("post")
@keras.saving.register_keras_serializable(package="keras_vit")
class PostNormBlock(EncoderBlock):
    """Residual post-norm block: `x + LN(MSA(x))`, then `x + LN(MLP(x))`.

    timm's `ResPostBlock` (`vit_*_res_post_*`), `ResPostRelPosBlock` (`vit_relpos_*_res_post`)
    and `EvaBlockPostNorm`. The sublayers of `keras_vit.layers.TransformerBlock`, with the same
    names (`attention_norm` and `mlp_norm` follow their branch instead of preceding it), so
    that the `TransformerBlock(block_norm="post")` of earlier versions (and its `.keras` files)
    is this block. No LayerScale (timm's post-norm blocks have none).

    On PyTorch the block computes through `keras_vit/layers/_torch_kernels.post_norm_block`
    (LayerNorm, standard attention, plain MLP, no RoPE or attention scores; the rest takes the
    portable `keras.ops` path), equal to the portable path.

    Args:
        num_heads, mlp_dim, mlp, mlp_inner_norm, attention_inner_norm, relative_position_grid,
        relative_position_mlp_dim, attention_type, block_index, num_key_value_heads: as
            `keras_vit.layers.TransformerBlock`'s.
        block_norm: `"post"`, the only value: the kind, written in the config (like a
            `ParallelBlock`'s `num_parallel`) so that `TransformerBlock.from_config`, as in
            earlier versions, makes this block from it. Defaults to `"post"`.
        **kwargs: the arguments every block kind takes (`dropout_rate`,
            `attention_dropout_rate`, `drop_path_rate`, `layer_norm_epsilon`,
            `approximate_gelu`, `remat`, `qk_norm`, `activation`, `key_bias`, `norm`: as
            `TransformerBlock`'s), and the Keras layer's (`name`, `dtype`, ...).

    Call arguments and returns: as `keras_vit.layers.TransformerBlock`'s.

    Example:

    >>> import numpy as np
    >>> block = PostNormBlock(num_heads=2, mlp_dim=64)
    >>> tuple(block(np.zeros((2, 5, 32), "float32")).shape)
    (2, 5, 32)
    """

    block_norm = "post"
    torch_adapter = "post_norm_block"

    def __init__(
        self,
        num_heads,
        mlp_dim,
        mlp="mlp",
        mlp_inner_norm=False,
        attention_inner_norm=False,
        relative_position_grid=None,
        relative_position_mlp_dim=None,
        attention_type="standard",
        block_index=0,
        num_key_value_heads=None,
        block_norm="post",
        **kwargs,
    ):
        super().__init__(num_heads, mlp_dim, **kwargs)
        if block_norm != "post":
            raise ValueError(
                "A PostNormBlock is the residual post-norm block: block_norm='post' (the kind, "
                "in its config so that `TransformerBlock.from_config` reads it back). Received: "
                f"block_norm={block_norm!r}"
            )
        self._set_options(
            mlp, mlp_inner_norm, attention_inner_norm, relative_position_grid,
            relative_position_mlp_dim, attention_type, block_index, num_key_value_heads,
        )  # fmt: skip

    def _residuals(self, inputs, training, return_attention_scores, rotary, bias, mask):
        x, scores = self._attend(inputs, training, return_attention_scores, rotary, bias, mask)
        x = inputs + self.drop_path(self.attention_norm(x), training=training)
        y = self._mlp_branch(x, training, norm_after=self.mlp_norm)
        return x + self.drop_path(y, training=training), scores

    def get_config(self):
        config = super().get_config()  # "dtype" with the quantized sublayers' policies
        names = (
            "num_heads", "mlp_dim", "dropout_rate", "attention_dropout_rate", "drop_path_rate",
            "layer_norm_epsilon", "approximate_gelu", "remat", "qk_norm", "activation", "mlp",
            "mlp_inner_norm", "key_bias", "attention_inner_norm", "relative_position_grid",
            "relative_position_mlp_dim", "norm", "attention_type", "block_index",
            "num_key_value_heads", "block_norm",
        )  # fmt: skip
        config.update(config_values(self, names))
        return config
