"""`PostNormBlock`: the residual post-norm encoder block, `x + LN(f(x))` (timm's `ResPostBlock`)."""

import keras

from keras_vit.layers._token_mixer import config_values
from keras_vit.layers.block_base import EncoderBlock


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
        num_heads, mlp_dim, dropout_rate, attention_dropout_rate, drop_path_rate,
        layer_norm_epsilon, approximate_gelu, remat, qk_norm, activation, mlp, mlp_inner_norm,
        key_bias, attention_inner_norm, relative_position_grid, relative_position_mlp_dim,
        norm, attention_type, block_index, num_key_value_heads: as
            `keras_vit.layers.TransformerBlock`'s.

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
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
        drop_path_rate=0.0,
        layer_norm_epsilon=1e-6,
        approximate_gelu=True,
        remat=False,
        qk_norm=False,
        activation="gelu",
        mlp="mlp",
        mlp_inner_norm=False,
        key_bias=True,
        attention_inner_norm=False,
        relative_position_grid=None,
        relative_position_mlp_dim=None,
        norm="layernorm",
        attention_type="standard",
        block_index=0,
        num_key_value_heads=None,
        **kwargs,
    ):
        super().__init__(
            num_heads,
            mlp_dim,
            dropout_rate=dropout_rate,
            attention_dropout_rate=attention_dropout_rate,
            drop_path_rate=drop_path_rate,
            layer_norm_epsilon=layer_norm_epsilon,
            approximate_gelu=approximate_gelu,
            remat=remat,
            qk_norm=qk_norm,
            activation=activation,
            key_bias=key_bias,
            norm=norm,
            **kwargs,
        )
        self._set_options(
            mlp, mlp_inner_norm, attention_inner_norm, relative_position_grid,
            relative_position_mlp_dim, attention_type, block_index, num_key_value_heads,
        )  # fmt: skip

    def _forward(self, inputs, training, return_attention_scores, context=(None, None, None)):
        rotary, bias, mask = context
        bias = self._attention_bias(inputs, bias)
        adapter = self._torch_adapter(rotary, return_attention_scores)
        if adapter is not None:
            return adapter(self, inputs, training, bias, mask)
        x, scores = self._attend(inputs, training, return_attention_scores, rotary, bias, mask)
        x = inputs + self.drop_path(self.attention_norm(x), training=training)
        y = self._mlp_branch(x, training, norm_after=self.mlp_norm)
        out = x + self.drop_path(y, training=training)
        if return_attention_scores:
            return out, scores
        return out

    def get_config(self):
        config = super().get_config()  # "dtype" with the quantized sublayers' policies
        names = (
            "num_heads", "mlp_dim", "dropout_rate", "attention_dropout_rate", "drop_path_rate",
            "layer_norm_epsilon", "approximate_gelu", "remat", "qk_norm", "activation", "mlp",
            "mlp_inner_norm", "key_bias", "attention_inner_norm", "relative_position_grid",
            "relative_position_mlp_dim", "norm", "attention_type", "block_index",
            "num_key_value_heads",
        )  # fmt: skip
        config.update(config_values(self, names))
        return config
