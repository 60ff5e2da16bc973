"""LoRA (low-rank adaptation) of keras_vit models through Keras' own `enable_lora`.

`enable_lora(model, rank)` calls Keras' `layer.enable_lora(rank, lora_alpha=alpha)` on the
chosen projections of every block (`model.blocks`; by default the attention's `query` and
`value`, as in Hu et al.) and freezes everything else except the classifiers (`model.heads`:
`head`, and `head_dist` of a distilled model). Keras keeps the frozen kernel `W` and learns
`lora_kernel_a` (A) and `lora_kernel_b` (B, zeros at first, so the outputs are unchanged until
training): the layer computes with `W + (alpha / rank) * A @ B`.

Keras factorises the kernel's last axis. For `mlp_dense_1`, `mlp_dense_2` (Dense, `(D, M)` and
`(M, D)`) and `attention_output` (`(heads, D / heads, D)`) that is the usual rank-`rank` update.
For `query`, `key` and `value`, whose kernels are `(D, heads, D / heads)`, A is
`(D, heads, rank)` and B `(rank, D / heads)`: one rank-`rank` update per head sharing B, which
has `heads` times the parameters of a LoRA on a fused `D x D` projection (ViT-B/16, rank 8,
query + value: 1.78M LoRA parameters instead of 0.29M).

Files: `model.save()` writes Keras' merged kernels (`W + scale * A @ B`) and no LoRA matrices,
so the `.keras` file loads as a plain model with the same outputs (Keras' own behaviour: the
LoRA structure is not part of the layers' configs). `save_lora_weights` writes the adapters
and the head (every trainable weight) to a small `.npz`, and `load_lora_weights` puts them on a
freshly built base model. `merge_lora` folds the adapters into the kernels in place and removes
them, for export.

Reference:
    Hu et al., 2021, "LoRA: Low-Rank Adaptation of Large Language Models", Sec. 4.
"""

import inspect

import keras
import numpy as np

from keras_vit.training.quantization import one_collection

# The targets and the settings' checks have one home, keras_vit.training.settings (no framework).
from keras_vit.training.settings import (  # noqa: F401  (re-exported)
    ALL_TARGETS,
    DEFAULT_TARGETS,
    PARALLEL_SCALING_TARGETS,
    SWIGLU_TARGETS,
)
from keras_vit.training.settings import LORA_TARGETS as TARGETS
from keras_vit.training.settings import check_lora_settings as check_settings

LORA_VARIABLES = ("lora_kernel_a", "lora_kernel_b")


def _block_targets(block):
    """The targets a block has: the attention's, then its MLP's (plain or SwiGLU)."""
    if hasattr(block, "fused_output"):  # a ParallelScalingBlock: its Dense layers
        out = ("out_proj",) if block.fused_output else ("attention_out", "mlp_out")
        return ("in_proj", *out)
    mlp = SWIGLU_TARGETS if block.mlp == "swiglu" else ("mlp_dense_1", "mlp_dense_2")
    return TARGETS[:4] + mlp


_ATTENTION_LAYERS = {
    "query": "query_dense",
    "key": "key_dense",
    "value": "value_dense",
    "attention_output": "output_dense",
}
_SWIGLU_LAYERS = {"mlp_gate": "gate_dense", "mlp_up": "up_dense", "mlp_down": "down_dense"}


def _target_layers(block, target):
    """The layers `target` names in `block`: one per branch (a parallel block, timm's
    `ParallelThingsBlock`, has `num_parallel` attentions and MLPs; each is adapted)."""
    if target not in _block_targets(block):
        mlp = getattr(block, "mlp", None)
        kind = {"swiglu": " with a SwiGLU MLP, mlp='swiglu'", "mlp": " with a GELU MLP, mlp='mlp'"}
        raise ValueError(
            f"{block.name} ({type(block).__name__}{kind.get(mlp, '')}) has no LoRA target "
            f"{target!r}; its targets are {_block_targets(block)}. Received: target={target!r}"
        )
    if target in PARALLEL_SCALING_TARGETS:
        return [getattr(block, target)]
    if target in _SWIGLU_LAYERS:
        return [getattr(block.swiglu, _SWIGLU_LAYERS[target])]
    branches = block.branches()
    if target in _ATTENTION_LAYERS:
        return [getattr(b["attention"], _ATTENTION_LAYERS[target]) for b in branches]
    return [b[target] for b in branches]


def _sublayers(layer):
    return layer._flatten_layers(include_self=False, recursive=False)


def _walk(layer, prefix=""):
    """`(name, layer)` of every layer inside `layer`, names joined by "/" (all depths)."""
    for sublayer in _sublayers(layer):
        name = prefix + sublayer.name
        yield name, sublayer
        yield from _walk(sublayer, name + "/")


def transformer_blocks(model):
    """The `TransformerBlock`s of a keras_vit model, by role (`model.blocks`; [] without)."""
    return list(getattr(model, "blocks", None) or [])


def _check_model(model, caller):
    if not isinstance(model, keras.Model):
        raise ValueError(f"{caller} expects a keras.Model. Received: {type(model).__name__}")
    blocks = transformer_blocks(model)
    if not blocks:
        raise ValueError(
            f"{caller} adapts the TransformerBlocks of a keras_vit model. Received: model "
            f"{model.name!r} with no TransformerBlock"
        )
    if not all(block.built for block in blocks):
        raise ValueError(f"{caller} needs a built model. Received: model {model.name!r} unbuilt")
    return blocks


def _keras_has_lora_alpha():
    return "lora_alpha" in inspect.signature(keras.layers.Dense.enable_lora).parameters


def get_lora_settings(model):
    """The LoRA settings of `model`'s blocks, or None when no block has LoRA.

    Args:
        model: a keras_vit model.

    Returns:
        `{"rank": int, "alpha": float, "targets": tuple}` (alpha as Keras applies it: the
        scale is `alpha / rank`), or None.

    Raises:
        ValueError: the blocks' LoRA layers disagree (different ranks, alphas or targets in
            different blocks), which `enable_lora` never makes.

    Example:

    >>> from keras_vit.models.vit import ViT
    >>> model = ViT("mu/8", image_size=16, num_classes=3)
    >>> get_lora_settings(model) is None
    True
    >>> get_lora_settings(enable_lora(model, rank=2, alpha=4))
    {'rank': 2, 'alpha': 4.0, 'targets': ('query', 'value')}
    """
    found = set()
    for block in transformer_blocks(model):
        layers = {t: _target_layers(block, t) for t in _block_targets(block)}
        enabled = tuple(
            t for t, group in layers.items() if any(getattr(x, "lora_enabled", 0) for x in group)
        )
        if not enabled:
            found.add(None)
            continue
        settings = {
            (x.lora_rank, float(x.lora_alpha) if x.lora_enabled else None)
            for t in enabled
            for x in layers[t]
        }
        found.update((rank, alpha, enabled) for rank, alpha in settings)
    if found in (set(), {None}):
        return None
    if len(found) != 1:
        raise ValueError(
            "The model's blocks carry different LoRA settings (rank, alpha, targets): "
            f"{sorted(found, key=str)}. keras_vit.enable_lora sets the same on every block."
        )
    rank, alpha, targets = found.pop()
    return {"rank": int(rank), "alpha": alpha, "targets": targets}


def _lora_layers(model):
    return [layer for _, layer in _walk(model) if getattr(layer, "lora_enabled", False)]


def _own_variables(layer):
    """The variables `layer` holds itself, not through its sublayers."""
    nested = {id(v) for sublayer in _sublayers(layer) for v in sublayer.weights}
    return [v for v in layer.weights if id(v) not in nested]


def _freeze(layer, heads):
    """Freezes `layer` except its LoRA matrices, the `heads` (ids of the classifier layers)
    and anything outside LoRA's path."""
    if id(layer) in heads:
        return
    if getattr(layer, "lora_enabled", False):
        for variable in layer.weights:
            if variable.name not in LORA_VARIABLES:
                variable.trainable = False
        return
    if not _lora_layers(layer):
        layer.trainable = False
        return
    # A layer holding LoRA layers (a block, its attention, a nested model): freeze its own
    # weights (e.g. LayerScale) one by one, then its sublayers.
    for variable in _own_variables(layer):
        variable.trainable = False
    for sublayer in _sublayers(layer):
        _freeze(sublayer, heads)


def _reset_compiled(model):
    model.train_function = model.test_function = model.predict_function = None
    if keras.backend.backend() == "torch":  # torch_params must drop or add the changed variables
        for layer in model._flatten_layers():
            if hasattr(layer, "_track_variables"):
                layer._track_variables()


def _check_optimizer_not_built(model, caller):
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and getattr(optimizer, "built", False):
        raise ValueError(
            f"{caller} changes the model's trainable weights, but its optimizer was already "
            "built for the old ones (the model was trained or its optimizer built). Call "
            f"{caller} before compile() / fit(), or compile() again afterwards."
        )


def enable_lora(model, rank, *, targets=DEFAULT_TARGETS, alpha=None):
    """Adds LoRA adapters to every `TransformerBlock` and freezes the rest except the head.

    Calls Keras' `enable_lora(rank, lora_alpha=alpha)` on the `targets` projections of every
    block (nested models included): each keeps its kernel `W` frozen and learns
    `lora_kernel_a` and `lora_kernel_b` (zeros at first: the outputs do not change until
    training), computing with `W + (alpha / rank) * A @ B`. Every other weight is frozen
    (layers with `trainable = False`, and the biases of the adapted layers and the blocks'
    LayerScale one by one) except the classifiers (`model.heads`: `head`, `head_dist`).
    Unfreeze more afterwards with `layer.trainable = True`; `save_lora_weights` saves what is
    trainable. Call it before `compile()`.

    On `query` / `key` / `value`, whose kernels are `(D, heads, D / heads)`, Keras'
    factorisation gives each head its own rank-`rank` update (A `(D, heads, rank)`, B
    `(rank, D / heads)`); on `attention_output`, `mlp_dense_1`, `mlp_dense_2` it is the usual
    rank-`rank` LoRA. A parallel block (`block_kind="parallel"`) gets adapters on the target of
    every branch. On PyTorch the blocks run the Keras layers (not the fused kernels) while
    LoRA is on.

    Args:
        model: a keras_vit model (built), e.g. from `keras_vit.ViT` or `load_model`.
        rank: int. The LoRA rank.
        targets: sequence of str from `("query", "key", "value", "attention_output",
            "mlp_dense_1", "mlp_dense_2")`, and for SwiGLU blocks (`mlp="swiglu"`)
            `("mlp_gate", "mlp_up", "mlp_down")` instead of the `mlp_dense_*`; the
            `ParallelScalingBlock`s of `block_kind="parallel_scaling"` have `"in_proj"` (the
            fused MLP-hidden + q/k/v projection) and `"attention_out"` / `"mlp_out"`, or
            `"out_proj"` with differential attention, instead of all of these.
            Defaults to `("query", "value")` (refused on parallel-scaling blocks, which have
            no separate query and value: pass their targets).
        alpha: optional positive float. The update is scaled by `alpha / rank`.
            Defaults to None (`alpha = rank`: scale 1, Keras' default).

    Returns:
        `model`, changed in place.

    Raises:
        ValueError: bad `rank` / `targets` / `alpha`, a model without TransformerBlocks, a
            model whose blocks already have LoRA (`merge_lora` it first), or a model whose
            optimizer was already built. Nothing is changed then.

    Example:

    >>> from keras_vit.models.vit import ViT
    >>> model = ViT("mu/8", image_size=16, num_classes=3, num_layers=1)
    >>> model = enable_lora(model, rank=2)
    >>> for path in sorted(v.path for v in model.trainable_weights):
    ...     print(path)
    encoderblock_0/attention/query/lora_kernel_a
    encoderblock_0/attention/query/lora_kernel_b
    encoderblock_0/attention/value/lora_kernel_a
    encoderblock_0/attention/value/lora_kernel_b
    head/bias
    head/kernel

    Reference:
        Hu et al., 2021, "LoRA: Low-Rank Adaptation of Large Language Models", Sec. 4.
    """
    rank, targets, alpha = check_settings(rank, targets, alpha)
    blocks = _check_model(model, "enable_lora")
    if get_lora_settings(model) is not None or _lora_layers(model):
        raise ValueError(
            f"LoRA is already enabled on model {model.name!r} ({get_lora_settings(model)}). Call "
            "keras_vit.merge_lora(model) first to fold it into the kernels."
        )
    if alpha is not None and alpha != rank and not _keras_has_lora_alpha():
        raise ValueError(
            f"alpha != rank needs Keras' lora_alpha (Keras >= 3.10). Received: alpha={alpha}, "
            f"rank={rank}, Keras {keras.__version__}"
        )
    _check_optimizer_not_built(model, "enable_lora")
    layers = [x for block in blocks for t in targets for x in _target_layers(block, t)]
    for layer in layers:
        if getattr(layer, "kernel_constraint", None) is not None:
            raise ValueError(
                f"Layer {layer.path!r} has a kernel constraint, which Keras' LoRA does not "
                "support. Received: kernel_constraint={layer.kernel_constraint!r}"
            )
        if layer.quantization_mode not in (None, "int8", "int4"):
            raise ValueError(
                f"Keras' LoRA does not run on {layer.quantization_mode}-quantized layers. "
                f"Received: layer {layer.path!r} with dtype policy {layer.dtype_policy.name!r}"
            )
    _check_rank_fits(layers, rank)
    kwargs = {} if alpha is None or not _keras_has_lora_alpha() else {"lora_alpha": alpha}
    for layer in layers:
        layer.enable_lora(rank, **kwargs)
    _freeze(model, {id(head) for head in getattr(model, "heads", [])})
    _reset_compiled(model)
    return model


def max_rank(layer):
    """The largest useful LoRA rank of `layer`: min(inputs, outputs) of its kernel as a matrix.

    `A @ B` with A `kernel_shape[:-1] + (rank,)` and B `(rank, kernel_shape[-1])` has rank at
    most min(prod(kernel_shape[:-1]), kernel_shape[-1]); a larger rank only adds parameters.
    """
    shape = tuple(int(d) for d in layer.kernel.shape)
    return min(int(np.prod(shape[:-1])), shape[-1])


def _check_rank_fits(layers, rank):
    for layer in layers:
        if rank > max_rank(layer):
            raise ValueError(
                f"rank must be at most {max_rank(layer)} for layer {layer.path!r} (kernel "
                f"{tuple(layer.kernel.shape)}: min(inputs, outputs) of its update). "
                f"Received: rank={rank}"
            )


def _disable_lora(layer):
    """Folds `layer`'s LoRA into its kernel and removes the LoRA matrices (in place)."""
    store = {}
    layer.save_own_variables(store)  # Keras' merge: W + alpha / rank * A @ B (re-quantized)
    values = {key: keras.ops.convert_to_numpy(value) for key, value in store.items()}
    for name in LORA_VARIABLES:
        delattr(layer, name)  # Keras' own: untracks, deletes (under merge_lora's one_collection)
    layer.lora_enabled = False
    layer.lora_rank = None
    if hasattr(layer, "lora_alpha"):
        layer.lora_alpha = None
    layer.load_own_variables(values)
    float_kernel = layer.quantization_mode is None
    for variable in layer.weights:
        if variable.name == "kernel":
            variable.trainable = float_kernel
        elif variable.name == "bias":
            variable.trainable = True


def merge_lora(model):
    """Folds every LoRA adapter of `model` into its kernel and removes it, in place.

    Each LoRA layer's kernel becomes `W + (alpha / rank) * A @ B` (Keras' own merge, the one
    `model.save()` writes; re-quantized for an int8 layer) and the layer is a plain `Dense` /
    `EinsumDense` again: same outputs, no LoRA variables, so the model exports (SavedModel,
    LiteRT, ONNX) like any other. The kernels and biases of the merged layers are trainable
    again; the layers `enable_lora` froze stay frozen (`model.trainable = True` unfreezes
    them). A model without LoRA is returned unchanged.

    Args:
        model: a keras.Model.

    Returns:
        `model`, changed in place.

    Raises:
        ValueError: the model's optimizer was already built (compile() again after merging).

    Example:

    >>> import numpy as np
    >>> from keras_vit.models.vit import ViT
    >>> model = enable_lora(ViT("mu/8", image_size=16, num_classes=3, num_layers=1), rank=2)
    >>> get_lora_settings(merge_lora(model)) is None, len(model.weights)
    (True, 24)
    """
    if not isinstance(model, keras.Model):
        raise ValueError(f"merge_lora expects a keras.Model. Received: {type(model).__name__}")
    layers = _lora_layers(model)
    if not layers:
        return model
    _check_optimizer_not_built(model, "merge_lora")
    with one_collection():  # one, not Keras' one per deleted LoRA matrix
        for layer in layers:
            _disable_lora(layer)
    _reset_compiled(model)
    return model


def merged_copy(model):
    """A new model with `model`'s LoRA folded into its kernels; `model` is left as it is.

    The copy is rebuilt from the model's config (serialized and deserialized as in a `.keras`
    file, so a `VisionTransformer` stays one with its roles; LoRA is not part of our layers'
    configs) and takes each layer's weights as `model.save()` writes them (the
    merged kernels). Used by the exporters, so that exporting never changes the model.
    """
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(model))
    source = list(model._flatten_layers(include_self=False))
    target = list(clone._flatten_layers(include_self=False))
    if [layer.name for layer in source] != [layer.name for layer in target]:
        raise ValueError(
            f"Cannot copy model {model.name!r}: its clone has other layers. Save it with "
            "model.save() (which merges LoRA) and load the file instead."
        )
    for src, dst in zip(source, target, strict=True):
        store = {}
        src.save_own_variables(store)
        dst.load_own_variables(store)
    return merge_lora(clone)
