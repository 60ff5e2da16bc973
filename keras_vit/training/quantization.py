"""int8 and float8 quantization of keras_vit models through Keras' `model.quantize`.

`model.quantize("int8")` (Keras) replaces the kernel of every `Dense` / `EinsumDense` (the
blocks' query, key, value, attention output and MLP, the MAP head's projections, the
classifier) by an int8 kernel with one float scale per output channel, and quantizes each
layer's input per token at call time (abs-max): the matrix products run in int8. The patch
embedding, LayerNorms and position embedding stay in float. `.keras` files of quantized
keras_vit models load back quantized (our layers record their quantized sublayers in their
configs, see `keras_vit/layers/_quantization.py`).

`model.quantize("float8")` is for training: every `Dense` / `EinsumDense` computes with
float8 (E4M3 forward, E5M2 gradients) and delayed scaling (scales from a history of
absolute maxima, updated by each training step); weights stay float32. Keras runs it on every
backend; only hardware with float8 matrix units (e.g. NVIDIA H100) makes it fast, on CPU it
is emulated (casts around float32 products).

`quantize(model, mode)` here calls `model.quantize(mode)` after checks that give clear errors
(already quantized, LoRA not merged, float16 compute) and without Keras' warning for each layer
that has nothing to quantize (LayerNorm, Dropout, ...).
"""

import contextlib
import gc
import warnings

import keras

from keras_vit.layers.fake_quant import quantization_aware_layers

MODES = ("int8", "float8")


def quantization_modes(model):
    """`{layer path: mode}` of the quantized layers of `model` (empty if none).

    Example:

    >>> from keras_vit.models.vit import ViT
    >>> model = quantize(ViT("mu/8", image_size=16, num_classes=3, num_layers=1), "int8")
    >>> sorted(set(quantization_modes(model).values())), len(quantization_modes(model))
    (['int8'], 7)
    """
    return {
        layer.path: layer.quantization_mode
        for layer in model._flatten_layers(include_self=False)
        if layer.quantization_mode is not None
    }


def _on_cpu():
    devices = keras.distribution.list_devices()
    return all(str(device).lower().startswith("cpu") for device in devices)


@contextlib.contextmanager
def one_collection():
    """Runs the block with `gc.collect` a no-op, then collects once.

    Adapter for a Keras internal (keras 3.x `Layer.__delattr__`, every backend): deleting a
    variable attribute runs a full `gc.collect()`, and `model.quantize` deletes the float kernel
    of every `Dense` / `EinsumDense` (and `merge_lora` each LoRA matrix), one full collection
    each (0.3-20 s each in a process holding TensorFlow's, PyTorch's and several models'
    objects: minutes for one ViT). The same layers, the same variables deleted, the same
    buffers freed by the one collection at the end (tests/training/test_quantization.py checks
    the quantized weights and the collections).
    The patch is process-wide while the block runs: another thread's `gc.collect()` in that
    time returns at once, its work done by the collection at the end.
    """
    collect = gc.collect
    gc.collect = lambda generation=2: 0
    try:
        yield
    finally:
        gc.collect = collect
        gc.collect()


def quantize(model, mode="int8"):
    """Quantizes a keras_vit model in place with Keras' `model.quantize(mode)`.

    Args:
        model: a built `keras.Model` (any keras_vit model).
        mode: `"int8"` (post-training weight and activation quantization, for inference) or
            `"float8"` (float8 training). Defaults to `"int8"`.

    Returns:
        `model`, quantized in place. Call `compile()` (again) before training it.

    Raises:
        ValueError: an unknown `mode`; a model already quantized; a model with LoRA adapters
            (`keras_vit.merge_lora` it first); `int8` on float16 compute (Keras refuses it;
            use float32 or `mixed_bfloat16`); `float8` with float16 compute on JAX on CPU,
            where XLA has no float16 x float16 -> float32 product (use float32 or
            `mixed_bfloat16`).

    Example:

    >>> import numpy as np
    >>> from keras_vit.models.vit import ViT
    >>> model = ViT("mu/8", image_size=16, num_classes=3, num_layers=1)
    >>> model = quantize(model, "int8")
    >>> model.head.dtype_policy.name
    'int8_from_float32'
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}. Received: mode={mode!r}")
    if not isinstance(model, keras.Model):
        raise ValueError(f"quantize expects a keras.Model. Received: {type(model).__name__}")
    if not model.built:
        raise ValueError(f"quantize needs a built model. Received: model {model.name!r} unbuilt")
    qat = quantization_aware_layers(model)
    if qat:
        raise ValueError(
            f"Model {model.name!r} is quantization-aware ({len(qat)} fake-quantized layers, "
            "keras_vit.quantization_aware): quantizing it again would quantize twice. Export "
            "it as int8 with keras_vit.export_onnx(model, path, precision='int8'), or quantize "
            f"the float model. Received: mode={mode!r}"
        )
    done = quantization_modes(model)
    if done:
        raise ValueError(
            f"Model {model.name!r} is already quantized ({sorted(set(done.values()))} in "
            f"{len(done)} layers). Quantize the float model. Received: mode={mode!r}"
        )
    check_no_lora(model, "before quantizing it")
    float16 = sorted(
        {
            layer.dtype_policy.name
            for layer in model._flatten_layers(include_self=False)
            if layer.compute_dtype == "float16"
        }
    )
    if float16 and mode == "int8":
        raise ValueError(
            f"int8 quantization does not run with float16 compute (Keras refuses it). Build the "
            f"model under float32 or 'mixed_bfloat16'. Received: dtype policies {float16}"
        )
    if float16 and mode == "float8" and keras.backend.backend() == "jax" and _on_cpu():
        raise ValueError(
            'float8 with float16 compute does not run on the JAX backend on CPU (XLA: "The '
            "precision 'F16_F16_F32' is not supported by dot_general on CPU\"). Use float32 or "
            f"'mixed_bfloat16', or another backend. Received: dtype policies {float16}"
        )
    with warnings.catch_warnings(), one_collection():
        # Keras warns once per layer that has nothing to quantize (LayerNorm, Dropout, ...).
        warnings.filterwarnings("ignore", message=r".*does not have a `quantize` method")
        model.quantize(mode)
    return model


def check_no_lora(model, when):
    """Refuses a model with LoRA adapters: `merge_lora` first (`when`: "before quantizing it")."""
    lora = [
        layer.path
        for layer in model._flatten_layers(include_self=False)
        if getattr(layer, "lora_enabled", False)
    ]
    if lora:
        raise ValueError(
            f"Model {model.name!r} has LoRA adapters ({len(lora)} layers, e.g. {lora[0]!r}): "
            f"call keras_vit.merge_lora(model) {when}."
        )
