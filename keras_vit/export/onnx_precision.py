"""Reduced-precision ONNX: `export_onnx(precision="int8" | "float16")`, by onnxruntime's tools.

The float32 graph is traced as `export_onnx` always traces it (Keras' TensorFlow trace through
tf2onnx, in the TensorFlow process: a subprocess for a JAX or PyTorch model), into a temporary
folder; then, in the same process:

- `"int8"` without calibration images: `onnxruntime.quantization.quantize_dynamic` (int8
  per-channel weights; each MatMul / Conv input quantized to uint8 at run time from its own
  range: `DynamicQuantizeLinear`);
- `"int8"` with `representative_data`: `quantize_static` in the QDQ format (int8 per-channel
  weights, uint8 activations whose ranges are the min / max seen on the calibration images),
  which onnxruntime fuses into integer MatMuls;
- `"int8"` of a quantization-aware model (`keras_vit.quantization_aware`; also its default,
  `precision=None`): the ranges it learned (the graph's QuantizeLinear / DequantizeLinear pairs,
  tf2onnx's form of TensorFlow's `FakeQuantWithMinMaxVars`) and its fake-quantized weights as
  int8 per-channel initializers (`keras_vit/export/onnx_qat.py`): the integer model computes
  what the fake-quant model computes;
- `"float16"`: `onnxruntime.transformers.float16.convert_float_to_float16` (float16 weights and
  arithmetic, the inputs and outputs kept float32): half the file, for GPU providers; on a CPU
  onnxruntime runs it slower than float32 (benchmarks/RESULTS.md).

The weights of onnxruntime's int8 use 7 of their 8 bits (`reduce_range=True`): on CPUs without
VNNI, onnxruntime's u8 x s8 kernels (`vpmaddubsw`) add two products in 16 bits, which overflows
with full-range weights and asymmetric activations (measured on an AVX2 CPU: logits off by a
quarter of their range). Only MatMul, Gemm and Conv are quantized (LayerNorm, softmax and GELU
stay float). The result goes to `path` in one move (nothing is written there unless every step
succeeded), with `keras_vit.precision` and `keras_vit.quantization` in its metadata
(`keras_vit.export.read_export_info`).
"""

import os
import tempfile

import keras
import numpy as np

from keras_vit.export import _checks, precision
from keras_vit.export.litert_data import REPRESENTATIVE_SAMPLES, representative_images
from keras_vit.export.model_precision import copy_with_policy, keras_quantization, model_precision
from keras_vit.export.naflex_serving import naflex_config
from keras_vit.export.serving_spec import model_input_spec
from keras_vit.layers.fake_quant import is_quantization_aware, uncalibrated_layers
from keras_vit.saving import atomic_write

QUANTIZED_OPS = ("MatMul", "Gemm", "Conv")
CALIBRATION_BATCH = 8
# onnxruntime's MinMax calibrator keeps every intermediate output until it computes the ranges:
# merge them every few batches (ViT-B/16: ~100 MB of activations per image).
_CALIBRATION_MERGE = 4


def import_onnxruntime():
    try:
        import onnxruntime  # noqa: F401
        import onnxruntime.quantization  # noqa: F401
    except ImportError as error:
        raise ImportError(
            "export_onnx(precision='int8' or 'float16') quantizes with onnxruntime's tools: "
            "`pip install onnxruntime`."
        ) from error


def check_arguments(precision_name, representative_data, representative_samples):
    """The checks that need no model: the precision and the calibration arguments."""
    precision.check_precision(precision_name, precision.ONNX_PRECISIONS, "export_onnx", True)
    if representative_data is not None and precision_name != "int8":
        raise ValueError(
            "representative_data calibrates the activation ranges of precision='int8' (static "
            f"quantization). Received: representative_data with precision={precision_name!r}"
        )
    if representative_samples is not None and representative_data is None:
        raise ValueError(
            "representative_samples is the number of calibration images drawn from "
            "representative_data. Received: representative_samples="
            f"{representative_samples!r} without representative_data"
        )
    if precision_name in ("int8", "float16"):
        import_onnxruntime()


def scheme(model, precision_name, calibrated):
    """What `export_onnx` writes for `model`: `(precision, quantization)`; raises a ValueError
    for a combination it cannot write (before anything is written)."""
    qat = is_quantization_aware(model)
    modes = keras_quantization(model)
    if precision_name is None:
        if qat:
            precision_name = "int8"  # a QAT model's own precision: its integer graph
        else:
            return model_precision(model)
    if qat:
        if precision_name != "int8":
            raise ValueError(
                "A quantization-aware model (keras_vit.quantization_aware) exports to ONNX as "
                "int8, with the ranges it learned: its fake-quant ops become integer "
                "QuantizeLinear / DequantizeLinear pairs. Pass precision='int8' (or None), or "
                "export the float model it was made from. Received: a quantization-aware model "
                f"with precision={precision_name!r}"
            )
        if calibrated:
            raise ValueError(
                "A quantization-aware model exports with the activation ranges it learned; "
                "representative_data would calibrate other ones. Received: representative_data "
                "for a quantization-aware model"
            )
        missing = uncalibrated_layers(model)
        if missing:
            raise ValueError(
                "The quantization-aware model has layers whose input range was never set "
                f"({len(missing)}, e.g. {missing[0]!r}): calibrate it "
                "(keras_vit.quantization_aware(model, calibration_data)) or train it first."
            )
        return "int8", "qat_qdq"
    if modes:
        twice = " would quantize twice" if precision_name == "int8" else " cannot be undone"
        raise ValueError(
            f"The model is already quantized ({modes}, model.quantize): "
            f"precision={precision_name!r}{twice}. Export it as it computes (precision=None), "
            f"or export the float model. Received: a model quantized to {modes}"
        )
    if calibrated and naflex_config(model) is not None:
        raise ValueError(
            "export_onnx calibrates image models only; a NaFlex model exports as int8 with "
            "dynamic quantization (precision='int8' without representative_data). Received: "
            "representative_data for a NaFlex model"
        )
    if precision_name != "int8":
        return precision_name, None
    return "int8", "static_qdq" if calibrated else "dynamic"


def calibration_images(model, data, num_samples=None):
    """The float32 `(N, H, W, C)` calibration images (checked: shape, dtype, range)."""
    shape = _checks.image_input_shape(model, "export_onnx")[1:]
    return representative_images(
        data,
        shape,
        num_samples=num_samples or REPRESENTATIVE_SAMPLES,
        preprocessing=model_input_spec(model),
    )


class _Reader:
    """onnxruntime's `CalibrationDataReader` protocol over an array, a few images a call."""

    def __init__(self, input_name, images):
        self._batches = iter(
            [
                {input_name: images[i : i + CALIBRATION_BATCH]}
                for i in range(0, len(images), CALIBRATION_BATCH)
            ]
        )

    def get_next(self):
        return next(self._batches, None)


def _input_name(path):
    import onnx

    graph = onnx.load(path, load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}
    return [i.name for i in graph.input if i.name not in initializers][0]


def convert(float_path, out_path, precision_name, quantization, calibration=None):
    """Writes `out_path`, the `precision_name` form of the float ONNX file `float_path`."""
    import onnx
    from onnxruntime import quantization as q

    if precision_name == "float16":
        from onnxruntime.transformers.float16 import convert_float_to_float16

        model = convert_float_to_float16(onnx.load(float_path), keep_io_types=True)
    elif quantization == "qat_qdq":
        from keras_vit.export.onnx_qat import qat_weights_to_qdq

        model = qat_weights_to_qdq(onnx.load(float_path))
    else:
        staged = out_path + ".quantized.onnx"
        common = dict(
            op_types_to_quantize=list(QUANTIZED_OPS),
            per_channel=True,
            reduce_range=True,
            weight_type=q.QuantType.QInt8,
        )
        if quantization == "dynamic":
            q.quantize_dynamic(float_path, staged, **common)
        else:
            q.quantize_static(
                float_path,
                staged,
                _Reader(_input_name(float_path), calibration),
                quant_format=q.QuantFormat.QDQ,
                activation_type=q.QuantType.QUInt8,
                extra_options={"CalibMaxIntermediateOutputs": _CALIBRATION_MERGE},
                **common,
            )
        model = onnx.load(staged)
        os.remove(staged)
    info = precision.export_info(precision_name, "onnx", quantization=quantization)
    onnx.save(precision.onnx_metadata(model, info), out_path)


def write(model, path, precision_name, representative_path, write_float):
    """Writes `model`'s ONNX file at `precision_name` (in the TensorFlow process).

    `write_float(model, staged_path)` traces a float graph to a file. Returns
    `(precision, quantization)`.
    """
    import onnx

    calibration = None
    if representative_path is not None:
        calibration = np.load(representative_path, allow_pickle=False)
    own, quantization = scheme(model, precision_name, calibration is not None)
    if quantization != "qat_qdq" and precision_name in (None, "float32"):
        if precision_name == "float32":
            model = copy_with_policy(model, "float32")  # a mixed-precision model in float32

        def write_as_is(staged):
            write_float(model, staged)
            info = precision.export_info(own, "onnx", quantization=quantization)
            onnx.save(precision.onnx_metadata(onnx.load(staged), info), staged)

        atomic_write(path, write_as_is, "model.onnx")
        return own, quantization
    if quantization != "qat_qdq":
        model = copy_with_policy(model, "float32")  # a mixed-precision model: a float32 trace
    with tempfile.TemporaryDirectory(prefix="keras_vit_onnx_") as folder:
        float_path = os.path.join(folder, "float32.onnx")
        write_float(model, float_path)
        atomic_write(
            path, lambda staged: convert(float_path, staged, own, quantization, calibration)
        )
    return own, quantization

def check_loaded(model, precision_name, representative_data):
    """The checks of a `keras.Model` argument in the caller's process (fail fast)."""
    if isinstance(model, keras.Model):
        scheme(model, precision_name, representative_data is not None)
