"""`ParallelBlock`: parallel attention and MLP branches (timm's `ParallelThingsBlock`)."""

import keras

from keras_vit.layers._checks import check_layer_scale, check_positive_int
from keras_vit.layers._token_mixer import BLOCK_CONFIG, config_values
from keras_vit.layers.block_base import EncoderBlock
from keras_vit.layers.block_kinds import register_block_kind
from keras_vit.layers.norms import make_norm

__all__ = ["ParallelBlock"]


@register_block_kind("parallel")
@keras.saving.register_keras_serializable(package="keras_vit")
class ParallelBlock(EncoderBlock):
    """Parallel branches: `x + sum_j MSA_j(LN_j(x))`, then `x + sum_j MLP_j(LN_j(x))`.

    timm's `ParallelThingsBlock` ("Three things everyone should know about Vision
    Transformers", `vit_*_parallel_*`): each branch has its own norms, attention, MLP and
    LayerScale; the attention branches are summed, then the MLP branches. Branch 0 holds the
    sublayer names of `keras_vit.layers.TransformerBlock` (`attention_norm`, `attention`,
    `mlp_norm`, `mlp_dense_1`, `mlp_dense_2`, `attention_scale`, `mlp_scale`); branch j > 0
    adds `attention_norm_{j}`, `attention_{j}`, `mlp_norm_{j}`, `mlp_dense_1_{j}`,
    `mlp_dense_2_{j}` (and the weights `attention_scale_{j}`, `mlp_scale_{j}`). `branches()`
    lists them by role. Earlier versions' `TransformerBlock(num_parallel=n)` (and its `.keras`
    files) is this block.

    On PyTorch the block computes through `keras_vit/layers/_torch_kernels.parallel_block`
    (LayerNorm blocks), equal to the portable `keras.ops` path.

    Args:
        num_heads, mlp_dim: as `keras_vit.layers.TransformerBlock`'s.
        num_parallel: int. The number of branches. Defaults to 2.
        layer_scale_init_value: optional float. LayerScale of every branch's attention and MLP
            (`attention_scale`, `mlp_scale`, `attention_scale_{j}`, ...). Defaults to None.
        **kwargs: the arguments every block kind takes (`dropout_rate`,
            `attention_dropout_rate`, `drop_path_rate`, `layer_norm_epsilon`,
            `approximate_gelu`, `remat`, `qk_norm`, `activation`, `key_bias`, `norm`: as
            `TransformerBlock`'s, every branch alike), and the Keras layer's (`name`, ...).

    Call arguments: as `keras_vit.layers.TransformerBlock`'s, without a rotary embedding or
    attention scores (timm's block has neither).

    Returns:
        `(B, T, D)`.

    Example:

    >>> import numpy as np
    >>> block = ParallelBlock(num_heads=2, mlp_dim=64, num_parallel=2)
    >>> tuple(block(np.zeros((2, 5, 32), "float32")).shape)
    (2, 5, 32)
    """

    torch_adapter = "parallel_block"

    def __init__(self, num_heads, mlp_dim, num_parallel=2, layer_scale_init_value=None, **kwargs):
        super().__init__(num_heads, mlp_dim, **kwargs)
        self.layer_scale_init_value = check_layer_scale(layer_scale_init_value)
        self.num_parallel = check_positive_int(num_parallel, "num_parallel")

    def _build_branches(self, shape, hidden_dim, dense):
        """Branches 1..: built before branch 0's MLP (the creation order of earlier versions,
        so that seeded initialisations draw the same values)."""
        self.parallel_branches = [
            self._build_branch(j, shape, hidden_dim, dense) for j in range(1, self.num_parallel)
        ]

    def _build_branch(self, j, shape, hidden_dim, dense):
        """Branch j > 0: its norms, attention, MLP and LayerScale."""
        eps, dtype = self.layer_norm_epsilon, self.dtype_policy
        branch = {
            "attention_norm": make_norm(self.norm, eps, f"attention_norm_{j}", dtype),
            "attention": self._make_attention(f"attention_{j}"),
            "mlp_norm": make_norm(self.norm, eps, f"mlp_norm_{j}", dtype),
            "mlp_dense_1": dense(self.mlp_dim, f"mlp_dense_1_{j}"),
            "mlp_dense_2": dense(hidden_dim, f"mlp_dense_2_{j}"),
        }
        for name in ("attention_norm", "attention", "mlp_norm", "mlp_dense_1"):
            branch[name].build(shape)
        branch["mlp_dense_2"].build(shape[:-1] + (self.mlp_dim,))
        if self.layer_scale_init_value is not None:
            init = keras.initializers.Constant(self.layer_scale_init_value)
            for name in ("attention_scale", "mlp_scale"):
                branch[name] = self.add_weight(
                    name=f"{name}_{j}", shape=(hidden_dim,), initializer=init
                )
        return branch

    def branches(self):
        """Every branch's sublayers and LayerScale weights by role (branch 0: the block's own)."""
        return super().branches() + list(self.parallel_branches)

    def _residuals(self, inputs, training, return_attention_scores, rotary, bias, mask):
        if return_attention_scores or rotary is not None:
            raise ValueError(
                f"{self.name}: a parallel block (num_parallel={self.num_parallel}) returns "
                "no attention scores and takes no rotary embedding."
            )
        scaled = self.layer_scale_init_value is not None
        total = 0.0
        for branch in self.branches():
            normed = branch["attention_norm"](inputs)
            options = dict(training=training, attention_bias=bias, attention_mask=mask)
            x = branch["attention"](normed, **options)
            x = self.attention_dropout(x, training=training)
            if scaled:
                x = x * branch["attention_scale"]
            total = total + self.drop_path(x, training=training)
        x = inputs + total
        total = 0.0
        for branch in self.branches():
            y = branch["mlp_norm"](x)
            y = self._mlp(y, training, branch["mlp_dense_1"], branch["mlp_dense_2"])
            if scaled:
                y = y * branch["mlp_scale"]
            total = total + self.drop_path(y, training=training)
        return x + total, None

    def get_config(self):
        config = super().get_config()  # "dtype" with the quantized sublayers' policies
        names = ("remat", "qk_norm", "activation", "key_bias", "num_parallel", "norm")
        config.update(config_values(self, BLOCK_CONFIG + names))
        return config
