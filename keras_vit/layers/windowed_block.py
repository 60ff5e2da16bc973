"""`WindowedAttentionBlock`: a pre-norm encoder block on a token grid, with windowed or global
attention (ViTDet, SAM's image encoder: timm's `vision_transformer_sam.Block`).

`x + attention(norm(x))`, then `x + mlp(norm(x))` on `(B, H, W, D)`: the attention is
`WindowedSelfAttention` (windows of `window_size`, or the whole grid with 0, with decomposed
relative positions), the MLP Dense -> GELU -> Dense, both branches with stochastic depth.
"""

import keras

from keras_vit.layers._checks import check_bool, check_positive_int, check_rate
from keras_vit.layers._same_shape import SameShape
from keras_vit.layers.attention import check_epsilon
from keras_vit.layers.drop_path import DropPath
from keras_vit.layers.windowed_attention import WindowedSelfAttention

__all__ = ["WindowedAttentionBlock"]


@keras.saving.register_keras_serializable(package="keras_vit")
class WindowedAttentionBlock(SameShape, keras.layers.Layer):
    """Pre-norm encoder block over a `(B, H, W, D)` grid with windowed or global attention.

    Args:
        num_heads: int. Attention heads.
        mlp_dim: int. Hidden width of the MLP.
        window_size: int. Attention windows' side; 0: global attention. Defaults to 0.
        relative_position_size: optional int or `(h, w)`: the grid of the attention's
            relative-position tables (`WindowedSelfAttention`). Defaults to None (none).
        qkv_bias: bool. Defaults to True.
        layer_norm_epsilon: float. Both LayerNorms' epsilon. Defaults to 1e-5 (torch's).
        approximate_gelu: bool. The tanh GELU instead of the exact one. Defaults to False.
        dropout_rate: float in [0, 1). After the MLP's layers and the attention. Defaults to 0.
        attention_dropout_rate: float in [0, 1). Defaults to 0.
        drop_path_rate: float in [0, 1). Stochastic depth of both branches. Defaults to 0.

    Call arguments:
        inputs: `(B, H, W, D)` with static H, W and D.
        training: bool.

    Returns:
        `(B, H, W, D)`.

    Example:

    >>> import numpy as np
    >>> block = WindowedAttentionBlock(num_heads=2, mlp_dim=16, window_size=2)
    >>> tuple(block(np.zeros((1, 3, 3, 8), "float32")).shape)
    (1, 3, 3, 8)

    Reference:
        Li et al., 2022, "Exploring Plain Vision Transformer Backbones for Object Detection".
    """

    CONFIG_KEYS = (
        "num_heads",
        "mlp_dim",
        "window_size",
        "relative_position_size",
        "qkv_bias",
        "layer_norm_epsilon",
        "approximate_gelu",
        "dropout_rate",
        "attention_dropout_rate",
        "drop_path_rate",
    )

    def __init__(
        self,
        num_heads,
        mlp_dim,
        window_size=0,
        relative_position_size=None,
        qkv_bias=True,
        layer_norm_epsilon=1e-5,
        approximate_gelu=False,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
        drop_path_rate=0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.mlp_dim = check_positive_int(mlp_dim, "mlp_dim")
        self.layer_norm_epsilon = check_epsilon(layer_norm_epsilon)
        self.approximate_gelu = check_bool(approximate_gelu, "approximate_gelu")
        self.dropout_rate = check_rate(dropout_rate, "dropout_rate")
        self.drop_path_rate = check_rate(drop_path_rate, "drop_path_rate")
        # The attention checks its own arguments.
        self.attention = WindowedSelfAttention(
            num_heads,
            window_size=window_size,
            relative_position_size=relative_position_size,
            qkv_bias=qkv_bias,
            attention_dropout_rate=attention_dropout_rate,
            dropout_rate=dropout_rate,
            dtype=self.dtype_policy,
            name="attention",
        )
        self.num_heads = self.attention.num_heads
        self.window_size = self.attention.window_size
        self.relative_position_size = self.attention.relative_position_size
        self.qkv_bias = self.attention.qkv_bias
        self.attention_dropout_rate = self.attention.attention_dropout_rate
        norm = dict(epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy)
        self.attention_norm = keras.layers.LayerNormalization(name="attention_norm", **norm)
        self.mlp_norm = keras.layers.LayerNormalization(name="mlp_norm", **norm)
        self.drop_path = DropPath(self.drop_path_rate, dtype=self.dtype_policy, name="drop_path")
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=self.dtype_policy)

    def build(self, input_shape):
        shape = tuple(input_shape)
        width = shape[-1]
        self.attention_norm.build(shape)
        self.attention.build(shape)
        self.mlp_norm.build(shape)
        self.mlp_dense_1 = keras.layers.Dense(
            self.mlp_dim, dtype=self.dtype_policy, name="mlp_dense_1"
        )
        self.mlp_dense_2 = keras.layers.Dense(width, dtype=self.dtype_policy, name="mlp_dense_2")
        self.mlp_dense_1.build(shape)
        self.mlp_dense_2.build((*shape[:-1], self.mlp_dim))
        self.built = True

    def call(self, inputs, training=None):
        x = self.attention(self.attention_norm(inputs), training=training)
        x = inputs + self.drop_path(x, training=training)
        y = keras.activations.gelu(
            self.mlp_dense_1(self.mlp_norm(x)), approximate=self.approximate_gelu
        )
        y = self.dropout(self.mlp_dense_2(self.dropout(y, training=training)), training=training)
        return x + self.drop_path(y, training=training)
