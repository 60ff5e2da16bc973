"""`WindowedSelfAttention`: self-attention on a token grid, within windows or global, with
decomposed relative positions.

The attention of ViTDet's and SAM's image encoder blocks (timm's `vision_transformer_sam`
`Attention` between `window_partition` and `window_unpartition`): the `(B, H, W, D)` grid is
cut into `window x window` windows (zero-padded at the bottom and right; the padded tokens are
keys like any other, as in timm) or kept whole (`window_size=0`: global attention), each
attends with one fused `qkv` projection, the logits get the decomposed relative-position bias
of two axial tables (`decomposed_position.py`) when `relative_position_size` is given, and the
windows are put back.
"""

import keras
from keras import ops

from keras_vit.layers._checks import (
    check_bool,
    check_non_negative_int,
    check_positive_int,
    check_positive_int_pair,
    check_rate,
)
from keras_vit.layers._same_shape import SameShape
from keras_vit.layers.attention import softmax_weights
from keras_vit.layers.decomposed_position import decomposed_relative_bias
from keras_vit.layers.window_partition import window_partition, window_unpartition

__all__ = ["WindowedSelfAttention"]


@keras.saving.register_keras_serializable(package="keras_vit")
class WindowedSelfAttention(SameShape, keras.layers.Layer):
    """Multi-head self-attention over a `(B, H, W, D)` token grid, windowed or global.

    Args:
        num_heads: int. Heads; they must divide the width.
        window_size: int. The windows' side; 0 attends over the whole grid. Defaults to 0.
        relative_position_size: optional int or `(h, w)`: the grid the relative-position
            tables are made for (`2h - 1` and `2w - 1` rows: the window for a windowed layer,
            the image's patch grid for a global one; another grid resizes them linearly).
            Defaults to None (no relative positions).
        qkv_bias: bool. Biases on the query, key and value projection. Defaults to True.
        attention_dropout_rate: float in [0, 1). On the attention weights. Defaults to 0.
        dropout_rate: float in [0, 1). On the output. Defaults to 0.

    Call arguments:
        inputs: `(B, H, W, D)` with static H, W and D.
        training: bool.

    Returns:
        `(B, H, W, D)`.

    Example:

    >>> import numpy as np
    >>> attention = WindowedSelfAttention(num_heads=2, window_size=2, relative_position_size=2)
    >>> tuple(attention(np.zeros((1, 3, 3, 8), "float32")).shape)
    (1, 3, 3, 8)
    """

    CONFIG_KEYS = (
        "num_heads",
        "window_size",
        "relative_position_size",
        "qkv_bias",
        "attention_dropout_rate",
        "dropout_rate",
    )

    def __init__(
        self,
        num_heads,
        window_size=0,
        relative_position_size=None,
        qkv_bias=True,
        attention_dropout_rate=0.0,
        dropout_rate=0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.window_size = check_non_negative_int(window_size, "window_size")
        self.relative_position_size = (
            None
            if relative_position_size is None
            else check_positive_int_pair(relative_position_size, "relative_position_size")
        )
        self.qkv_bias = check_bool(qkv_bias, "qkv_bias")
        self.attention_dropout_rate = check_rate(attention_dropout_rate, "attention_dropout_rate")
        self.dropout_rate = check_rate(dropout_rate, "dropout_rate")

    def build(self, input_shape):
        shape = tuple(input_shape)
        if len(shape) != 4 or None in shape[1:]:
            raise ValueError(
                f"{self.name} expects a (B, H, W, D) grid with known H, W and D. "
                f"Received: input_shape={shape}"
            )
        width = shape[-1]
        if width % self.num_heads:
            raise ValueError(
                f"num_heads must divide the width. Received: width={width}, "
                f"num_heads={self.num_heads}"
            )
        self.head_dim = width // self.num_heads
        self.qkv = keras.layers.Dense(
            3 * width, use_bias=self.qkv_bias, dtype=self.dtype_policy, name="qkv"
        )
        self.out = keras.layers.Dense(width, dtype=self.dtype_policy, name="out")
        self.attention_dropout = keras.layers.Dropout(
            self.attention_dropout_rate, dtype=self.dtype_policy
        )
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=self.dtype_policy)
        self.qkv.build((None, None, width))
        self.out.build((None, None, width))
        if self.relative_position_size is not None:
            h, w = self.relative_position_size
            self.relative_position_h = self.add_weight(
                name="relative_position_h", shape=(2 * h - 1, self.head_dim), initializer="zeros"
            )
            self.relative_position_w = self.add_weight(
                name="relative_position_w", shape=(2 * w - 1, self.head_dim), initializer="zeros"
            )
        self.built = True

    def call(self, inputs, training=None):
        _, height, width, channels = inputs.shape
        x, padded = inputs, (height, width)
        if self.window_size:
            x, padded = window_partition(inputs, self.window_size)
        grid = tuple(x.shape[1:3])
        tokens = grid[0] * grid[1]
        qkv = ops.reshape(self.qkv(ops.reshape(x, (-1, tokens, channels))),
                          (-1, tokens, 3, self.num_heads, self.head_dim))  # fmt: skip
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        bias = None
        if self.relative_position_size is not None:
            bias = decomposed_relative_bias(
                q, self.relative_position_h, self.relative_position_w, grid, grid
            )
        weights = softmax_weights(q, k, scale=self.head_dim**-0.5, bias=bias)
        weights = self.attention_dropout(weights, training=training)
        x = ops.einsum("bhqk,bkhd->bqhd", weights, v)
        x = self.out(ops.reshape(x, (-1, tokens, channels)))
        x = self.dropout(ops.reshape(x, (-1, *grid, channels)), training=training)
        if self.window_size:
            x = window_unpartition(x, self.window_size, padded, (height, width))
        return x
