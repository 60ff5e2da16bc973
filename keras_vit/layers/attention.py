"""`MultiHeadSelfAttention`: the ViT's attention, optionally with query-key normalisation."""

import contextlib
import math
import os

import keras
from keras import ops

from keras_vit.layers._checks import check_bool, check_positive_int, check_rate, check_token_shape
from keras_vit.layers._quantization import sublayer_dtype
from keras_vit.layers._shared_arguments import declared_defaults
from keras_vit.layers._token_mixer import (
    ATTENTION_CONFIG,
    TokenMixer,
    attention_mask_4d,  # noqa: F401 (re-export: its home before _token_mixer)
    config_values,
)
from keras_vit.layers.norms import check_norm, make_norm
from keras_vit.layers.rotary import apply_rotary_embedding
from keras_vit.layers.sharding import COLUMN, KEY_VALUE, ROW

# On PyTorch, MultiHeadSelfAttention and TransformerBlock compute through the fast path in
# keras_vit/layers/_torch_kernels.py (same variables and function, tested against the keras.ops
# path). KERAS_VIT_TORCH_KERNELS=0 (read at import) or `portable_path()` keeps keras.ops.
_FAST_PATH = {
    "torch": keras.backend.backend() == "torch"
    and os.environ.get("KERAS_VIT_TORCH_KERNELS", "1") != "0"
}


def torch_fast_path():
    """Whether the attention and the blocks take the PyTorch fast path now."""
    return _FAST_PATH["torch"]


@contextlib.contextmanager
def portable_path(portable=True):
    """Inside the `with`, the layers compute through the portable `keras.ops` path.

    The fast path's reference (the tests compare the two); `portable_path(False)` turns the
    fast path on instead (on PyTorch). Read at call time: an eager PyTorch model switches
    between calls; a `torch.compile`d step keeps the path it was traced with.
    """
    previous = _FAST_PATH["torch"]
    _FAST_PATH["torch"] = not portable and keras.backend.backend() == "torch"
    try:
        yield
    finally:
        _FAST_PATH["torch"] = previous


# The logit of a masked pair in the explicit path (finite: a row with every key masked stays
# finite instead of NaN; float16's lowest is -65504).
MASKED_LOGIT = -60000.0


def softmax_weights(query, key, *, scale, bias=None, mask=None):
    """The attention weights of `(B, T, heads, head_dim)` queries and keys: `(B, heads, T, T)`.

    `softmax(scale * q k^T + bias)` over the keys, masked keys (`mask` False, broadcastable to
    `(B, 1, T, T)`) at `MASKED_LOGIT`: the one softmax core of every attention layer here
    (`MultiHeadSelfAttention`'s path with scores or dropout, `ParallelScalingBlock`,
    differential attention).
    """
    logits = ops.einsum("bqhd,bkhd->bhqk", query * ops.cast(scale, query.dtype), key)
    if bias is not None:
        logits = logits + bias
    if mask is not None:
        logits = ops.where(mask, logits, ops.cast(MASKED_LOGIT, logits.dtype))
    return ops.softmax(logits, axis=-1)


def output_projection(layer, heads_shape, hidden_dim):
    """`layer`'s `attention_output` `EinsumDense`, `(B, T, heads, width)` -> `(B, T, D)`, built."""
    dense = keras.layers.EinsumDense(
        "abcd,cde->abe",
        output_shape=(None, hidden_dim),
        bias_axes="e",
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        dtype=sublayer_dtype(layer, "attention_output"),
        name="attention_output",
    )
    dense.build(heads_shape)
    return dense


def build_qk_norms(layer, query_shape, key_shape):
    """Sets `layer.query_norm` and `layer.key_norm` (its `norm` kind), built on those shapes."""
    eps, dtype = layer.layer_norm_epsilon, layer.dtype_policy
    layer.query_norm = make_norm(layer.norm, eps, "query_norm", dtype)
    layer.key_norm = make_norm(layer.norm, eps, "key_norm", dtype)
    layer.query_norm.build(query_shape)
    layer.key_norm.build(key_shape)


def set_core_arguments(layer, num_heads, attention_dropout_rate, qk_norm, layer_norm_epsilon, norm):
    """Checks and sets the arguments every attention core takes (`CORE_ARGUMENTS`)."""
    layer.norm = check_norm(norm)
    layer.num_heads = check_positive_int(num_heads, "num_heads")
    layer.attention_dropout_rate = check_rate(attention_dropout_rate, "attention_dropout_rate")
    layer.qk_norm = check_bool(qk_norm, "qk_norm")
    layer.layer_norm_epsilon = check_epsilon(layer_norm_epsilon)


def check_epsilon(value, name="layer_norm_epsilon"):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"{name} must be positive. Received: {name}={value!r}")
    return float(value)


@keras.saving.register_keras_serializable(package="keras_vit")
class MultiHeadSelfAttention(TokenMixer):
    """Multi-head self-attention with the official weight layout and optional QK-norm.

    The same function and weights as `keras.layers.MultiHeadAttention` used for self-attention
    (and as the official `MultiHeadDotProductAttention`): `query`, `key` and `value` are
    `EinsumDense` layers with kernels `(D, heads, D / heads)` and biases `(heads, D / heads)`,
    `attention_output` has kernel `(heads, D / heads, D)` and bias `(D,)`; the sublayers are
    reachable as `query_dense`, `key_dense`, `value_dense`, `output_dense`, the attributes of
    Keras' layer, so `.keras` files saved with that layer load into this one.

    With `qk_norm=True`, the per-head queries and keys go through a LayerNorm over the head
    width (`query_norm`, `key_norm`, each with `(D / heads,)` scale and bias) before the dot
    product, as timm's `Attention(qk_norm=True)` (`q_norm`, `k_norm`).

    With `key_bias=False` the key projection has no bias (BEiT's and EVA's q/v-only biases:
    timm's `q_bias`, `v_bias` with a zero `k_bias`). Called with `rotary_embedding` (a
    `keras_vit.layers.RotaryEmbedding2D` output `(N, 2 * head_dim)`), the last `N` queries
    and keys (the patches; the class and register tokens before them stay as they are) are
    rotated after the QK-norm, as timm's `EvaAttention(rope=...)`. Called with
    `attention_bias` (broadcastable to `(B, heads, T, T)`, e.g. a
    `keras_vit.layers.RelativePositionBias` output), the bias is added to the scaled logits
    before the softmax (BEiT's relative position bias).

    The attention itself is `keras.ops.dot_product_attention` (the backend's fused kernel)
    unless the weights are asked for or attention dropout is active (training with
    `attention_dropout_rate > 0`), which compute them explicitly. On PyTorch the same
    function runs through `F.linear` and `F.scaled_dot_product_attention` on the layer's own
    variables (`keras_vit/layers/_torch_kernels.py`; `portable_path()` turns it off).

    Args:
        num_heads: int. Number of heads; must divide the input width.
        attention_dropout_rate: float in [0, 1). Dropout on the attention weights.
            Defaults to 0.
        qk_norm: bool. LayerNorm on per-head queries and keys. Defaults to False.
        layer_norm_epsilon: float. Epsilon of the QK-norm LayerNorms. Defaults to 1e-6.
        key_bias: bool. Whether the key projection has a bias. Defaults to True.
        inner_norm: bool. A LayerNorm (epsilon `layer_norm_epsilon`) over the concatenated
            heads `(heads, D / heads)` before the output projection (`inner_norm`, timm's
            `attn.norm`: EVA-CLIP's `scale_attn_inner`). Defaults to False.
        norm: `"layernorm"` or `"rmsnorm"`: the kind of the QK and inner norms
            (`keras_vit.layers.norms`). Defaults to `"layernorm"`.
        num_key_value_heads: optional int. Grouped-query attention (Sapiens2, timm's
            `num_kv_heads`): the key and value projections have this many heads (kernels
            `(D, kv_heads, D / heads)`), each shared by `heads / kv_heads` consecutive query
            heads (repeated after the QK-norm and rotation, as timm's `repeat_interleave`).
            Must divide `num_heads`. Computed by the portable path. Defaults to None
            (`num_heads`: multi-head attention).

    Call arguments:
        inputs: `(B, T, D)` tokens.
        training: bool, whether attention dropout is active.
        rotary_embedding: optional `(N, 2 * head_dim)` sines and cosines (N <= T) rotating
            the last N queries and keys, or `(N, heads, 2 * head_dim)`: one table per head
            (`keras_vit.layers.MixedRotaryEmbedding`), or `(B, N, 1 or heads, 2 * head_dim)`:
            one per image (`keras_vit.layers.NaFlexRotaryEmbedding`). Defaults to None.
        attention_bias: optional additive bias of the attention logits, broadcastable to
            `(B, heads, T, T)`. Defaults to None.
        return_attention_scores: bool. Also return the attention weights `(B, heads, T, T)`
            (before dropout). Defaults to False.
        attention_mask: optional boolean mask, True where attention is allowed: `(B, S)`
            with S <= T says which of the last S tokens are valid keys (the T - S tokens
            before them, class and register tokens, always are; NaFlex padding), or a full
            `(B, 1, T, T)` / `(B, heads, T, T)` mask. Masked keys get zero weight: the
            outputs of the other tokens do not depend on them. Defaults to None.

    Returns:
        `(B, T, D)`, or `((B, T, D), (B, heads, T, T))`.

    Example:

    >>> import numpy as np
    >>> layer = MultiHeadSelfAttention(num_heads=2, qk_norm=True)
    >>> out, scores = layer(np.zeros((1, 5, 8), "float32"), return_attention_scores=True)
    >>> tuple(out.shape), tuple(scores.shape)
    ((1, 5, 8), (1, 2, 5, 5))

    Reference:
        Vaswani et al., 2017, Sec. 3.2; Dehghani et al., 2023 (ViT-22B), Sec. 2 (QK-norm).
    """

    # Tensor-parallel roles of the projections (keras_vit.layers.sharding).
    sharding_roles = {"query": COLUMN, "key|value": KEY_VALUE, "attention_output": ROW}

    def __init__(
        self,
        num_heads,
        attention_dropout_rate=0.0,
        qk_norm=False,
        layer_norm_epsilon=1e-6,
        key_bias=True,
        inner_norm=False,
        norm="layernorm",
        num_key_value_heads=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.inner_norm = check_bool(inner_norm, "inner_norm")
        check_positive_int(num_key_value_heads, "num_key_value_heads", allow_none=True)
        if num_key_value_heads is not None and num_heads % num_key_value_heads:
            raise ValueError(
                "num_key_value_heads must divide num_heads. Received: "
                f"num_heads={num_heads}, num_key_value_heads={num_key_value_heads}"
            )
        self.num_key_value_heads = num_key_value_heads
        core = (attention_dropout_rate, qk_norm, layer_norm_epsilon, norm)
        set_core_arguments(self, num_heads, *core)
        self.key_bias = check_bool(key_bias, "key_bias")
        self.supports_masking = False

    def build(self, input_shape):
        hidden_dim = check_token_shape(input_shape, self.num_heads, self.name)
        head_dim = hidden_dim // self.num_heads
        self.head_dim = head_dim
        self._scale = 1.0 / math.sqrt(head_dim)
        dtype = self.dtype_policy

        def projection(name, bias=True, heads=self.num_heads):
            return keras.layers.EinsumDense(
                "abc,cde->abde",
                output_shape=(None, heads, head_dim),
                bias_axes="de" if bias else None,
                kernel_initializer="glorot_uniform",
                bias_initializer="zeros",
                dtype=sublayer_dtype(self, name),
                name=name,
            )

        shape = tuple(input_shape)
        self.query_dense = projection("query")
        kv_heads = self.num_key_value_heads or self.num_heads
        self.key_dense = projection("key", self.key_bias, kv_heads)
        self.value_dense = projection("value", heads=kv_heads)
        for layer in (self.query_dense, self.key_dense, self.value_dense):
            layer.build(shape)
        head_shape = shape[:-1] + (self.num_heads, head_dim)
        self.output_dense = output_projection(self, head_shape, hidden_dim)
        if self.qk_norm:
            build_qk_norms(self, head_shape, shape[:-1] + (kv_heads, head_dim))
        if self.inner_norm:
            self.output_norm = make_norm(
                self.norm, self.layer_norm_epsilon, "inner_norm", dtype, axis=(-2, -1)
            )
            self.output_norm.build(tuple(input_shape)[:-1] + (self.num_heads, head_dim))
        self.dropout = keras.layers.Dropout(
            self.attention_dropout_rate, dtype=dtype, name="dropout"
        )
        self.built = True

    def project(self, inputs, rotary_embedding=None):
        """The per-head queries, keys and values `(B, T, heads, D / heads)`.

        QK-normed if set, then the last N queries and keys rotated by a `(N, 2 * head_dim)`
        `rotary_embedding` if given.
        """
        query = self.query_dense(inputs)
        key = self.key_dense(inputs)
        value = self.value_dense(inputs)
        if self.qk_norm:
            query = self.query_norm(query)
            key = self.key_norm(key)
        if rotary_embedding is not None:
            query = self._rotate(query, rotary_embedding)
            key = self._rotate(key, rotary_embedding)
        groups = self.num_heads // (self.num_key_value_heads or self.num_heads)
        if groups > 1:  # grouped-query attention: kv head j serves query heads j * groups + ...
            key, value = ops.repeat(key, groups, axis=2), ops.repeat(value, groups, axis=2)
        return query, key, value

    def _rotate(self, x, embedding):
        """Rotates the last N tokens of `(B, T, heads, head_dim)` by `(N, 2 * head_dim)` (one
        table for every head), `(N, heads, 2 * head_dim)` (one per head: mixed RoPE), or
        `(B, N, 1 or heads, 2 * head_dim)` (one per image: NaFlex)."""
        rank = len(embedding.shape)
        heads = embedding.shape[-2] if rank > 2 else None
        if (
            rank not in (2, 3, 4)
            or embedding.shape[-1] not in (None, 2 * self.head_dim)
            or heads not in (None, self.num_heads) + ((1,) if rank == 4 else ())
        ):
            raise ValueError(
                f"{self.name}: rotary_embedding must be (tokens, 2 * head_dim = "
                f"{2 * self.head_dim}), (tokens, heads = {self.num_heads}, 2 * head_dim) or "
                f"(batch, tokens, 1 or heads, 2 * head_dim). "
                f"Received: shape={tuple(embedding.shape)}"
            )
        prefix = ops.shape(x)[1] - ops.shape(embedding)[1 if rank == 4 else 0]
        table = embedding[:, None, :] if rank == 2 else embedding
        rotated = apply_rotary_embedding(x[:, prefix:], table)
        return ops.concatenate([x[:, :prefix], rotated], axis=1)

    def mix(self, inputs, training, return_scores, rotary, bias, mask):
        dropout = bool(training) and self.attention_dropout_rate > 0
        # The fast path's QK-norm is a LayerNorm: RMS QK-norms take the keras.ops path.
        plain = rotary is None and not (self.qk_norm and self.norm != "layernorm")
        if _FAST_PATH["torch"] and plain and not return_scores and not dropout:
            from keras_vit.layers import _torch_kernels

            if _torch_kernels.attention_is_plain(self):
                return _torch_kernels.self_attention(self, inputs, bias=bias, mask=mask)
        query, key, value = self.project(inputs, rotary)
        bias = None if bias is None else ops.cast(bias, query.dtype)
        if not return_scores and not dropout:
            out = ops.dot_product_attention(
                query, key, value, bias=bias, mask=mask, scale=self._scale
            )
            return self.output_dense(self._normed(out))
        weights = softmax_weights(query, key, scale=self._scale, bias=bias, mask=mask)
        dropped = self.dropout(weights, training=training)
        out = self.output_dense(self._normed(ops.einsum("bhqk,bkhd->bqhd", dropped, value)))
        return (out, weights) if return_scores else out

    def _normed(self, heads):
        """The `(B, T, heads, head_dim)` attention output, inner-normed if set."""
        return self.output_norm(heads) if self.inner_norm else heads

    def get_config(self):
        config = super().get_config()  # "dtype" with the quantized sublayers' policies
        names = ATTENTION_CONFIG + ("key_bias", "inner_norm", "norm", "num_key_value_heads")
        config.update(config_values(self, names))
        return config


# The arguments every attention core takes after `num_heads`, with the defaults
# `MultiHeadSelfAttention` declares (`DifferentialAttention` takes them by keyword).
CORE_ARGUMENTS = declared_defaults(
    MultiHeadSelfAttention.__init__,
    ("attention_dropout_rate", "qk_norm", "layer_norm_epsilon", "norm"),
)
