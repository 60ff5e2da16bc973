"""Export a trained ViT for serving: TensorFlow SavedModel, ONNX and LiteRT.

- `saved_model`: `export_saved_model` (TF Serving signatures for float, uint8
  and encoded images), `ExportResult`, `read_class_names`;
- `onnx`: `export_onnx` (`precision=`: `onnx_precision`, with onnxruntime's tools; the
  integer graph of a quantization-aware model: `onnx_qat`);
- `precision`, `model_precision`: the precisions per format, the CPU's instructions (the
  warning for a precision it runs slowly), the record an artefact keeps (`read_export_info`),
  the copies a SavedModel traces for `precision=`;
- `litert`: `export_litert` (`.tflite`, optionally quantized) and
  `representative_images` (calibration images for full integer quantization);
- `_tf_subprocess`: the one helper every format goes through, which runs the
  writer under Keras' TensorFlow backend (in a subprocess when the model was
  built on JAX or PyTorch);
- `_checks`: what the formats check alike (target paths, model files, the
  image input).

Modules here import `keras_vit` submodules only, never the top-level package.
"""

from keras_vit.export.litert import export_litert, representative_images
from keras_vit.export.onnx import export_onnx
from keras_vit.export.precision import read_export_info
from keras_vit.export.saved_model import ExportResult, export_saved_model, read_class_names

__all__ = [
    "ExportResult",
    "export_litert",
    "export_onnx",
    "export_saved_model",
    "read_class_names",
    "read_export_info",
    "representative_images",
]
