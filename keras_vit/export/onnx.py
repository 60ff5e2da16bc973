"""ONNX export of a ViT's forward pass, traced by Keras' TensorFlow backend with tf2onnx."""

import os

import keras

from keras_vit.export import _checks
from keras_vit.export._tf_subprocess import run_with_tensorflow
from keras_vit.export.naflex_serving import naflex_config, naflex_inputs
from keras_vit.export.saved_model import ExportResult
from keras_vit.saving import atomic_write


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


def _write_onnx(model, path, *, overwrite):
    """`model.export(format="onnx")` under the TensorFlow backend (tf2onnx), batch size free."""
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

    def write(staged):
        model.export(staged, format="onnx", input_signature=signature, verbose=False)
        proto = onnx.load(staged)
        if replace_erfc(proto.graph):  # the exact GELU: an op onnxruntime can run
            onnx.save(proto, staged)
        graph = proto.graph
        return [i.name for i in graph.input], [output.name for output in graph.output]

    inputs, outputs = atomic_write(path, write, "model.onnx")
    return dict(inputs=inputs, outputs=outputs)


def export_onnx(model, path, *, overwrite=False, method="auto", verbose=True):
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

    Args:
        model: a `keras.Model` with one image input of fixed size or a NaFlex
            model, or a path to a `.keras` file of one.
        path: str or path. The `.onnx` file to write.
        overwrite: bool. Replace an existing file. Defaults to False.
        method: `"auto"` or `"subprocess"` (see `export_saved_model`).
            Defaults to `"auto"`.
        verbose: bool. Print where and how the model was exported. Defaults
            to True.

    Returns:
        An `ExportResult` with `format="onnx"` (`signatures` is empty;
        `inputs` and `outputs` are the ONNX graph's input and output names).

    Raises:
        ValueError: a model without one fixed-size image input (nor NaFlex), a float8 model
            (`model.quantize("float8")`; int8 ones export), a model file that is
            not a valid `.keras` archive, or a path under a file.
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
    _checks.import_tensorflow()
    path = os.path.abspath(_checks.saving.check_path_argument(path))
    _checks.check_file_target(path, overwrite, (".onnx",), "an ONNX model")
    model = _checks.check_model_argument(model)
    if isinstance(model, keras.Model):
        _input_signature(model)  # fail fast, before saving
        _check_not_float8(model)
    how, reply = run_with_tensorflow(
        model, _write_onnx, dict(path=path, overwrite=overwrite), method=method
    )
    return ExportResult(
        path=path,
        method=how,
        backend=keras.backend.backend(),
        signatures=(),
        inputs=tuple(reply["inputs"]),
        outputs=tuple(reply["outputs"]),
        format="onnx",
    ).announce(verbose)
