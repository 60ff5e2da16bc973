"""`EncoderBlock`: what the attention-and-MLP block kinds share (a base, not a block of its own).

`TransformerBlock` (pre-norm), `PostNormBlock` (residual post-norm) and `ParallelBlock`
(timm's `ParallelThingsBlock`) are separate classes (`keras_vit.layers.block_kinds` registers
them by value). They share, from here: the arguments every kind takes and their checks, the
attention core (`MultiHeadSelfAttention` or `DifferentialAttention`, its norm and dropout), the
MLP family (`mlp_dense_1`, activation, `mlp_dense_2`, or a `SwiGLU`), the relative position
bias, LayerScale weights, drop path, rematerialisation (`BlockRemat`) and the call protocol
(`TokenMixer`). Each subclass adds its own arguments, their checks, its `_forward` and its
`get_config`.

The options a kind does not take are class attributes at their neutral values here (a
`ParallelBlock` has `mlp = "mlp"` and `relative_position_grid = None`, a `PostNormBlock`
`layer_scale_init_value = None`), so code reading a block's options (LoRA, the timm tables,
`read_config`) reads every kind alike.

Sublayer names and creation order are the ones `TransformerBlock` always had: `.keras` files
saved before the split load into each class unchanged.
"""

import functools
import inspect

import keras
from keras import ops

from keras_vit.layers import attention as attention_module
from keras_vit.layers._checks import (
    check_bool,
    check_non_negative_int,
    check_positive_int,
    check_positive_int_pair,
    check_rate,
    check_token_shape,
)
from keras_vit.layers._legacy_layout import read_legacy_layout
from keras_vit.layers._quantization import sublayer_dtype
from keras_vit.layers._token_mixer import TokenMixer
from keras_vit.layers.activations import check_activation, mlp_activation
from keras_vit.layers.attention import MultiHeadSelfAttention, check_epsilon
from keras_vit.layers.block_remat import BlockRemat
from keras_vit.layers.differential_attention import DifferentialAttention, check_attention_type
from keras_vit.layers.drop_path import DropPath
from keras_vit.layers.norms import check_norm, make_norm
from keras_vit.layers.relative_position import RelativePositionBias, RelativePositionMLP
from keras_vit.layers.sharding import COLUMN, ROW
from keras_vit.layers.swiglu import SwiGLU

__all__ = ["EncoderBlock"]

# The option tables of the blocks, declared once (models/config_checks.py imports them): the
# MLP kinds (`mlp`) and the residual norm placements (a block's `block_norm`, and earlier
# versions' `ViTConfig` argument, now `block_kind`: pre-norm `TransformerBlock`, residual
# post-norm `PostNormBlock`).
MLPS = ("mlp", "swiglu")
BLOCK_NORMS = ("pre", "post")


def check_mlp(mlp):
    """`mlp` if it is one of `MLPS`, else a ValueError naming them."""
    if mlp not in MLPS:
        raise ValueError(f"mlp must be one of {MLPS}. Received: mlp={mlp!r}")
    return mlp


# The arguments every kind takes after `num_heads` and `mlp_dim`, and their defaults: declared
# once (`TransformerBlock` lists them in its signature in this order, the other kinds take them
# by keyword).
COMMON_ARGUMENTS = {
    "dropout_rate": 0.0,
    "attention_dropout_rate": 0.0,
    "drop_path_rate": 0.0,
    "layer_norm_epsilon": 1e-6,
    "approximate_gelu": True,
    "remat": False,
    "qk_norm": False,
    "activation": "gelu",
    "key_bias": True,
    "norm": "layernorm",
}


class EncoderBlock(BlockRemat, TokenMixer):
    """Base of the attention-and-MLP encoder blocks (see the module docstring).

    Args (every kind): `num_heads`, `mlp_dim`, `dropout_rate`, `attention_dropout_rate`,
    `drop_path_rate`, `layer_norm_epsilon`, `approximate_gelu`, `remat`, `qk_norm`,
    `activation`, `key_bias`, `norm`: see `keras_vit.layers.TransformerBlock`.
    """

    # Tensor-parallel roles of the projections (keras_vit.layers.sharding).
    sharding_roles = {r"mlp_dense_1(_\d+)?": COLUMN, r"mlp_dense_2(_\d+)?": ROW}

    # The options of other kinds, at their neutral values (a subclass taking one sets it).
    layer_scale_init_value = None
    attention_only_layer_scale = False
    mlp = "mlp"
    mlp_inner_norm = False
    attention_inner_norm = False
    relative_position_grid = None
    relative_position_mlp_dim = None
    attention_type = "standard"
    block_index = 0
    num_key_value_heads = None
    num_parallel = 1
    block_norm = "pre"
    # The PyTorch fast path's adapter of this kind (a function of `_torch_kernels`), or None.
    torch_adapter = None

    def __init__(self, num_heads, mlp_dim, **kwargs):
        given = {name: kwargs.pop(name, value) for name, value in COMMON_ARGUMENTS.items()}
        super().__init__(**kwargs)  # Keras names any argument left that the kind does not take
        self.norm = check_norm(given["norm"])
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.mlp_dim = check_positive_int(mlp_dim, "mlp_dim")
        for name in ("dropout_rate", "attention_dropout_rate", "drop_path_rate"):
            setattr(self, name, check_rate(given[name], name))
        self.layer_norm_epsilon = check_epsilon(given["layer_norm_epsilon"])
        self.approximate_gelu = check_bool(given["approximate_gelu"], "approximate_gelu")
        remat = check_bool(given["remat"], "remat")
        if remat and not hasattr(keras, "remat"):
            raise ValueError(
                f"remat=True needs keras.remat (Keras >= 3.9). Received: Keras {keras.__version__}"
            )
        self.remat = remat
        self.qk_norm = check_bool(given["qk_norm"], "qk_norm")
        self.activation = check_activation(given["activation"])
        self.key_bias = check_bool(given["key_bias"], "key_bias")
        self.supports_masking = False

    @classmethod
    def arguments(cls):
        """The names of the arguments this kind takes (besides the Keras layer's own)."""
        own = inspect.signature(cls.__init__).parameters
        return {name for name in own if name not in ("self", "kwargs")} | set(COMMON_ARGUMENTS)

    def _set_options(
        self,
        mlp,
        mlp_inner_norm,
        attention_inner_norm,
        relative_position_grid,
        relative_position_mlp_dim,
        attention_type,
        block_index,
        num_key_value_heads,
    ):
        """Checks and sets the MLP, attention and position options of the kinds taking them
        (`TransformerBlock`, `PostNormBlock`; see `TransformerBlock` for each)."""
        self.mlp = check_mlp(mlp)
        self.mlp_inner_norm = check_bool(mlp_inner_norm, "mlp_inner_norm")
        self.attention_inner_norm = check_bool(attention_inner_norm, "attention_inner_norm")
        grid = relative_position_grid
        if grid is not None:
            grid = check_positive_int_pair(grid, "relative_position_grid")
        self.relative_position_grid = grid
        check_positive_int(relative_position_mlp_dim, "relative_position_mlp_dim", allow_none=True)
        if relative_position_mlp_dim is not None and grid is None:
            raise ValueError(
                "relative_position_mlp_dim needs relative_position_grid. "
                f"Received: relative_position_mlp_dim={relative_position_mlp_dim}"
            )
        self.relative_position_mlp_dim = relative_position_mlp_dim
        self.attention_type = check_attention_type(
            attention_type, key_bias=self.key_bias, relative_position_grid=grid,
            inner_norm=attention_inner_norm,
        )  # fmt: skip
        self.block_index = check_non_negative_int(block_index, "block_index")
        self.num_key_value_heads = num_key_value_heads  # checked by the attention layer

    # --- build ---------------------------------------------------------------------------------

    def build(self, input_shape):
        hidden_dim = check_token_shape(input_shape, self.num_heads, self.name)
        shape = tuple(input_shape)
        dtype = self.dtype_policy
        eps = self.layer_norm_epsilon
        self.attention_norm = make_norm(self.norm, eps, "attention_norm", dtype)
        self.attention = self._make_attention()
        dense = self._dense_factory()
        self.attention_dropout = self._dropout("attention_dropout")
        self.mlp_norm = make_norm(self.norm, eps, "mlp_norm", dtype)
        self._build_branches(shape, hidden_dim, dense)
        self._build_mlp(shape, hidden_dim, dense)
        self.drop_path = DropPath(self.drop_path_rate, dtype=dtype, name="drop_path")
        self.attention_norm.build(shape)
        self.attention.build(shape)
        self.mlp_norm.build(shape)
        self.drop_path.build(shape)  # no weights, but model.quantize() needs every layer built
        self._build_relative_position_bias(shape)
        self._build_layer_scale(hidden_dim)
        self.built = True

    def _make_attention(self, name="attention"):
        """The attention core (unbuilt): standard or differential, with the block's options."""
        options = dict(qk_norm=self.qk_norm, layer_norm_epsilon=self.layer_norm_epsilon)
        options["norm"] = self.norm
        if self.attention_type == "differential":
            options["block_index"] = self.block_index
        else:
            options.update(key_bias=self.key_bias, inner_norm=self.attention_inner_norm)
            if self.num_key_value_heads is not None:  # grouped-query attention
                options["num_key_value_heads"] = self.num_key_value_heads
        attention = dict(standard=MultiHeadSelfAttention, differential=DifferentialAttention)
        return attention[self.attention_type](
            num_heads=self.num_heads,
            attention_dropout_rate=self.attention_dropout_rate,
            dtype=sublayer_dtype(self, name),
            name=name,
            **options,
        )

    def _dropout(self, name):
        return keras.layers.Dropout(self.dropout_rate, dtype=self.dtype_policy, name=name)

    def _dense_factory(self):
        """`dense(units, name)`: the MLP's Dense layers, all with one bias initializer."""
        # One initializer for every MLP layer, as before: a second instance would draw another
        # default seed and change every later random draw of a seeded run.
        bias_initializer = keras.initializers.RandomNormal(stddev=1e-6)
        return functools.partial(self._dense, bias_initializer=bias_initializer)

    def _dense(self, units, name, bias_initializer):
        return keras.layers.Dense(
            units,
            kernel_initializer="glorot_uniform",
            bias_initializer=bias_initializer,
            dtype=sublayer_dtype(self, name),  # quantized in a reloaded quantized model
            name=name,
        )

    def _build_branches(self, shape, hidden_dim, dense):
        """Sublayers built before the MLP: none here (`ParallelBlock`'s other branches)."""

    def _build_mlp(self, shape, hidden_dim, dense):
        """The MLP family: a `SwiGLU` (`mlp="swiglu"`) or `mlp_dense_1`, act, `mlp_dense_2`."""
        eps = self.layer_norm_epsilon
        if self.mlp == "swiglu":
            self.swiglu = SwiGLU(
                self.mlp_dim,
                inner_norm=self.mlp_inner_norm,
                layer_norm_epsilon=eps,
                dropout_rate=self.dropout_rate,
                norm=self.norm,
                dtype=sublayer_dtype(self, "mlp"),
                name="mlp",
            )
            self.swiglu.build(shape)
            return
        self.mlp_dense_1 = dense(self.mlp_dim, "mlp_dense_1")
        self.mlp_dropout_1 = self._dropout("mlp_dropout_1")
        self.mlp_dense_2 = dense(hidden_dim, "mlp_dense_2")
        self.mlp_dropout_2 = self._dropout("mlp_dropout_2")
        self.mlp_dense_1.build(shape)
        self.mlp_dense_2.build(shape[:-1] + (self.mlp_dim,))
        if self.mlp_inner_norm:  # BEiT-3's norm before mlp_dense_2
            self.mlp_hidden_norm = make_norm(self.norm, eps, "mlp_inner_norm", self.dtype_policy)
            self.mlp_hidden_norm.build(shape[:-1] + (self.mlp_dim,))

    def _build_relative_position_bias(self, shape):
        grid, dtype = self.relative_position_grid, self.dtype_policy
        if grid is not None and self.relative_position_mlp_dim is None:
            self.relative_position_bias = RelativePositionBias(
                self.num_heads, grid, dtype=dtype, name="relative_position_bias"
            )
            self.relative_position_bias.build(shape)
        elif grid is not None:
            if shape[1] is None or shape[1] < grid[0] * grid[1]:
                raise ValueError(
                    f"{self.name}: a relative position MLP for the grid {grid} needs at least "
                    f"{grid[0] * grid[1]} tokens, a known count. Received: shape={shape}"
                )
            self.relative_position_bias = RelativePositionMLP(
                self.num_heads,
                grid,
                self.relative_position_mlp_dim,
                num_prefix_tokens=shape[1] - grid[0] * grid[1],
                dtype=dtype,
                name="relative_position_bias",
            )
            self.relative_position_bias.build(shape)

    def _build_layer_scale(self, hidden_dim):
        if self.layer_scale_init_value is None:
            return
        init = keras.initializers.Constant(self.layer_scale_init_value)
        self.attention_scale = self.add_weight(
            name="attention_scale", shape=(hidden_dim,), initializer=init
        )
        if not self.attention_only_layer_scale:
            self.mlp_scale = self.add_weight(
                name="mlp_scale", shape=(hidden_dim,), initializer=init
            )

    def load_own_variables(self, store):
        # `.keras` files of earlier versions hold post-norm and parallel blocks under the group
        # name of a `TransformerBlock` (`_legacy_layout`).
        super().load_own_variables(read_legacy_layout(store))

    # --- call ----------------------------------------------------------------------------------

    def branches(self):
        """Every branch's sublayers (and LayerScale weights) by role: one branch here.

        A list of dicts with `attention_norm`, `attention`, `mlp_norm`, `mlp_dense_1`,
        `mlp_dense_2` (a plain MLP) and `attention_scale` / `mlp_scale` (LayerScale):
        what LoRA adapts and the PyTorch adapters compute with. A method, not a property: the
        `.keras` writer walks properties and would file the sublayers under its name.
        """
        names = ("attention_norm", "attention", "mlp_norm")
        names += ("mlp_dense_1", "mlp_dense_2") if self.mlp == "mlp" else ()
        first = {name: getattr(self, name) for name in names}
        scales = ("attention_scale", "mlp_scale") if self.layer_scale_init_value is not None else ()
        first.update({name: getattr(self, name) for name in scales if hasattr(self, name)})
        return [first]

    def mix(self, inputs, training, return_scores, rotary, bias, mask):
        # The residual stream runs in the compute dtype on every backend (bfloat16 under
        # mixed precision), whatever dtype the caller passed.
        inputs = ops.cast(inputs, self.compute_dtype)
        # (rotary embedding, attention bias, attention mask): functions of the grid, the
        # weights and the NaFlex validity only.
        context = (rotary, bias, mask)
        if self.remat and not return_scores and not self._remat_redraws_dropout(training):
            # Python flags (and the rotary embedding, shared bias and mask) stay outside the
            # rematerialised function (closed over), so jax.checkpoint / tf.recompute_grad see
            # the tokens only.
            return self._remat_call(inputs, training, context)
        return self._forward(inputs, training, return_scores, context)

    def _forward(self, inputs, training, return_attention_scores, context=(None, None, None)):
        """The block on `(B, T, D)` tokens in the compute dtype: its PyTorch adapter, or the
        kind's `_residuals` (the portable `keras.ops` path)."""
        rotary, bias, mask = context
        bias = self._attention_bias(inputs, bias)
        adapter = self._torch_adapter(rotary, return_attention_scores)
        if adapter is not None:
            return adapter(self, inputs, training, bias, mask)
        out, scores = self._residuals(inputs, training, return_attention_scores, rotary, bias, mask)
        return (out, scores) if return_attention_scores else out

    def _residuals(self, inputs, training, return_attention_scores, rotary, bias, mask):
        """The kind's residual branches (portable path): `(out, attention scores or None)`."""
        raise NotImplementedError

    def _attention_bias(self, inputs, shared):
        """The block's relative position bias plus a shared one (either may be None)."""
        if self.relative_position_grid is None:
            return shared
        own = self.relative_position_bias(inputs)
        return own if shared is None else own + shared

    def _torch_adapter(self, rotary, return_attention_scores):
        """The PyTorch adapter computing this call, or None (the portable `keras.ops` path).

        The adapters compute LayerNorm blocks with a standard attention and a plain MLP,
        without RoPE or attention scores; RMSNorm, SwiGLU, RoPE and differential attention
        take the portable path.
        """
        if self.torch_adapter is None or not attention_module.torch_fast_path():
            return None
        if rotary is not None or return_attention_scores or self.mlp != "mlp":
            return None
        if self.norm != "layernorm" or self.attention_type != "standard":
            return None
        from keras_vit.layers import _torch_kernels

        return getattr(_torch_kernels, self.torch_adapter)

    def _attend(self, normed, training, return_attention_scores, rotary, bias, mask):
        """The attention core and its output dropout: `(out, scores or None)`."""
        options = dict(training=training, rotary_embedding=rotary, attention_bias=bias)
        options["attention_mask"] = mask
        scores = None
        if return_attention_scores:
            x, scores = self.attention(normed, return_attention_scores=True, **options)
        else:
            x = self.attention(normed, **options)
        return self.attention_dropout(x, training=training), scores

    def _mlp_branch(self, x, training, norm_before=None, norm_after=None):
        """The MLP on `x`, with a norm before (pre-norm) or after (post-norm) it."""
        # On JAX the MLP runs on (batch * tokens, D) matrices: XLA on CPU computes the weight
        # gradients of a 3-D matmul through transposing copies as slow as the matmul itself;
        # 2-D keeps them plain GEMMs (ViT-S/16 training step 1.6x faster on 2 CPU cores). Same
        # numbers; TensorFlow is 4% slower with it and PyTorch indifferent, so only JAX does it.
        shape = ops.shape(x)
        flat = keras.backend.backend() == "jax"
        y = ops.reshape(x, (-1, shape[-1])) if flat else x
        if norm_before is not None:
            y = norm_before(y)
        y = self._mlp(y, training)
        if norm_after is not None:
            y = norm_after(y)
        return ops.reshape(y, shape) if flat else y

    def _mlp(self, y, training, dense_1=None, dense_2=None):
        """The MLP family on `y` (a branch's own dense layers if given)."""
        if self.mlp == "swiglu":
            return self.swiglu(y, training=training)
        y = (dense_1 or self.mlp_dense_1)(y)
        y = mlp_activation(y, self.activation, self.approximate_gelu)
        y = self.mlp_dropout_1(y, training=training)
        if self.mlp_inner_norm:
            y = self.mlp_hidden_norm(y)
        y = (dense_2 or self.mlp_dense_2)(y)
        return self.mlp_dropout_2(y, training=training)
