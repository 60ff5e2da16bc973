"""Quantization-aware training (QAT) of keras_vit models: `quantization_aware(model, ...)`.

Keras has no QAT (keras #18930, #20493): `model.quantize("int8")` quantizes a trained model
after the fact, and whatever accuracy that loses stays lost. `quantization_aware` makes every
`Dense` / `EinsumDense` of a keras_vit model (the blocks' query, key, value, attention output
and MLP, the MAP head, the classifier) fake-quantize its input (per tensor) and kernel (per
output channel) in the forward pass (`keras_vit/layers/fake_quant.py`); `model.fit` then
fine-tunes the float weights through the straight-through estimator, so the model learns to be
accurate once quantized. It runs on every backend. The activation ranges are calibrated on
`calibration_data` (min and max over the images), then tracked during training (`"ema"`) or
learned (`"learned"`).

The result saves and loads as itself (`model.save`, `keras_vit.load_model`), and
`keras_vit.export_onnx(model, path, precision="int8")` writes the integer model with its learned
ranges and per-channel int8 weights (QDQ, which onnxruntime runs as integer MatMuls): it
computes what the fake-quant model computes. Formats without those ops refuse it (LiteRT, a
float32 ONNX graph, an int8 SavedModel: TensorFlow has no int8 kernels to run the ranges with);
`export_saved_model(model)` (float32) serves the fake-quant model as it is.
"""

import keras
import numpy as np

from keras_vit.layers import fake_quant
from keras_vit.preprocessing import input_range, scaled_pixels
from keras_vit.training.quantization import check_no_lora, quantization_modes

CALIBRATION_BATCH = 32


def _check_model(model):
    from keras_vit.models.encoder import VisionTransformer

    if not isinstance(model, VisionTransformer):
        raise ValueError(
            "quantization_aware expects a keras_vit VisionTransformer (keras_vit.ViT, "
            f"load_model, from_timm, ...). Received: {type(model).__name__}"
        )
    if not model.built:
        raise ValueError(f"quantization_aware needs a built model. Received: {model.name!r}")
    if fake_quant.is_quantization_aware(model):
        raise ValueError(
            f"Model {model.name!r} is already quantization-aware "
            f"({fake_quant.quantization_aware_settings(model)}): making it so again would "
            "quantize twice. Received: a quantization-aware model"
        )
    done = quantization_modes(model)
    if done:
        raise ValueError(
            f"Model {model.name!r} is quantized ({sorted(set(done.values()))} in {len(done)} "
            "layers, model.quantize): quantization-aware training needs the float model. "
            "Received: a quantized model"
        )
    check_no_lora(model, "first")


def _batches(model, data, batch_size):
    """Yields float32 calibration batches in the model's input range, checked."""
    shape = tuple(model.inputs[0].shape[1:])
    spec = getattr(model, "preprocessing", None)
    lowest, highest = input_range(spec)
    if isinstance(data, np.ndarray) or hasattr(data, "__array__") and not hasattr(
        data, "__next__"
    ):
        array = np.asarray(data)
        chunks = [array[i : i + batch_size] for i in range(0, len(array), batch_size)] or [array]
    else:
        chunks = data
    count = 0
    for chunk in chunks:
        if isinstance(chunk, (tuple, list)):  # (images, labels) batches of a dataset
            chunk = chunk[0]
        array = np.asarray(chunk)
        fits = array.ndim == 4 and len(array) > 0
        fits = fits and all(
            want is None or got == want for got, want in zip(array.shape[1:], shape, strict=True)
        )
        if not fits:
            raise ValueError(
                "calibration_data must hold images (N, H, W, C) of the model's input shape "
                f"{(None, *shape)} with N >= 1. Received: a batch of shape {array.shape}"
            )
        if array.dtype == np.uint8:
            array = scaled_pixels(array, spec)
        elif not np.issubdtype(array.dtype, np.floating):
            raise ValueError(
                "calibration_data must be uint8 pixels (0..255) or floats in the model's input "
                f"range [{lowest:g}, {highest:g}]. Received: dtype {array.dtype}"
            )
        else:
            low, high = float(np.min(array)), float(np.max(array))
            if not (np.isfinite(low) and np.isfinite(high)) or low < lowest - 1e-3 or (
                high > highest + 1e-3
            ):
                raise ValueError(
                    "calibration_data floats must be preprocessed to the model's input range "
                    f"[{lowest:g}, {highest:g}] (keras_vit.preprocess_input(images, "
                    f"model=model)), or given as uint8 pixels. Received: values in "
                    f"[{low:g}, {high:g}]"
                )
        count += len(array)
        yield array.astype("float32")
    if count == 0:
        raise ValueError("calibration_data holds no images. Received: an empty iterable")


def calibrate_ranges(model, data, batch_size=CALIBRATION_BATCH):
    """Sets every fake-quantized input range to the min and max seen on `data` (eager calls).

    Args:
        model: a quantization-aware model.
        data: images `(N, H, W, C)` (uint8 pixels, or floats in the model's input range), or an
            iterable of such batches (or of `(images, labels)` batches).
        batch_size: int. Images per call when `data` is an array. Defaults to 32.

    Returns:
        The number of images seen.
    """
    layers = fake_quant.quantization_aware_layers(model)
    if not layers:
        raise ValueError(f"Model {model.name!r} is not quantization-aware: nothing to calibrate.")
    for layer in layers:
        layer.range_initialized.assign(0.0)
    fake_quant.set_calibrating(model, True)
    seen = 0
    try:
        for batch in _batches(model, data, batch_size):
            model(batch, training=False)
            seen += len(batch)
    finally:
        fake_quant.set_calibrating(model, False)
    return seen


def quantization_aware(
    model,
    calibration_data=None,
    *,
    weight_bits=7,
    activation_bits=8,
    activation_range="ema",
    ema_decay=0.99,
    batch_size=CALIBRATION_BATCH,
):
    """Makes a keras_vit model quantization-aware, in place, for `model.fit` (QAT).

    Every `Dense` / `EinsumDense` (attention projections, MLP, MAP head, classifier) gets a
    fake-quantized input (per tensor, asymmetric, `activation_bits`) and kernel (symmetric, one
    scale per output channel, `weight_bits`), with straight-through gradients; the patch
    embedding, LayerNorms, softmax and GELU stay float (as in an int8 export, which quantizes
    the matrix products). Call it on the trained float model, then `compile()` and `fit()`
    (a few epochs at a small learning rate is the usual recipe). Export the result with
    `keras_vit.export_onnx(model, path, precision="int8")`.

    Args:
        model: a built float keras_vit `VisionTransformer` (not quantized, no LoRA adapters:
            `keras_vit.merge_lora` them).
        calibration_data: optional images `(N, H, W, C)` of the model's input shape (uint8
            pixels, or floats in its input range), or an iterable of such batches (or of
            `(images, labels)`): the activation ranges start at their min and max. Without it
            (`activation_range="ema"` only) each range starts at the first training batch's.
        weight_bits: int in [2, 8]. Defaults to 7: int8 storage with values in [-63, 63],
            which onnxruntime's u8s8 kernels compute exactly on every x86 CPU (without VNNI
            they add two products in 16 bits, which overflows for 8-bit weights: a QAT model
            with `weight_bits=8` exported to ONNX missed its fake-quant logits by 1.2 of 4.6 on
            an AVX2 CPU, and matched them to 1e-6 with 7). Use 8 for VNNI / AMX / Arm
            deployments.
        activation_bits: int in [2, 8]. Defaults to 8.
        activation_range: `"ema"` (an exponential moving average of each training batch's min
            and max, `ema_decay`) or `"learned"` (trainable min and max, with TensorFlow's
            `FakeQuantWithMinMaxVars` gradients; needs `calibration_data`). Defaults to `"ema"`.
        ema_decay: float in [0, 1). Defaults to 0.99.
        batch_size: int. Calibration images per call. Defaults to 32.

    Returns:
        `model`, quantization-aware. Its `.keras` file loads back so.

    Raises:
        ValueError: not a built keras_vit model; already quantization-aware (quantizing
            twice) or quantized; LoRA adapters; bad settings; `"learned"` without
            `calibration_data`; calibration images of the wrong shape, dtype or range.

    Example:

    >>> import numpy as np
    >>> from keras_vit.models.vit import ViT
    >>> model = ViT("mu/8", image_size=16, num_classes=3, num_layers=1)
    >>> images = np.random.default_rng(0).integers(0, 256, (4, 16, 16, 3), dtype="uint8")
    >>> model = quantization_aware(model, images)
    >>> model.head.__class__.__name__, model.head.weight_bits
    ('QuantizationAwareDense', 7)

    Reference:
        Jacob et al., 2018, "Quantization and Training of Neural Networks for Efficient
        Integer-Arithmetic-Only Inference", Sec. 3.
    """
    _check_model(model)
    settings = fake_quant.check_settings(weight_bits, activation_bits, activation_range, ema_decay)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int. Received: batch_size={batch_size!r}")
    if activation_range == "learned" and calibration_data is None:
        raise ValueError(
            "activation_range='learned' trains the ranges from a start: pass calibration_data "
            "(a few hundred training images). Received: calibration_data=None"
        )
    if not fake_quant.convertible_layers(model):
        raise ValueError(f"Model {model.name!r} has no Dense / EinsumDense layer to quantize.")
    batches = None
    if calibration_data is not None:
        # Checked before the model changes: a bad array leaves it as it was.
        batches = list(_batches(model, calibration_data, batch_size))
    fake_quant.apply_settings(model, settings)
    if batches is not None:
        calibrate_ranges(model, batches)
    return model


def is_quantization_aware(model):
    """Whether `model` was made quantization-aware (`quantization_aware`)."""
    return isinstance(model, keras.Model) and fake_quant.is_quantization_aware(model)
