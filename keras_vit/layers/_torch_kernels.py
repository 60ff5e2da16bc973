"""PyTorch fast path of the ViT blocks (backend-specific, imported only under the torch backend).

The one module for keras_vit's backend adapters. On PyTorch, the encoder blocks (one adapter
per block class: `transformer_block` for the pre-norm `TransformerBlock`, `post_norm_block`,
`parallel_block`; each reads the block's public sublayers, a parallel block's through
`branches()`) and
`MultiHeadSelfAttention` compute through these functions: the layers' own variables, read
once per call, into plain `torch.nn.functional` calls, with no Keras layer call or `keras.ops`
dispatch inside the block. In a ViT-B/16-deep model at tiny width (benchmarks/bench_overhead.py)
those per-sublayer calls cost more than the arithmetic; here a block is one Keras layer call
and about 20 PyTorch ops, as in timm.

Same function, same variables, same random draws as the portable `keras.ops` path, which stays
the reference (tested against it, outputs and gradients, on every block option):

- LayerNorm: `F.layer_norm` in at least float32, cast back (what `ops.layer_normalization`
  does on PyTorch);
- dense layers: `F.linear` (bias inside `addmm`) on the Keras kernels' `(in, out)` layout; the
  attention's `(D, heads, head_dim)` kernels as `(D, D)` views;
- attention: `F.scaled_dot_product_attention` on strided `(B, heads, T, head_dim)` views, scale
  `1 / sqrt(head_dim)`; the QK-norm LayerNorms over the head width;
- GELU: `F.gelu` (the same call as `ops.gelu` on PyTorch); QuickGELU through
  `keras_vit.layers.activations`;
- dropout and drop path: the Keras layers' own `call` (their seed generators, in the same order)
  and only when training with a rate above zero; otherwise they are the identity and skipped;
- variables: what `Variable.value` gives (autocast under mixed precision, a stateless scope's
  values, symbolic tensors), with its scope look-ups done once per call (`variable_reader`).

What takes the portable path instead: a dense layer that is quantized (int8, ...) or has LoRA
enabled (that layer alone: it runs its own Keras call); the whole attention when one of its
projections is such a layer, when attention dropout is active (training with
`attention_dropout_rate > 0`), or when the attention weights are asked for; a block with
differential attention (`attention_type="differential"`: the block's guard, and
`attention_is_plain` for the attention) and a `ParallelScalingBlock` (its own `keras.ops` call;
`run_graph` calls it like any other layer).

The switch: `KERAS_VIT_TORCH_KERNELS=0` (read at import) or
`keras_vit.layers.attention.portable_path()` (a context manager) runs the `keras.ops` path.
"""

import numpy as np
import torch
import torch.nn.functional as F
from keras.src import backend
from keras.src.backend.common import global_state
from keras.src.backend.common.stateless_scope import in_stateless_scope
from keras.src.backend.common.variables import get_autocast_scope, standardize_dtype
from keras.src.backend.torch.core import get_device
from keras.src.distribution import distribution_lib
from keras.src.models.functional import unpack_singleton
from keras.src.utils.python_utils import is_default
from torch.nn.modules import module as torch_module

from keras_vit.layers.activations import mlp_activation
from keras_vit.layers.fake_quant import QuantizationAware

_HALF = (torch.float16, torch.bfloat16)


def _full_read(variable):
    return variable.value


def _raw_read(variable):
    return variable._value


def variable_reader():
    """How this call reads variables: `Variable.value`, or the variable's own tensor.

    `Variable.value` looks up three scopes at every read (stateless scope, autocast scope,
    symbolic "meta" device), 3-10 us each time, 16 reads per block. The look-ups are done once
    per call here: when none applies (a float32 model called eagerly, statefully), `.value` is
    the variable's own tensor (`_value`), which is read directly; otherwise `.value` is used.
    """
    if in_stateless_scope() or get_autocast_scope() is not None or str(get_device()) == "meta":
        return _full_read
    return _raw_read


def _cast(x, dtype):
    return x if x.dtype == dtype else x.to(dtype)


def layer_norm(x, norm, read=_full_read):
    """`keras.layers.LayerNormalization(x)` (last axis, centre and scale) in float32 or wider."""
    y = x.float() if x.dtype in _HALF else x
    out = F.layer_norm(y, (y.shape[-1],), read(norm.gamma), read(norm.beta), norm.epsilon)
    return _cast(out, x.dtype)


def is_plain(layer):
    """A float `Dense` / `EinsumDense` without LoRA nor fake quantization (QAT): one
    `F.linear` (no activation)."""
    return (
        layer.quantization_mode is None
        and not layer.lora_enabled
        and not isinstance(layer, QuantizationAware)
    )


def _weights(layer, dtype, in_features, read):
    """A plain layer's kernel, an `(out, in)` view for `F.linear`, and its bias (flat, or None)."""
    kernel = _cast(read(layer._kernel), dtype)  # what `layer.kernel` is for a plain layer
    if kernel.ndim != 2:  # EinsumDense (D, heads, head_dim) or (heads, head_dim, D)
        kernel = kernel.reshape(in_features, -1)
    if layer.bias is None:  # q/v-only biases: the key has none
        return kernel.t(), None
    bias = _cast(read(layer.bias), dtype)
    if bias.ndim != 1:
        bias = bias.reshape(-1)
    return kernel.t(), bias


def linear(layer, x, read=_full_read):
    """A dense sublayer on `x`: `F.linear` when plain, the layer's own Keras call otherwise."""
    if not is_plain(layer):
        return layer(x)
    kernel, bias = _weights(layer, x.dtype, x.shape[-1], read)
    return F.linear(x, kernel, bias)


def attention_is_plain(attention):
    if getattr(attention, "inner_norm", False) or getattr(attention, "num_key_value_heads", None):
        return False  # EVA-CLIP's inner norm, grouped-query attention: the Keras call
    if getattr(attention, "differential", False):
        return False  # DifferentialAttention: the keras.ops path
    layers = (attention.query_dense, attention.key_dense, attention.value_dense)
    return all(is_plain(layer) for layer in layers + (attention.output_dense,))


def self_attention(attention, x, read=None, bias=None, mask=None):
    """`MultiHeadSelfAttention(x)` `(B, T, D)` without dropout; its projections must be plain.

    `bias`: an optional additive attention bias broadcastable to `(B, heads, T, T)` (the
    `attn_mask` of `F.scaled_dot_product_attention`, in the queries' dtype). `mask`: None or
    a boolean mask broadcastable to `(B, heads, T, T)` (True: attend), passed as the boolean
    `attn_mask` (the portable path's masked softmax); with a bias, the masked pairs of the
    bias are set to the lowest float.
    """
    read = read or variable_reader()
    batch, tokens, width = x.shape
    heads = attention.num_heads

    def project(layer):  # (B, T, D) -> (B, heads, T, head_dim), a strided view
        kernel, bias = _weights(layer, x.dtype, width, read)
        out = F.linear(x, kernel, bias)  # no -1: an empty batch has no size to infer it from
        return out.view(batch, tokens, heads, out.shape[-1] // heads).transpose(1, 2)

    query = project(attention.query_dense)
    key = project(attention.key_dense)
    value = project(attention.value_dense)
    if attention.qk_norm:
        query = layer_norm(query, attention.query_norm, read)
        key = layer_norm(key, attention.key_norm, read)
    attn_mask = mask
    if bias is not None:
        bias = _cast(bias, query.dtype)
        attn_mask = bias
        if mask is not None:
            attn_mask = torch.where(mask, bias, torch.finfo(bias.dtype).min)
    out = F.scaled_dot_product_attention(
        query, key, value, attn_mask=attn_mask, scale=attention._scale
    )
    out = out.transpose(1, 2).reshape(batch, tokens, width)
    kernel, bias = _weights(attention.output_dense, x.dtype, width, read)
    return F.linear(out, kernel, bias)


def _dropout(layer, x, training):
    """A Keras `Dropout` / `DropPath` sublayer: its own `call` (same draws), or the identity."""
    if training and layer.rate > 0:
        return layer.call(x, training=True)
    return x


# --- the block adapters: one per block class, through its public sublayers ---------------------


def _attention(attention, x, training, bias, mask, read):
    """A block's attention core on normed tokens: `self_attention`, or its own Keras call."""
    if (training and attention.attention_dropout_rate > 0) or not attention_is_plain(attention):
        return attention(x, training=training, attention_bias=bias, attention_mask=mask)
    return self_attention(attention, x, read, bias, mask)


def _scaled(x, scale, read):
    """`x` times a LayerScale weight (None: no LayerScale)."""
    return x if scale is None else x * _cast(read(scale), x.dtype)


def _mlp(block, x, training, read, dense_1, dense_2):
    """A block's plain MLP on `x`: `dense_1`, activation, dropout, inner norm, `dense_2`."""
    y = linear(dense_1, x, read)
    if block.activation == "gelu":
        y = F.gelu(y, approximate="tanh" if block.approximate_gelu else "none")
    else:
        y = mlp_activation(y, block.activation, block.approximate_gelu)
    y = _dropout(block.mlp_dropout_1, y, training)
    if block.mlp_inner_norm:  # BEiT-3's norm of the hidden activations
        y = layer_norm(y, block.mlp_hidden_norm, read)
    return _dropout(block.mlp_dropout_2, linear(dense_2, y, read), training)


def transformer_block(block, inputs, training, bias=None, mask=None):
    """`TransformerBlock._forward` (pre-norm) without attention scores; `inputs` in the compute
    dtype.

    `bias`: the block's additive attention bias (relative position bias), or None. `mask`:
    None or the attention's boolean 4-D mask (`attention.attention_mask_4d`).
    """
    read = variable_reader()
    scaled = block.layer_scale_init_value is not None
    x = layer_norm(inputs, block.attention_norm, read)
    x = _attention(block.attention, x, training, bias, mask, read)
    x = _dropout(block.attention_dropout, x, training)
    x = _scaled(x, block.attention_scale if scaled else None, read)
    x = inputs + _dropout(block.drop_path, x, training)
    y = layer_norm(x, block.mlp_norm, read)
    y = _mlp(block, y, training, read, block.mlp_dense_1, block.mlp_dense_2)
    y = _scaled(
        y, block.mlp_scale if scaled and not block.attention_only_layer_scale else None, read
    )
    return x + _dropout(block.drop_path, y, training)


def post_norm_block(block, inputs, training, bias=None, mask=None):
    """`PostNormBlock._forward` (`x + LN(f(x))`) without attention scores (as
    `transformer_block`)."""
    read = variable_reader()
    x = _attention(block.attention, inputs, training, bias, mask, read)
    x = _dropout(block.attention_dropout, x, training)
    x = inputs + _dropout(block.drop_path, layer_norm(x, block.attention_norm, read), training)
    y = _mlp(block, x, training, read, block.mlp_dense_1, block.mlp_dense_2)
    return x + _dropout(block.drop_path, layer_norm(y, block.mlp_norm, read), training)


def parallel_block(block, inputs, training, bias=None, mask=None):
    """`ParallelBlock._forward`: the attention branches summed, then the MLP branches (the
    dropout and drop-path draws in the portable path's order)."""
    read = variable_reader()
    branches = block.branches()
    total = 0.0
    for branch in branches:
        x = layer_norm(inputs, branch["attention_norm"], read)
        x = _attention(branch["attention"], x, training, bias, mask, read)
        x = _scaled(
            _dropout(block.attention_dropout, x, training), branch.get("attention_scale"), read
        )
        total = total + _dropout(block.drop_path, x, training)
    x = inputs + total
    total = 0.0
    for branch in branches:
        y = layer_norm(x, branch["mlp_norm"], read)
        y = _mlp(block, y, training, read, branch["mlp_dense_1"], branch["mlp_dense_2"])
        total = total + _dropout(
            block.drop_path, _scaled(y, branch.get("mlp_scale"), read), training
        )
    return x + total


def patch_projection(encoder, images):
    """`PatchEncoder.project`: `(B, H, W, C)` images -> `(B, N, D)` patch embeddings.

    The strided convolution `keras.ops.conv` runs on PyTorch (`F.conv2d` on channels-last
    memory, the `(ph, pw, C, D)` kernel as `(D, C, ph, pw)` in channels-last memory), without
    its dispatch and the two layout copies of the images (NHWC -> NCHW -> channels-last).
    """
    if not isinstance(images, torch.Tensor):  # NumPy, as ops.conv takes
        images = backend.convert_to_tensor(images)
    kernel = encoder.kernel.value.permute(3, 2, 0, 1)
    kernel = kernel.contiguous(memory_format=torch.channels_last)
    images = images.permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
    x = F.conv2d(images, kernel, stride=encoder.patch_size)
    # No -1: an empty batch (0 images) has no size to infer it from.
    x = x.permute(0, 2, 3, 1).reshape(x.shape[0], x.shape[2] * x.shape[3], encoder.hidden_dim)
    return x + encoder.bias.value


# --- the model's graph walk --------------------------------------------------------------------
# A functional model calls each of its layers through Keras' `Layer.__call__` (input
# conversion through `tree.map_structure`, signature binding, call context, name and autocast
# scopes, mask bookkeeping): in the ViT-B/16-deep skeleton of benchmarks/bench_overhead.py
# about a third of `predict_on_batch`. `run_graph` walks the same graph with Keras' own
# `_run_through_graph` and calls each layer's `call` with what `Layer.__call__` would have
# done for it in that case (the same training value, input casts and autocast scope), so
# outputs and gradients are the same tensors. A layer whose call needs more takes the full
# Keras call: unbuilt, quantized (`quantized_call`), under `keras.RematScope`, with
# PyTorch module hooks, an activity regularizer, its own `compute_mask` or input spec, other
# call-context arguments than `training`, a `training` default other than None, or masked
# inputs; and the whole model does outside a Keras call (no call context), under a
# distribution, or on symbolic inputs.

_KERAS_CALL = "keras"


def _torch_hooks():
    return (
        torch_module._global_forward_hooks
        or torch_module._global_forward_pre_hooks
        or torch_module._global_backward_hooks
        or torch_module._global_backward_pre_hooks
    )


def _lean_kind(layer):
    """How `run_graph` calls `layer`: `_KERAS_CALL`, or None (the lean call)."""
    if (
        not layer.built
        or getattr(layer, "quantization_mode", None) is not None
        or layer._remat_mode is not None
        or layer._forward_hooks
        or layer._forward_pre_hooks
        or layer._backward_hooks
        or layer._backward_pre_hooks
        or layer.activity_regularizer is not None
        or layer.input_spec is not None
        or not is_default(type(layer).compute_mask)
        or set(layer._call_context_args) != {"training"}
    ):
        return _KERAS_CALL
    parameter = layer._call_signature.parameters.get("training")
    if parameter is not None and parameter.default not in (None, parameter.empty):
        return _KERAS_CALL
    return None


def _keras_call(layer, training):
    """What `keras.src.models.functional.operation_fn` calls: the layer's Keras call."""

    def call(*args, **kwargs):
        if training is not None and "training" in layer._call_context_args:
            kwargs["training"] = training
        return layer(*args, **kwargs)

    return call


def _leaves_plain(values):
    """Whether every leaf is a tensor without a Keras mask, or None / a Python scalar."""
    for value in values:
        if isinstance(value, torch.Tensor):
            if getattr(value, "_keras_mask", None) is not None:
                return False
        elif isinstance(value, (tuple, list)):
            if not _leaves_plain(value):
                return False
        elif value is not None and not isinstance(value, (bool, int, float, str)):
            return False
    return True


def _lean_call(layer, training, context):
    """`layer.__call__` as Keras runs it on built layers and plain eager tensors."""
    if _lean_kind(layer) is _KERAS_CALL:
        return _keras_call(layer, training)

    def convert(x):  # DTypePolicy.convert_input on a tensor
        if (
            isinstance(x, torch.Tensor)
            and layer.autocast
            and x.is_floating_point()
            and standardize_dtype(x.dtype) != dtype
        ):
            return backend.cast(x, dtype)
        if isinstance(x, (tuple, list)):
            return type(x)(convert(item) for item in x)
        return x

    def call(*args, **kwargs):
        if not (_leaves_plain(args) and _leaves_plain(kwargs.values())):
            return _keras_call(layer, training)(*args, **kwargs)
        # Layer._resolve_and_populate_arg("training"): passed, else the call context's value,
        # else the signature's default (None here).
        value = training if training is not None else context.get_value("training")
        context.set_value("training", value)
        if value is not None and layer._call_has_context_arg.get("training", False):
            kwargs["training"] = value
        if layer._convert_input_args:
            args = tuple(convert(x) for x in args)
            kwargs = {name: convert(x) for name, x in kwargs.items()}
        if not layer._called:  # (Layer.__setattr__ tracks every assignment: set it once)
            layer._called = True
        # Layer.__call__'s autocast scope.
        scope, compute = backend.get_autocast_scope(), layer.compute_dtype
        new_scope = None
        if scope is not None:
            if not layer.autocast or not backend.is_float_dtype(compute):
                new_scope = backend.AutocastScope(None)
            elif scope.dtype != compute:
                new_scope = backend.AutocastScope(compute)
        elif compute != layer.variable_dtype:
            new_scope = backend.AutocastScope(compute)
        if new_scope is None:
            return layer.call(*args, **kwargs)
        with new_scope:
            return layer.call(*args, **kwargs)

    dtype = standardize_dtype(layer.input_dtype)
    return call


# The Keras internals the lean walk reads (keras/src/layers/layer.py, models/functional.py):
# where this Keras lacks one (another Keras release), every model takes Keras' own call.
_LAYER_INTERNALS = (
    "_call_context_args", "_call_has_context_arg", "_convert_input_args", "_remat_mode",
    "_call_signature", "_called", "_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
    "_backward_pre_hooks", "autocast", "input_dtype", "input_spec", "activity_regularizer",
)  # fmt: skip
_MODEL_INTERNALS = ("_standardize_inputs", "_run_through_graph")


def keras_has_internals(model):
    """Whether this Keras has every internal `run_graph` relies on (checked on `model`)."""
    return all(hasattr(model, name) for name in _LAYER_INTERNALS + _MODEL_INTERNALS)


def run_graph(model, inputs, training):
    """`Functional.call(inputs, training)` with each layer called as in `_lean_call`.

    Returns None where the model must take Keras' own call (see above), and on a Keras
    without the internals the walk reads (`keras_has_internals`).
    """
    context = global_state.get_global_attribute("current_call_ctx")
    flat = tuple(inputs.values()) if isinstance(inputs, dict) else (inputs,)
    if (
        context is None
        or not keras_has_internals(model)
        or distribution_lib.distribution() is not None
        # tensors, or NumPy arrays (a dict of them reaches the model's call unconverted:
        # `_standardize_inputs` converts them, as in Keras' own call); never symbolic ones
        or not all(isinstance(x, (torch.Tensor, np.ndarray)) for x in flat)
        or not _leaves_plain(tuple(x for x in flat if isinstance(x, torch.Tensor)))
        or _torch_hooks()
    ):
        return None
    inputs = model._standardize_inputs(inputs)
    outputs = model._run_through_graph(
        inputs, operation_fn=lambda layer: _lean_call(layer, training, context)
    )
    return unpack_singleton(outputs)
