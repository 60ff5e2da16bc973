"""`ParallelScalingBlock`: ViT-22B's parallel block with fused projections (timm's)."""

import functools
import math

import keras
from keras import ops

from keras_vit.layers import differential_attention as diff
from keras_vit.layers._checks import (
    check_bool,
    check_layer_scale,
    check_non_negative_int,
    check_positive_int,
    check_rate,
    check_token_shape,
)
from keras_vit.layers._quantization import sublayer_dtype
from keras_vit.layers._shared_arguments import shows_keywords, take
from keras_vit.layers._token_mixer import BLOCK_CONFIG, TokenMixer, config_values
from keras_vit.layers.activations import check_activation, mlp_activation
from keras_vit.layers.attention import build_qk_norms, check_epsilon, softmax_weights
from keras_vit.layers.block_base import COMMON_ARGUMENTS
from keras_vit.layers.drop_path import DropPath
from keras_vit.layers.norms import check_norm, make_norm
from keras_vit.layers.sharding import COLUMN, ROW

# The block arguments of every kind this block takes too (by keyword), with their one default.
SHARED_ARGUMENTS = {
    name: default
    for name, default in COMMON_ARGUMENTS.items()
    if name not in ("remat", "key_bias")  # timm's block has neither
}


@keras.saving.register_keras_serializable(package="keras_vit")
class ParallelScalingBlock(TokenMixer):
    """Parallel attention and MLP from one norm and one fused input projection (ViT-22B).

    timm's `ParallelScalingBlock` (`vit_*_xp_*`, `vit_pwee_*`) and, with
    `attention_type="differential"` and `fused_output=True`, its `DiffParallelScalingBlock`
    (`vit_dpwee_*`):

        y = in_proj(norm(x))            # (B, T, mlp_dim + 3 D): MLP hidden, q, k, v
        a = MSA(q, k, v)                # per-head QK norm if set; or differential attention
        m = act(y_mlp)
        x = x + DropPath(LayerScale(attention_out(a) + mlp_out(m)))     # fused_output=False
        x = x + DropPath(LayerScale(out_proj(concat(a, m))))            # fused_output=True

    Sublayers (the checkpoint tables map them; timm's names in brackets): `in_norm`
    (`in_norm`), `in_proj` (Dense to `mlp_dim + 3 D`, split as [MLP hidden, q, k, v] like
    timm's `in_split`; its bias holds timm's `in_proj.bias`, or timm's `mlp_bias` followed by
    zeros for a checkpoint without q/k/v biases), `query_norm` / `key_norm` with `qk_norm`
    (`q_norm`, `k_norm`), `attention_out` and `mlp_out` (`attn_out_proj`, `mlp_out_proj`) or
    `out_proj` with `fused_output` (`out_proj`, on the attention output then the MLP hidden),
    the weight `layer_scale` (`ls.gamma`), and with differential attention `sub_norm` and
    `lambda_q1` ... `lambda_k2` (`keras_vit.layers.DifferentialAttention`'s). The Dense layers
    (`in_proj`, `attention_out`, `mlp_out`, `out_proj`) are what LoRA and quantization adapt.
    Computed with `keras.ops` on every backend (the PyTorch fast path leaves it out).

    Args:
        num_heads: int. Number of attention heads; must divide the input width (twice it with
            differential attention).
        mlp_dim: int. Hidden width of the MLP.
        dropout_rate: float in [0, 1). Dropout on the MLP hidden activations (timm's
            `mlp_drop`). Defaults to 0.
        attention_dropout_rate: float in [0, 1). Dropout on the attention weights. Defaults
            to 0.
        drop_path_rate: float in [0, 1). Stochastic depth of the residual branch. Defaults
            to 0.
        layer_norm_epsilon: float. Epsilon of `in_norm` and the QK norms. Defaults to 1e-6.
        approximate_gelu: bool. tanh GELU when True, exact erf GELU (timm's) when False.
            Defaults to True.
        layer_scale_init_value: optional float. A learned per-channel scale of the branch
            sum, initialised to it. Defaults to None (off).
        qk_norm: bool. A norm (kind `norm`) over the head width on queries and keys.
            Defaults to False.
        activation: `"gelu"` or `"quick_gelu"`. Defaults to `"gelu"`.
        norm: `"layernorm"` or `"rmsnorm"`: the kind of `in_norm` and the QK norms. Defaults
            to `"layernorm"`.
        fused_output: bool. One output projection of the concatenated attention output and
            MLP hidden (`out_proj`) instead of two summed ones. Defaults to False.
        attention_type: `"standard"` or `"differential"` (see
            `keras_vit.layers.DifferentialAttention`). Defaults to `"standard"`.
        block_index: int. The block's depth index (sets differential attention's
            `lambda_init`). Defaults to 0.

    Call arguments:
        inputs: `(B, T, D)` tokens.
        training: bool, whether dropout and drop path are active.
        return_attention_scores: bool. Also return the attention weights `(B, heads, T, T)`
            (differential attention: its differential maps). Defaults to False.
        attention_mask: optional boolean mask (see `keras_vit.layers.MultiHeadSelfAttention`).
            Defaults to None.
        rotary_embedding, attention_bias: not supported (None; timm's block has neither).

    Returns:
        `(B, T, D)`, or `((B, T, D), (B, heads, T, T))`.

    Example:

    >>> import numpy as np
    >>> block = ParallelScalingBlock(num_heads=2, mlp_dim=64, qk_norm=True)
    >>> tuple(block(np.zeros((2, 5, 32), "float32")).shape)
    (2, 5, 32)

    Reference:
        Dehghani et al., 2023, "Scaling Vision Transformers to 22 Billion Parameters", Sec. 2
        (parallel layers, QK-norm); Ye et al., 2024, "Differential Transformer".
    """

    # Tensor-parallel roles of the projections (keras_vit.layers.sharding).
    sharding_roles = {"in_proj": COLUMN, "attention_out|mlp_out|out_proj": ROW}

    @shows_keywords(SHARED_ARGUMENTS)
    def __init__(
        self,
        num_heads,
        mlp_dim,
        *,
        layer_scale_init_value=None,
        fused_output=False,
        attention_type="standard",
        block_index=0,
        **kwargs,
    ):
        given = take(kwargs, SHARED_ARGUMENTS)
        super().__init__(**kwargs)
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.mlp_dim = check_positive_int(mlp_dim, "mlp_dim")
        for name in ("dropout_rate", "attention_dropout_rate", "drop_path_rate"):
            setattr(self, name, check_rate(given[name], name))
        self.layer_norm_epsilon = check_epsilon(given["layer_norm_epsilon"])
        self.approximate_gelu = check_bool(given["approximate_gelu"], "approximate_gelu")
        self.layer_scale_init_value = check_layer_scale(layer_scale_init_value)
        self.qk_norm = check_bool(given["qk_norm"], "qk_norm")
        self.activation = check_activation(given["activation"])
        self.norm = check_norm(given["norm"])
        self.fused_output = check_bool(fused_output, "fused_output")
        self.attention_type = diff.check_attention_type(attention_type)
        self.block_index = check_non_negative_int(block_index, "block_index")
        self.supports_masking = False

    @property
    def differential(self):
        return self.attention_type == "differential"

    def build(self, input_shape):
        hidden_dim = check_token_shape(input_shape, self.num_heads, self.name)
        self.hidden_dim = hidden_dim
        head_dim = hidden_dim // self.num_heads
        if self.differential:
            head_dim = diff.check_differential_heads(hidden_dim, self.num_heads, self.name)
        self.head_dim = head_dim
        dtype, eps, shape = self.dtype_policy, self.layer_norm_epsilon, tuple(input_shape)

        def dense(units, name, inputs):
            layer = keras.layers.Dense(
                units,
                kernel_initializer="glorot_uniform",
                bias_initializer="zeros",
                dtype=sublayer_dtype(self, name),
                name=name,
            )
            layer.build(shape[:-1] + (inputs,))
            return layer

        self.in_norm = make_norm(self.norm, eps, "in_norm", dtype)
        self.in_norm.build(shape)
        self.in_proj = dense(self.mlp_dim + 3 * hidden_dim, "in_proj", hidden_dim)
        heads = 2 * self.num_heads if self.differential else self.num_heads
        if self.qk_norm:
            build_qk_norms(self, shape[:-1] + (heads, head_dim), shape[:-1] + (heads, head_dim))
        if self.differential:
            diff.add_differential_weights(self, head_dim)
        if self.fused_output:
            self.out_proj = dense(hidden_dim, "out_proj", hidden_dim + self.mlp_dim)
        else:
            self.attention_out = dense(hidden_dim, "attention_out", hidden_dim)
            self.mlp_out = dense(hidden_dim, "mlp_out", self.mlp_dim)
        if self.layer_scale_init_value is not None:
            self.layer_scale = self.add_weight(
                name="layer_scale",
                shape=(hidden_dim,),
                initializer=keras.initializers.Constant(self.layer_scale_init_value),
            )
        dropout = functools.partial(keras.layers.Dropout, dtype=dtype)
        self.attention_dropout = dropout(self.attention_dropout_rate, name="attention_dropout")
        self.mlp_dropout = dropout(self.dropout_rate, name="mlp_dropout")
        self.drop_path = DropPath(self.drop_path_rate, dtype=dtype, name="drop_path")
        self.drop_path.build(shape)
        self.built = True

    def mix(self, inputs, training, return_scores, rotary, bias, mask):
        diff.check_no_rotary_or_bias(self, rotary, bias)
        inputs = ops.cast(inputs, self.compute_dtype)
        d, heads = self.hidden_dim, self.num_heads
        y = self.in_proj(self.in_norm(inputs))
        hidden = y[..., : self.mlp_dim]
        q, k, v = (y[..., self.mlp_dim + i * d : self.mlp_dim + (i + 1) * d] for i in range(3))
        batch, tokens = ops.shape(inputs)[0], ops.shape(inputs)[1]
        qk_heads = 2 * heads if self.differential else heads
        q = ops.reshape(q, (batch, tokens, qk_heads, self.head_dim))
        k = ops.reshape(k, (batch, tokens, qk_heads, self.head_dim))
        v = ops.reshape(v, (batch, tokens, heads, d // heads))
        if self.qk_norm:
            q, k = self.query_norm(q), self.key_norm(k)
        if self.differential:
            options = dict(mask=mask, dropout=self.attention_dropout, training=training)
            attended, scores = diff.differential_attention(self, q, k, v, **options)
        else:
            attended, scores = self._attention(q, k, v, mask, training)
        attended = ops.reshape(attended, (batch, tokens, d))
        hidden = mlp_activation(hidden, self.activation, self.approximate_gelu)
        hidden = self.mlp_dropout(hidden, training=training)
        if self.fused_output:
            out = self.out_proj(ops.concatenate([attended, hidden], axis=-1))
        else:
            out = self.attention_out(attended) + self.mlp_out(hidden)
        if self.layer_scale_init_value is not None:
            out = out * ops.cast(self.layer_scale, out.dtype)
        out = inputs + self.drop_path(out, training=training)
        return (out, scores) if return_scores else out

    def _attention(self, query, key, value, mask, training):
        """Softmax attention of `(B, T, heads, head_dim)` heads: (output, weights)."""
        weights = softmax_weights(query, key, scale=1.0 / math.sqrt(self.head_dim), mask=mask)
        dropped = self.attention_dropout(weights, training=training)
        return ops.einsum("bhqk,bkhd->bqhd", dropped, value), weights

    def get_config(self):
        config = super().get_config()  # "dtype" with the quantized sublayers' policies
        names = ("qk_norm", "activation", "norm", "fused_output", "attention_type", "block_index")
        config.update(config_values(self, BLOCK_CONFIG + names))
        return config
