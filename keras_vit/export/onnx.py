"""ONNX export of a ViT's forward pass, traced by Keras' TensorFlow backend with tf2onnx."""

import os
import tempfile

import keras
import numpy as np

from keras_vit.export import _checks, onnx_precision
from keras_vit.export._tf_subprocess import run_with_tensorflow
from keras_vit.export.naflex_serving import naflex_config, naflex_inputs
from keras_vit.export.saved_model import ExportResult
from keras_vit.export.tf2onnx_memory import collecting_between_optimizers


def _check_not_float8(model):
    if any(layer.quantization_mode == "float8" for layer in model._flatten_layers()):
        raise ValueError(
            "export_onnx cannot convert a model quantized with model.quantize('float8'): "
            "tf2onnx has no float8 type. Export the float model, or an int8 one "
            "(model.quantize('int8')), or use export_saved_model. Received: a float8 model"
        )


def _input_signature(model):
    """The ONNX inputs: `images` `(None, H, W, C)`, or a NaFlex model's three inputs with the
    batch size and the sequence length free."""
    config = naflex_config(model)
    if config is None:
        shape = _checks.image_input_shape(model, "export_onnx")
        return [keras.InputSpec(shape=(None, *shape[1:]), dtype="float32", name="images")]
    inputs = naflex_inputs(tuple(config.patch_size), config.num_channels)
    return [
        {name: keras.InputSpec(shape=(None, *shape), dtype=dtype, name=name)
         for name, shape, dtype in inputs}
    ]


def replace_erfc(graph):
    """Rewrites every `Erfc(x)` node of an ONNX `graph` as `1 - Erf(x)`; returns how many.

    TensorFlow computes the exact GELU as `0.5 x erfc(-x / sqrt(2))`, and tf2onnx writes its
    `Erfc` as an `Erfc` node, which no ONNX opset defines: onnxruntime refuses the whole graph
    ("No Op registered for Erfc"). `1 - erf(x)` is the same function (it differs from erfc by
    less than 1e-7 where erfc is tiny, which the GELU multiplies by its input's half).
    """
    from onnx import helper

    nodes, replaced = [], 0
    for node in graph.node:
        if node.op_type != "Erfc" or node.domain not in ("", "ai.onnx"):
            nodes.append(node)
            continue
        (source,), (target,) = node.input, node.output
        one, typed_one, erf = f"{target}/one", f"{target}/one_typed", f"{target}/erf"
        nodes += [
            helper.make_node("Constant", [], [one], value_float=1.0, name=one),
            helper.make_node("Erf", [source], [erf], name=erf),
            helper.make_node("CastLike", [one, erf], [typed_one], name=typed_one),
            helper.make_node("Sub", [typed_one, erf], [target], name=f"{target}/sub"),
        ]
        replaced += 1
    if replaced:
        del graph.node[:]
        graph.node.extend(nodes)
    return replaced


def _write_onnx(model, path, *, overwrite, precision=None, representative_path=None):
    """`model.export(format="onnx")` under the TensorFlow backend (tf2onnx), batch size free;
    converted to `precision` by onnxruntime's tools (`keras_vit/export/onnx_precision.py`)."""
    try:
        import onnx
        import tf2onnx  # noqa: F401  (Keras' ONNX export needs it)
    except ImportError as error:
        raise ImportError(
            "export_onnx needs tf2onnx and onnx: `pip install tf2onnx onnx` "
            "(and onnxruntime to run the result)."
        ) from error
    _checks.check_file_target(path, overwrite, (".onnx",), "an ONNX model")
    signature = _input_signature(model)
    _check_not_float8(model)

    def write_float(traced, staged):
        with collecting_between_optimizers():  # tf2onnx adapter: one graph copy at a time
            traced.export(staged, format="onnx", input_signature=signature, verbose=False)
        proto = onnx.load(staged)
        if replace_erfc(proto.graph):  # the exact GELU: an op onnxruntime can run
            onnx.save(proto, staged)

    written, quantization = onnx_precision.write(
        model, path, precision, representative_path, write_float
    )
    graph = onnx.load(path, load_external_data=False).graph
    return dict(
        inputs=[i.name for i in graph.input],
        outputs=[output.name for output in graph.output],
        precision=written,
        quantization=quantization,
    )


def export_onnx(
    model,
    path,
    *,
    overwrite=False,
    method="auto",
    verbose=True,
    precision=None,
    representative_data=None,
    representative_samples=None,
):
    """Exports a ViT's forward pass to ONNX with Keras' `model.export(format="onnx")`.

    The ONNX graph has one input `images`, float32 `(batch, H, W, C)` in
    [-1, 1] with a free batch size, and the model's outputs (e.g. logits) as
    they are: no preprocessing and no extra heads. A NaFlex model
    (`naflex=True`) has its three inputs instead, with the batch size and the
    sequence length N free: `patches` float32 `(batch, N, P*P*C)`,
    `patch_coord` int32 `(batch, N, 2)` and `patch_valid` bool `(batch, N)`
    (as `keras_vit.data.naflex_batch` makes them). It is traced by the
    TensorFlow backend with `tf2onnx` (opset chosen by Keras), in this process
    under the TensorFlow backend and in a subprocess with
    `KERAS_BACKEND=tensorflow` otherwise: on this Keras version the PyTorch
    backend's own ONNX export fails for a free batch size, and the JAX one
    needs `jax2onnx`.

    `precision="int8"` quantizes the graph with onnxruntime's quantizer
    (`keras_vit/export/onnx_precision.py`): dynamic quantization (int8 per-channel
    weights using 7 bits, activations quantized at run time) by default, static QDQ
    (activation ranges calibrated on `representative_data`) with it, and for a
    quantization-aware model (`keras_vit.quantization_aware`) the ranges and weights it
    learned. Only the MatMul,
    Gemm and Conv products are quantized. `precision="float16"` halves the file (float16
    weights and arithmetic, float32 inputs and outputs) for GPU providers; onnxruntime's CPU
    provider runs it slower than float32, and has no bfloat16 kernels at all. The file
    records its precision in its metadata (`keras_vit.export.read_export_info`).

    Args:
        model: a `keras.Model` with one image input of fixed size or a NaFlex
            model, or a path to a `.keras` file of one or to a sharded checkpoint folder
            of one (a sharded run's `model.sharded`).
        path: str or path. The `.onnx` file to write.
        overwrite: bool. Replace an existing file. Defaults to False.
        method: `"auto"` or `"subprocess"` (see `export_saved_model`).
            Defaults to `"auto"`.
        verbose: bool. Print where and how the model was exported. Defaults
            to True.
        precision: None (the model as it computes: float32, Keras' int8 of a quantized
            model, the integer graph of a quantization-aware one), `"float32"`,
            `"float16"` or `"int8"`. Defaults to None.
        representative_data: calibration images for static int8 quantization (and only
            then): an array, a `.npy`/`.npz` path or a dataset spec such as `"digits"`, as
            `export_litert` takes (`representative_images`). Defaults to None (dynamic).
        representative_samples: optional int. Images drawn from a dataset spec. Defaults to
            200.

    Returns:
        An `ExportResult` with `format="onnx"` (`signatures` is empty;
        `inputs` and `outputs` are the ONNX graph's input and output names).

    Raises:
        ValueError: a model without one fixed-size image input (nor NaFlex), a float8 model
            (`model.quantize("float8")`; int8 ones export), a model file that is
            not a valid `.keras` archive, or a path under a file; an unknown `precision`
            (`"bfloat16"` included), `representative_data` without `precision="int8"` or of
            the wrong shape or range, a quantization-aware model with another precision than
            int8 or with `representative_data`.
        FileExistsError: `path` exists and `overwrite` is False, or is a folder.
        FileNotFoundError: a model path that does not exist.
        PermissionError: the folder of `path` is not writable.
        ImportError: TensorFlow or tf2onnx is missing.

    Example:

    >>> from keras_vit.models.vit import ViT
    >>> model = ViT("mu/8", image_size=32, num_classes=10)
    >>> export_onnx(model, "/tmp/vit.onnx", overwrite=True)  # doctest: +SKIP
    """
    _checks.check_method(method)
    overwrite, verbose = _checks.check_flags(overwrite=overwrite, verbose=verbose)
    onnx_precision.check_arguments(precision, representative_data, representative_samples)
    _checks.import_tensorflow()
    path = os.path.abspath(_checks.saving.check_path_argument(path))
    _checks.check_file_target(path, overwrite, (".onnx",), "an ONNX model")
    model = _checks.check_model_argument(model)
    if isinstance(model, keras.Model):
        _input_signature(model)  # fail fast, before saving
        _check_not_float8(model)
        onnx_precision.scheme(model, precision, calibrated=representative_data is not None)
    with tempfile.TemporaryDirectory(prefix="keras_vit_onnx_data_") as folder:
        representative_path = None
        if representative_data is not None:
            loaded = model if isinstance(model, keras.Model) else _checks.load_model(model)
            onnx_precision.scheme(loaded, precision, calibrated=True)
            representative_path = os.path.join(folder, "representative.npy")
            np.save(
                representative_path,
                onnx_precision.calibration_images(
                    loaded, representative_data, representative_samples
                ),
            )
        how, reply = run_with_tensorflow(
            model,
            _write_onnx,
            dict(path=path, overwrite=overwrite, precision=precision,
                 representative_path=representative_path),
            method=method,
        )
    return ExportResult(
        path=path,
        method=how,
        backend=keras.backend.backend(),
        signatures=(),
        inputs=tuple(reply["inputs"]),
        outputs=tuple(reply["outputs"]),
        format="onnx",
        precision=reply["precision"],
        quantization=reply["quantization"],
    ).announce(verbose)

