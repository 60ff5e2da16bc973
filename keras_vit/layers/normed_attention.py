"""`NormedSelfAttention`: self-attention with RMS-normalised queries, keys and values.

Gemma 4's vision attention (timm's `Gemma4Attention`): separate `query`, `key`, `value`, `out`
projections without biases (optionally clamped: `ClippedDense`), an RMSNorm with a scale on
each query and key head, one without a scale on each value head, a split rotary embedding
(`split_rotary.py`) on queries and keys after their norms, grouped key / value heads, and a
fixed logit scale (1: the norms already fix the logits' size). The softmax core is
`attention.softmax_weights`.
"""

import keras
from keras import ops

from keras_vit.layers._checks import check_bool, check_positive_int, check_rate
from keras_vit.layers._same_shape import SameShape
from keras_vit.layers.attention import check_epsilon, softmax_weights
from keras_vit.layers.clipped_dense import ClippedDense
from keras_vit.layers.rms_norm import RMSNorm
from keras_vit.layers.sharding import COLUMN, KEY_VALUE, ROW
from keras_vit.layers.split_rotary import apply_split_rotary, check_split_head_dim

__all__ = ["NormedSelfAttention"]


@keras.saving.register_keras_serializable(package="keras_vit")
class NormedSelfAttention(SameShape, keras.layers.Layer):
    """Multi-head self-attention with query / key / value RMSNorms and a fixed scale.

    Args:
        num_heads: int. Query heads.
        head_dim: int. Width of each head (a multiple of 4: the rotary embedding's two parts).
        num_key_value_heads: int or None. Key / value heads (grouped-query attention); they
            must divide `num_heads`. Defaults to None (`num_heads`).
        epsilon: float. The norms' epsilon. Defaults to 1e-6.
        scale: float. Multiplies the logits. Defaults to 1.0.
        clip: bool. Whether the projections clamp (`ClippedDense`). Defaults to False.
        dropout_rate: float in [0, 1). On the attention weights and the output. Defaults to 0.

    Call arguments:
        inputs: `(B, N, D)`.
        rotary_cos, rotary_sin: optional `(N, head_dim)` tables (`split_rotary_table`).
        training: bool, whether dropout is active.

    Returns:
        `(B, N, D)`.

    Example:

    >>> import numpy as np
    >>> attention = NormedSelfAttention(num_heads=2, head_dim=8)
    >>> tuple(attention(np.zeros((1, 4, 16), "float32")).shape)
    (1, 4, 16)
    """

    # Tensor-parallel roles of the projections (keras_vit.layers.sharding).
    sharding_roles = {"query": COLUMN, "key|value": KEY_VALUE, "out": ROW}

    CONFIG_KEYS = (
        "num_heads",
        "head_dim",
        "num_key_value_heads",
        "epsilon",
        "scale",
        "clip",
        "dropout_rate",
    )

    def __init__(
        self,
        num_heads,
        head_dim,
        num_key_value_heads=None,
        epsilon=1e-6,
        scale=1.0,
        clip=False,
        dropout_rate=0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.head_dim = check_split_head_dim(check_positive_int(head_dim, "head_dim"))
        self.num_key_value_heads = check_positive_int(
            num_key_value_heads, "num_key_value_heads", allow_none=True
        )
        if num_key_value_heads is not None and num_heads % num_key_value_heads:
            raise ValueError(
                "num_key_value_heads must divide num_heads. Received: num_heads="
                f"{num_heads}, num_key_value_heads={num_key_value_heads}"
            )
        self.epsilon = check_epsilon(epsilon, "epsilon")
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale <= 0:
            raise ValueError(f"scale must be a positive number. Received: scale={scale!r}")
        self.scale = float(scale)
        self.clip = check_bool(clip, "clip")
        self.dropout_rate = check_rate(dropout_rate, "dropout_rate")

    @property
    def _kv_heads(self):
        return self.num_key_value_heads or self.num_heads

    def build(self, input_shape):
        shape = tuple(input_shape)
        if len(shape) != 3 or shape[-1] is None:
            raise ValueError(f"{self.name} expects (B, N, D) with a known D. Received: {shape}")

        def dense(units, name):
            return ClippedDense(units, clip=self.clip, dtype=self.dtype_policy, name=name)

        def norm(name, scale=True):
            return RMSNorm(self.epsilon, scale=scale, dtype=self.dtype_policy, name=name)

        inner = self.num_heads * self.head_dim
        self.query = dense(inner, "query")
        self.key = dense(self._kv_heads * self.head_dim, "key")
        self.value = dense(self._kv_heads * self.head_dim, "value")
        self.out = dense(shape[-1], "out")
        self.query_norm = norm("query_norm")
        self.key_norm = norm("key_norm")
        self.value_norm = norm("value_norm", scale=False)
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=self.dtype_policy)
        for layer in (self.query, self.key, self.value):
            layer.build(shape)
        self.out.build((*shape[:-1], inner))
        for layer in (self.query_norm, self.key_norm, self.value_norm):
            layer.build((None, None, None, self.head_dim))
        self.built = True

    def call(self, inputs, rotary_cos=None, rotary_sin=None, training=None):
        tokens = inputs.shape[1] if inputs.shape[1] is not None else ops.shape(inputs)[1]

        def heads(x, count):
            return ops.reshape(x, (-1, tokens, count, self.head_dim))

        q = self.query_norm(heads(self.query(inputs), self.num_heads))
        k = self.key_norm(heads(self.key(inputs), self._kv_heads))
        v = self.value_norm(heads(self.value(inputs), self._kv_heads))
        if rotary_cos is not None:
            q = apply_split_rotary(q, rotary_cos, rotary_sin)
            k = apply_split_rotary(k, rotary_cos, rotary_sin)
        groups = self.num_heads // self._kv_heads
        if groups > 1:
            k, v = ops.repeat(k, groups, axis=2), ops.repeat(v, groups, axis=2)
        weights = self.dropout(softmax_weights(q, k, scale=self.scale), training=training)
        x = ops.einsum("bhqk,bkhd->bqhd", weights, v)
        x = ops.reshape(x, (-1, tokens, self.num_heads * self.head_dim))
        return self.dropout(self.out(x), training=training)
