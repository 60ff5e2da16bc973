"""`DifferentialAttention`: the difference of two softmax maps (timm's `DiffAttention`).

The attention of the Differential Transformer as timm 1.0 computes it
(`timm.layers.diff_attention.DiffAttention`, and inside `DiffParallelScalingBlock`): the
queries and keys have `2 * heads` heads of width `D / heads / 2`, the values `heads` heads of
width `D / heads`. Heads `2h` and `2h + 1` give two softmax maps `A1`, `A2` of head `h`, and

    out_h = SubNorm((A1 - lambda * A2) @ V_h) * (1 - lambda_init)

with `lambda = exp(sum(lambda_q1 * lambda_k1)) - exp(sum(lambda_q2 * lambda_k2)) + lambda_init`
(four learned `(D / heads / 2,)` vectors shared by the heads), `lambda_init = 0.8 - 0.6 *
exp(-0.3 * block_index)` and `SubNorm` an RMSNorm (epsilon 1e-5) over the `D / heads` wide head
output. `differential_attention` is that function (shared with
`keras_vit.layers.ParallelScalingBlock(attention_type="differential")`).

Reference:
    Ye et al., 2024, "Differential Transformer", Sec. 2.1 (arXiv 2410.05258).
"""

import math

import keras
from keras import ops

from keras_vit.layers._checks import check_non_negative_int
from keras_vit.layers._quantization import sublayer_dtype
from keras_vit.layers._shared_arguments import shows_keywords, take
from keras_vit.layers._token_mixer import ATTENTION_CONFIG, TokenMixer, config_values
from keras_vit.layers.attention import (
    CORE_ARGUMENTS,
    build_qk_norms,
    output_projection,
    set_core_arguments,
    softmax_weights,
)
from keras_vit.layers.sharding import COLUMN, ROW

ATTENTION_TYPES = ("standard", "differential")
SUB_NORM_EPSILON = 1e-5  # timm's DiffAttention sub_norm
LAMBDAS = ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")
# `MultiHeadSelfAttention`'s arguments this layer takes too (by keyword), with its defaults.
SHARED_ARGUMENTS = CORE_ARGUMENTS


def check_attention_type(attention_type, **block):
    """`attention_type` if it is one of `ATTENTION_TYPES`, else a ValueError naming them.

    `block`: a `TransformerBlock`'s `num_parallel`, `key_bias`, `relative_position_grid`
    and `inner_norm` (attention inner norm), which differential attention must leave at
    their defaults (timm's `DiffAttention` has none of them).
    """
    if attention_type not in ATTENTION_TYPES:
        raise ValueError(
            f"attention_type must be one of {ATTENTION_TYPES}. "
            f"Received: attention_type={attention_type!r}"
        )
    defaults = dict(num_parallel=1, key_bias=True, relative_position_grid=None, inner_norm=False)
    changed = {name: value for name, value in block.items() if value != defaults[name]}
    if attention_type == "differential" and changed:
        raise ValueError(
            "attention_type='differential' takes no parallel branches, q/v-only biases, "
            f"relative position bias or attention inner norm. Received: {changed}"
        )
    return attention_type


def check_no_rotary_or_bias(layer, rotary_embedding, attention_bias):
    """A ValueError when `layer` (ours of timm's DiffAttention / ParallelScalingBlock, which have
    neither) is called with a rotary embedding or an attention bias."""
    if rotary_embedding is not None or attention_bias is not None:
        raise ValueError(
            f"{layer.name}: a {type(layer).__name__} takes no rotary embedding or attention "
            "bias (timm's has neither). Received: "
            f"rotary_embedding={rotary_embedding is not None}, "
            f"attention_bias={attention_bias is not None}"
        )


def lambda_init(block_index):
    """timm's depth-dependent `lambda_init = 0.8 - 0.6 * exp(-0.3 * block_index)`."""
    return 0.8 - 0.6 * math.exp(-0.3 * block_index)


def check_differential_heads(hidden_dim, num_heads, name):
    """The query / key head width `hidden_dim / num_heads / 2` (it must be a whole number)."""
    if hidden_dim % (2 * num_heads):
        raise ValueError(
            f"{name}: differential attention needs 2 * num_heads to divide hidden_dim. "
            f"Received: hidden_dim={hidden_dim}, num_heads={num_heads}"
        )
    return hidden_dim // num_heads // 2


def add_differential_weights(layer, head_dim):
    """`layer.sub_norm` (RMSNorm over `2 * head_dim`) and the four lambda vectors of `layer`."""
    layer.sub_norm = keras.layers.RMSNormalization(
        epsilon=SUB_NORM_EPSILON, dtype=layer.dtype_policy, name="sub_norm"
    )
    layer.sub_norm.build((None, 2 * head_dim))
    init = keras.initializers.RandomNormal(stddev=0.1)  # timm's reset_parameters
    layer.lambdas = [
        layer.add_weight(name=name, shape=(head_dim,), initializer=init) for name in LAMBDAS
    ]


def differential_attention(layer, query, key, value, *, mask=None, dropout=None, training=None):
    """Differential attention of `(B, T, 2H, d)` queries and keys and `(B, T, H, 2d)` values.

    `layer` holds `sub_norm`, `lambdas` (`add_differential_weights`) and `block_index`;
    `mask`: an optional boolean mask broadcastable to `(B, 1, T, T)`; `dropout`: an optional
    dropout layer on both softmax maps.

    Returns:
        `((B, T, H, 2d) output, (B, H, T, T) differential map A1 - lambda * A2)`.
    """
    q1, k1, q2, k2 = (ops.cast(weight, "float32") for weight in layer.lambdas)
    init = lambda_init(layer.block_index)
    lam = ops.exp(ops.sum(q1 * k1)) - ops.exp(ops.sum(q2 * k2)) + init
    lam = ops.cast(lam, query.dtype)
    weights = softmax_weights(query, key, scale=1.0 / math.sqrt(query.shape[-1]), mask=mask)
    dropped = weights if dropout is None else dropout(weights, training=training)
    batch, tokens = ops.shape(weights)[0], ops.shape(weights)[2]
    heads = value.shape[2]

    def difference(maps):  # head pairs (2h, 2h + 1) of (B, 2H, T, T) -> (B, H, T, T)
        maps = ops.reshape(maps, (batch, heads, 2, tokens, tokens))
        return maps[:, :, 0] - lam * maps[:, :, 1]

    out = ops.einsum("bhqk,bkhd->bqhd", difference(dropped), value)
    out = layer.sub_norm(out) * ops.cast(1.0 - init, out.dtype)
    return out, difference(weights)


@keras.saving.register_keras_serializable(package="keras_vit")
class DifferentialAttention(TokenMixer):
    """Differential multi-head self-attention (timm's `DiffAttention`), the ViT weight layout.

    The layout of `keras_vit.layers.MultiHeadSelfAttention` (the same sublayer names, so the
    checkpoint tables, LoRA and quantization find them): `query` and `key` are `EinsumDense`
    layers with kernels `(D, 2 * heads, D / heads / 2)`, `value` `(D, heads, D / heads)`,
    `attention_output` `(heads, D / heads, D)`; plus `sub_norm` (an RMSNorm of `D / heads`,
    epsilon 1e-5) and the weights `lambda_q1`, `lambda_k1`, `lambda_q2`, `lambda_k2`
    (`(D / heads / 2,)`, initialised normal(0.1) as timm's). See the module docstring for the
    function. Computed with `keras.ops` on every backend (the PyTorch fast path leaves it out).

    Args:
        num_heads: int. Number of heads H (the queries and keys have 2H); `2 * num_heads` must
            divide the input width.
        attention_dropout_rate: float in [0, 1). Dropout on both softmax maps. Defaults to 0.
        qk_norm: bool. A norm (kind `norm`) over the `D / heads / 2` wide query and key heads
            (timm's `q_norm`, `k_norm`). Defaults to False.
        layer_norm_epsilon: float. Epsilon of the QK norms. Defaults to 1e-6.
        norm: `"layernorm"` or `"rmsnorm"`: the kind of the QK norms. Defaults to
            `"layernorm"`.
        block_index: int. The block's depth index, which sets `lambda_init`. Defaults to 0.

    Call arguments:
        inputs: `(B, T, D)` tokens.
        training: bool, whether attention dropout is active.
        return_attention_scores: bool. Also return the differential maps
            `softmax(Q1 K1^T) - lambda * softmax(Q2 K2^T)` `(B, heads, T, T)` (rows sum to
            `1 - lambda`, entries may be negative). Defaults to False.
        attention_mask: optional boolean mask (see `MultiHeadSelfAttention`). Defaults to None.
        rotary_embedding, attention_bias: not supported (None; timm's `DiffAttention` has
            neither).

    Returns:
        `(B, T, D)`, or `((B, T, D), (B, heads, T, T))`.

    Example:

    >>> import numpy as np
    >>> layer = DifferentialAttention(num_heads=2, block_index=3)
    >>> out, maps = layer(np.zeros((1, 5, 16), "float32"), return_attention_scores=True)
    >>> tuple(out.shape), tuple(maps.shape)
    ((1, 5, 16), (1, 2, 5, 5))

    Reference:
        Ye et al., 2024, "Differential Transformer", Sec. 2.1.
    """

    # Tensor-parallel roles of the projections (keras_vit.layers.sharding).
    sharding_roles = {"query|key|value": COLUMN, "attention_output": ROW}

    @shows_keywords(SHARED_ARGUMENTS)
    def __init__(self, num_heads, *, block_index=0, **kwargs):
        given = take(kwargs, SHARED_ARGUMENTS)
        super().__init__(**kwargs)
        set_core_arguments(self, num_heads, **given)
        self.block_index = check_non_negative_int(block_index, "block_index")
        # What MultiHeadSelfAttention has (its consumers read them); `differential` keeps it
        # off the PyTorch fast path (`_torch_kernels.attention_is_plain`).
        self.key_bias, self.inner_norm, self.differential = True, False, True
        self.supports_masking = False

    def build(self, input_shape):
        if len(input_shape) != 3 or input_shape[-1] is None:
            raise ValueError(
                f"Layer '{self.name}' expects tokens of shape (batch, tokens, hidden_dim) with "
                f"a known hidden_dim. Received: input shape={tuple(input_shape)}"
            )
        hidden_dim = int(input_shape[-1])
        head_dim = check_differential_heads(hidden_dim, self.num_heads, self.name)
        self.head_dim = head_dim
        shape = tuple(input_shape)

        def projection(name, heads, width):
            layer = keras.layers.EinsumDense(
                "abc,cde->abde",
                output_shape=(None, heads, width),
                bias_axes="de",
                kernel_initializer="glorot_uniform",
                bias_initializer="zeros",
                dtype=sublayer_dtype(self, name),
                name=name,
            )
            layer.build(shape)
            return layer

        self.query_dense = projection("query", 2 * self.num_heads, head_dim)
        self.key_dense = projection("key", 2 * self.num_heads, head_dim)
        self.value_dense = projection("value", self.num_heads, 2 * head_dim)
        heads_shape = shape[:-1] + (self.num_heads, 2 * head_dim)
        self.output_dense = output_projection(self, heads_shape, hidden_dim)
        if self.qk_norm:
            qk_shape = shape[:-1] + (2 * self.num_heads, head_dim)
            build_qk_norms(self, qk_shape, qk_shape)
        add_differential_weights(self, head_dim)
        self.dropout = keras.layers.Dropout(
            self.attention_dropout_rate, dtype=self.dtype_policy, name="dropout"
        )
        self.built = True

    def mix(self, inputs, training, return_scores, rotary, bias, mask):
        check_no_rotary_or_bias(self, rotary, bias)
        query, key = self.query_dense(inputs), self.key_dense(inputs)
        if self.qk_norm:
            query, key = self.query_norm(query), self.key_norm(key)
        out, maps = differential_attention(
            self,
            query,
            key,
            self.value_dense(inputs),
            mask=mask,
            dropout=self.dropout,
            training=training,
        )
        out = self.output_dense(out)
        return (out, maps) if return_scores else out

    def get_config(self):
        config = super().get_config()
        config.update(config_values(self, ATTENTION_CONFIG + ("norm", "block_index")))
        return config
