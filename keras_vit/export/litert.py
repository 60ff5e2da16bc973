"""LiteRT (`.tflite`) export of a ViT's forward pass, for phones and other edge devices.

`export_litert` traces the model with Keras' TensorFlow backend (in a
subprocess when the model was built on JAX or PyTorch, as the SavedModel and
ONNX exports do), writes a temporary SavedModel with one `serving_default`
signature whose batch size is free, and converts it with
`tf.lite.TFLiteConverter.from_saved_model` using TFLite builtin operators only
(no `SELECT_TF_OPS`: LayerNorm, tanh-GELU, softmax attention, the patch
convolution and the ResNet stem of the hybrids all have builtin kernels, so the
file runs in the plain LiteRT interpreter, `ai-edge-litert`, and on phones).

Quantization (`quantize=`):

- `None`: float32 weights and arithmetic;
- `"float16"`: float16 weights, dequantized to float32 when the model is
  loaded (half the size, float32 arithmetic);
- `"dynamic_int8"`: dynamic-range quantization: int8 weights, activations
  quantized on the fly by the kernels that support it;
- `"int8"`: full integer quantization: int8 weights and activations, with
  activation ranges calibrated on `representative_data`. The interface stays
  float32 (a QUANTIZE op at the input, DEQUANTIZE at the output), so the same
  preprocessing feeds every mode.

Calibration images (`representative_images`) come from an array, a `.npy` /
`.npz` file, or any dataset spec the recipes read (`"digits"`,
`"folder:PATH"`, `"imagefolder:PATH"`, `"tfds:NAME"`), resized and scaled to
[-1, 1] as the recipes' evaluation pipeline does.

A model trained with a mixed-precision policy is traced as a float32 copy (same
weights): TFLite's builtin kernels have no bfloat16.

A NaFlex model (`naflex=True`) takes its three inputs, `patches`, `patch_coord` and
`patch_valid`, with a free batch size and a fixed sequence length, `max_patches` (LiteRT
plans its tensors for static shapes); `quantize="int8"` calibrates on NaFlex batches
(`keras_vit.export.naflex_serving.representative_naflex`).
"""

import contextlib
import os
import sys
import tempfile
import warnings

import keras
import numpy as np

from keras_vit.export import _checks
from keras_vit.export._tf_subprocess import run_with_tensorflow
from keras_vit.export.litert_data import REPRESENTATIVE_SAMPLES, representative_images
from keras_vit.export.naflex_serving import (
    check_max_patches,
    naflex_config,
    naflex_inputs,
    representative_naflex,
)
from keras_vit.export.saved_model import ExportResult
from keras_vit.layers.fake_quant import is_quantization_aware
from keras_vit.saving import atomic_write

QUANTIZE_MODES = (None, "float16", "dynamic_int8", "int8")
SIGNATURE = "serving_default"
INPUT_NAME = "images"
_INTERPRETER_WARNING = r"(?s).*tf\.lite\.Interpreter is deprecated"


def _check_quantize(quantize, representative_data):
    if quantize not in QUANTIZE_MODES:
        raise ValueError(
            f"quantize must be one of {QUANTIZE_MODES}. Received: quantize={quantize!r}"
        )
    if quantize == "int8" and representative_data is None:
        raise ValueError(
            "quantize='int8' (full integer quantization) calibrates the activation ranges on "
            "representative images: pass representative_data (an array of images, a .npy/.npz "
            "file, or a dataset spec such as 'digits' or 'folder:PATH'). Received: "
            "representative_data=None"
        )
    if quantize != "int8" and representative_data is not None:
        raise ValueError(
            "representative_data is only used by quantize='int8'. Received: "
            f"quantize={quantize!r} with representative_data"
        )


def _output_name(model):
    """`logits` / `probabilities` for a classifier (`model.head`), `outputs` for anything else."""
    head = getattr(model, "head", None)
    if head is None:
        return "outputs"
    activation = getattr(getattr(head, "activation", None), "__name__", "linear")
    if activation == "linear":
        return "logits"
    return "probabilities" if activation in ("softmax", "sigmoid") else "outputs"


def _check_model(model, max_patches=None):
    """Checks `model`; returns `(name, shape without the batch, dtype)` of each input."""
    config = naflex_config(model)
    if config is not None:
        max_patches = check_max_patches(max_patches, config.grid_size)
        inputs = naflex_inputs(tuple(config.patch_size), config.num_channels, max_patches)
    elif max_patches is not None:
        raise ValueError(
            "max_patches is the sequence length of a NaFlex model's .tflite. Received: "
            f"max_patches={max_patches!r} for a model without naflex=True"
        )
    else:
        inputs = [(INPUT_NAME, _checks.image_input_shape(model, "export_litert")[1:], "float32")]
    quantized = sorted(
        {layer.quantization_mode for layer in model._flatten_layers() if layer.quantization_mode}
    )
    if quantized:
        raise ValueError(
            "export_litert converts float models: TFLite has no builtin kernels for the int8 "
            "products and float8 casts of a model quantized with model.quantize(). Export the "
            "float model with export_litert(model, quantize='dynamic_int8' or 'int8') instead, "
            "which quantizes with TFLite's own kernels. Received: a model quantized to "
            f"{quantized}"
        )
    if is_quantization_aware(model):
        raise ValueError(
            "export_litert converts float models: a quantization-aware model "
            "(keras_vit.quantization_aware) fake-quantizes only its matrix products, and "
            "TFLite's full-integer conversion would calibrate every other op anew, so the file "
            "would not compute what the model learned. Export its integer model with "
            "export_onnx(model, path, precision='int8'), or the float model it was made from "
            "with export_litert. Received: a quantization-aware model"
        )
    if len(model.outputs) != 1:
        raise ValueError(
            "export_litert expects a model with one output. Received: output shapes "
            f"{[tuple(o.shape) for o in model.outputs]}"
        )
    return inputs


def _float32_model(model):
    """`model` itself, or a float32 clone of a mixed-precision one (same weights).

    TFLite's builtin kernels have no bfloat16, and float16 arithmetic is the
    converter's job (`quantize="float16"`): a model trained with a mixed policy
    is traced in float32, from its float32 variables.
    """
    if all(layer.compute_dtype == "float32" for layer in model._flatten_layers()):
        return model

    def float32_layer(layer):
        config = layer.get_config()
        if "dtype" in config:
            config["dtype"] = "float32"
        return layer.__class__.from_config(config)

    policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float32")
    try:
        clone = keras.models.clone_model(model, clone_function=float32_layer, recursive=True)
    finally:
        keras.config.set_dtype_policy(policy)
    clone.set_weights([np.asarray(w, dtype="float32") for w in model.get_weights()])
    return clone


def _converter(saved_model_dir, quantize, representative):
    tf = _checks.import_tensorflow()
    converter = tf.lite.TFLiteConverter.from_saved_model(saved_model_dir, [SIGNATURE])
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if quantize is not None:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantize == "float16":
        converter.target_spec.supported_types = [tf.float16]
    elif quantize == "int8":
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]

        def dataset():
            if isinstance(representative, dict):  # a NaFlex batch
                for i in range(len(representative["patches"])):
                    yield {name: array[i : i + 1] for name, array in representative.items()}
                return
            for image in representative:
                yield {INPUT_NAME: image[None]}

        converter.representative_dataset = dataset
    return converter


def _write_litert(model, path, *, overwrite, quantize, representative_path, max_patches=None):
    """Traces `model` (TensorFlow backend) and writes the `.tflite` file; returns JSON facts."""
    tf = _checks.import_tensorflow()
    _checks.check_file_target(path, overwrite, (".tflite",), "a LiteRT (TFLite) model")
    inputs = _check_model(model, max_patches)
    name = _output_name(model)
    model = _float32_model(model)
    representative = None
    if representative_path is not None:
        representative = np.load(representative_path, allow_pickle=False)
        if isinstance(representative, np.lib.npyio.NpzFile):  # a NaFlex batch
            with representative:
                representative = {key: representative[key] for key in representative.files}

    def serve(*tensors):
        names = [i[0] for i in inputs]
        x = tensors[0] if len(tensors) == 1 else dict(zip(names, tensors, strict=True))
        return {name: tf.cast(model(x, training=False), tf.float32)}

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(
        SIGNATURE,
        serve,
        input_signature=[
            tf.TensorSpec((None, *shape), dtype, name=input_name)
            for input_name, shape, dtype in inputs
        ],
    )
    with tempfile.TemporaryDirectory(prefix="keras_vit_litert_") as folder:
        archive.write_out(folder, verbose=False)
        printed = str
        try:
            with warnings.catch_warnings(), _native_output_captured() as printed:
                # int8 calibration runs TF's deprecated interpreter
                warnings.filterwarnings("ignore", message=_INTERPRETER_WARNING)
                flatbuffer = _converter(folder, quantize, representative).convert()
        except Exception as error:  # the converter's own error types (ConverterError, ...)
            said = " ".join(printed().split())[-2000:]
            raise RuntimeError(
                f"The LiteRT converter failed for quantize={quantize!r} with TFLite builtin "
                f"operators only: {error}" + (f" (the converter printed: {said})" if said else "")
            ) from None

    def write(staged):
        with open(staged, "wb") as f:
            f.write(flatbuffer)

    atomic_write(path, write)
    return dict(inputs=[i[0] for i in inputs], outputs=[name], size=len(flatbuffer))


@contextlib.contextmanager
def _native_output_captured():
    """Sends file descriptors 1 and 2 to a temporary file within: TensorFlow's converter prints
    its calibration settings from C++ (`fully_quantize: 0, inference_type: 6, ...`), which no
    Python setting silences. Yields a function that returns what was printed (shown only when
    the conversion fails), also after the block."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved, text = [os.dup(1), os.dup(2)], []
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield lambda: "".join(text)
        finally:
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            sink.seek(0)
            text.append(sink.read().decode("utf-8", "replace"))


def _save_representative(model, max_patches, data, num_samples, folder):
    """Writes the calibration data of `quantize="int8"` for the writer; returns its path."""
    inputs = _check_model(model, max_patches)
    config = naflex_config(model)
    if config is None:
        path = os.path.join(folder, "representative.npy")
        spec = getattr(getattr(model, "config", None), "preprocessing", None)
        np.save(
            path,
            representative_images(
                data, inputs[0][1], num_samples=num_samples, preprocessing=spec
            ),
        )
        return path
    num_patches = inputs[0][1][0]
    batch = representative_naflex(
        data, tuple(config.patch_size), num_patches, config.num_channels,
        preprocessing=config.preprocessing,
    )
    path = os.path.join(folder, "representative.npz")
    np.savez(path, **batch)
    return path


def export_litert(
    model,
    path,
    *,
    quantize=None,
    representative_data=None,
    representative_samples=REPRESENTATIVE_SAMPLES,
    overwrite=False,
    method="auto",
    verbose=True,
    max_patches=None,
):
    """Exports a ViT's forward pass to a LiteRT (TensorFlow Lite) `.tflite` file.

    The file has one signature, `serving_default`, with input `images`
    (float32 `(batch, H, W, C)` in [-1, 1], as `keras_vit.preprocess_input`
    makes them; the batch size is free: the interpreter's
    `resize_tensor_input`, or a signature runner, take any batch) and one
    float32 output: `logits` for a classifier with a linear `head`,
    `probabilities` for a softmax or sigmoid head, `outputs` otherwise (a
    feature extractor). Only TFLite builtin operators are used.

    A NaFlex model (`naflex=True`) takes its three inputs instead, with a
    free batch size and `max_patches` rows: `patches` float32 `(batch,
    max_patches, P*P*C)`, `patch_coord` int32 `(batch, max_patches, 2)` and
    `patch_valid` bool `(batch, max_patches)`, as `keras_vit.data.naflex_batch(
    images, patch_size, max_patches)` makes them. Every quantization mode
    applies; `quantize="int8"` calibrates on NaFlex batches (images of any
    sizes, a dict batch or a `.npz` of one; see
    `keras_vit.export.naflex_serving.representative_naflex`).

    The graph is traced by Keras' TensorFlow backend: in this process under
    the TensorFlow backend, in a subprocess with `KERAS_BACKEND=tensorflow`
    otherwise (the model goes there as a temporary `.keras` file).

    Args:
        model: a `keras.Model` with one image input of fixed size (or a NaFlex
            model) and one output, or the path of a `.keras` file of one or of a
            sharded checkpoint folder of one (a sharded run's `model.sharded`).
        path: str or path. The `.tflite` file to write.
        quantize: None (float32), `"float16"` (float16 weights),
            `"dynamic_int8"` (dynamic-range: int8 weights) or `"int8"` (full
            integer: int8 weights and activations calibrated on
            `representative_data`; the input and output stay float32).
            Defaults to None.
        representative_data: calibration images for `quantize="int8"` (and
            only then): an array, a `.npy`/`.npz` path or a dataset spec such
            as `"digits"` or `"folder:PATH"`; see `representative_images`. For a
            NaFlex model: images of any sizes, a NaFlex dict batch or a `.npz`
            file of one.
        representative_samples: int. Images drawn from a dataset spec.
            Defaults to 200.
        overwrite: bool. Replace an existing file. Defaults to False.
        method: `"auto"` or `"subprocess"` (see `export_saved_model`).
            Defaults to `"auto"`.
        verbose: bool. Print where and how the model was exported. Defaults
            to True.
        max_patches: optional int. NaFlex models only: the sequence length of
            the inputs (patches per image at most). Defaults to the position
            table's grid (`rows * columns`).

    Returns:
        An `ExportResult` with `format="litert"`, `signatures=
        ("serving_default",)`, `inputs`, `outputs` (the output's name) and
        `quantize`.

    Raises:
        ValueError: a model without one fixed-size image input (nor NaFlex) or
            with several outputs, `max_patches` for an image model or not a
            positive int, a model quantized with `model.quantize()`
            (export the float model with `quantize=` here), an unknown `quantize`, `"int8"` without
            representative data (or representative data for another mode),
            representative images of the wrong shape or range, a model file
            that is not a valid `.keras` archive, or a path under a file.
        FileExistsError: `path` exists and `overwrite` is False, or is a folder.
        FileNotFoundError: a model or representative-data path that does not
            exist.
        PermissionError: the folder of `path` is not writable.
        ImportError: TensorFlow is missing.
        RuntimeError: the converter failed (its message is included).

    Example:

    >>> from keras_vit.models.vit import ViT
    >>> model = ViT("mu/8", image_size=32, num_classes=10)
    >>> export_litert(model, "/tmp/vit.tflite", quantize="dynamic_int8",
    ...               overwrite=True)  # doctest: +SKIP

    Reference:
        LiteRT post-training quantization,
        https://ai.google.dev/edge/litert/models/post_training_quantization
    """
    _checks.check_method(method)
    overwrite, verbose = _checks.check_flags(overwrite=overwrite, verbose=verbose)
    _check_quantize(quantize, representative_data)
    _checks.import_tensorflow()
    path = os.path.abspath(_checks.saving.check_path_argument(path))
    _checks.check_file_target(path, overwrite, (".tflite",), "a LiteRT (TFLite) model")
    model = _checks.check_model_argument(model)
    checked = model if isinstance(model, keras.Model) else None
    if checked is not None:
        _check_model(checked, max_patches)  # fail fast, before saving
    with tempfile.TemporaryDirectory(prefix="keras_vit_litert_data_") as folder:
        representative_path = None
        if representative_data is not None:
            if checked is None:  # a .keras path: its inputs decide the calibration data's shape
                checked = _checks.load_model(model)
            representative_path = _save_representative(
                checked, max_patches, representative_data, representative_samples, folder
            )
        how, reply = run_with_tensorflow(
            model,
            _write_litert,
            dict(
                path=path,
                overwrite=overwrite,
                quantize=quantize,
                representative_path=representative_path,
                max_patches=max_patches,
            ),
            method=method,
        )
    return ExportResult(
        path=path,
        method=how,
        backend=keras.backend.backend(),
        signatures=(SIGNATURE,),
        inputs=tuple(reply["inputs"]),
        outputs=tuple(reply["outputs"]),
        format="litert",
        quantize=quantize,
    ).announce(verbose)
