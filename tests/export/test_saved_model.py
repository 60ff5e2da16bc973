"""Tests of keras_vit/export/ (SavedModel, ONNX, the TensorFlow subprocess) and `keras-vit export`.

Every SavedModel is called in a fresh process that imports only TensorFlow:
`keras`, `keras_vit` and `tf_keras` are made unimportable there
(`sys.modules[name] = None`), so a signature that needed Keras would fail.
The models are built and saved under the backend the test runs on
(KERAS_BACKEND), so the JAX and PyTorch runs export through the subprocess path.
"""

import base64
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

from keras_vit.export import export_litert, export_onnx, export_saved_model, read_class_names
from keras_vit.models.vit import ViT
from tests.helpers import randomize_weights, to_numpy

tf = pytest.importorskip("tensorflow", reason="SavedModel export needs TensorFlow")

ATOL = 1e-5
IMAGE_SIZE = 32
CLASS_NAMES = [f"class_{i}" for i in range(10)]

# Runs in a fresh interpreter. Never imports keras / keras_vit: they are blocked.
TF_ONLY_SCRIPT = textwrap.dedent(
    """
    import base64, json, sys
    for name in ("keras", "keras_vit", "tf_keras"):
        sys.modules[name] = None  # any import of them now raises ImportError
    import numpy as np
    import tensorflow as tf

    request = json.load(open(sys.argv[1]))
    inputs = np.load(request["inputs"])
    results, errors = {}, {}
    for call in request["calls"]:
        model = tf.saved_model.load(call["saved_model"])
        fn = model.signatures[call["signature"]]
        if "b64" in call:  # encoded images travel as base64, as in a REST request
            arg = tf.constant([base64.b64decode(s) for s in call["b64"]])
        else:
            arg = tf.constant(inputs[call["input"]])
        try:
            outputs = fn(**{call["arg"]: arg})
        except tf.errors.OpError as error:
            errors[call["name"]] = [type(error).__name__, error.message]
            continue
        for key, tensor in outputs.items():
            value = tensor.numpy()
            if tensor.dtype == tf.string:
                value = np.char.decode(value.astype("S"), "utf-8")
            results[call["name"] + "/" + key] = value
    np.savez(request["outputs"], **results)
    report = dict(
        errors=errors,
        keras_modules={k: repr(v) for k, v in sys.modules.items()
                       if k.split(".")[0] in ("keras", "keras_vit", "tf_keras")},
    )
    json.dump(report, open(request["report"], "w"))
    """
)


def call(name, saved_model, signature, **source):
    """One signature call for TF_ONLY_SCRIPT: `input=` an array name, or `b64=` strings."""
    arg = "image_bytes" if signature == "serve_bytes" else "images"
    return dict(name=name, saved_model=saved_model, signature=signature, arg=arg, **source)


def run_tf_only(tmp_path, calls, inputs):
    """Calls SavedModel signatures in a process that imports only TensorFlow."""
    names = ("inputs.npz", "outputs.npz", "report.json")
    paths = {k: str(tmp_path / f"tf_only_{k}") for k in names}
    np.savez(paths["inputs.npz"], **inputs)
    request = dict(
        calls=calls,
        inputs=paths["inputs.npz"],
        outputs=paths["outputs.npz"],
        report=paths["report.json"],
    )
    request_path = tmp_path / "tf_only_request.json"
    request_path.write_text(json.dumps(request))
    script = tmp_path / "tf_only.py"
    script.write_text(TF_ONLY_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("KERAS_BACKEND", "PYTHONPATH")}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    process = subprocess.run(
        [sys.executable, str(script), str(request_path)],
        env=env,
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    outputs = dict(np.load(paths["outputs.npz"], allow_pickle=False))
    with open(paths["report.json"]) as f:
        report = json.load(f)
    return outputs, report


def encode(image, fmt):
    if fmt == "png":
        return tf.io.encode_png(image).numpy()
    return tf.io.encode_jpeg(image, quality=95).numpy()


def decode_and_resize(data, channels=3):
    """What serve_bytes does before the model, written out with tf.image."""
    image = tf.io.decode_image(data, channels=channels, dtype=tf.uint8, expand_animations=False)
    image = tf.image.resize(image, (IMAGE_SIZE, IMAGE_SIZE), method="bilinear", antialias=False)
    return image.numpy()


def run_cli(argv):
    from keras_vit.cli import main

    return main(["export", *argv])


def build_model(variant="mu/8", **kwargs):
    model = ViT(variant, image_size=IMAGE_SIZE, **kwargs)
    randomize_weights(model, seed=7)
    return model


def keras_heads(model, images):
    """(logits, probabilities) computed by the Keras model in this process."""
    head = model.get_layer("head")
    outputs = to_numpy(model(images, training=False))
    if head.activation.__name__ == "softmax":
        features = keras.Model(model.inputs[0], head.input)(images, training=False)
        logits = to_numpy(features) @ to_numpy(head.kernel) + to_numpy(head.bias)
        return logits, outputs
    logits = outputs
    return logits, to_numpy(keras.ops.softmax(logits, axis=-1))


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Exports two models and calls every signature in one TensorFlow-only process.

    Model A: softmax head, 10 classes, exported with the Python API (version 1,
    class names, top_k=3). Model B: linear head, GAP, 4 classes, saved as .keras
    under this backend and exported with the CLI over an existing SavedModel
    (--overwrite).
    """
    tmp = tmp_path_factory.mktemp("export")
    keras.utils.set_random_seed(0)
    model_a = build_model(num_classes=10, classifier_activation="softmax")
    result_a = export_saved_model(
        model_a, tmp / "model_a", version=1, class_names=CLASS_NAMES, top_k=3
    )

    model_b = build_model(num_classes=4, pooling="gap")
    model_b.save(tmp / "model_b.keras")
    shutil.copytree(tmp / "model_a" / "1", tmp / "model_b" / "2")  # a SavedModel to replace
    cli = {}
    argv = [str(tmp / "model_b.keras"), str(tmp / "model_b"), "--version", "2", "--top-k", "2"]
    cli["without_overwrite"] = run_cli(argv)
    cli["with_overwrite"] = run_cli(argv + ["--overwrite"])

    # ResNet stem (1, 1) units, width 8 + the mu transformer
    hybrid = build_model(
        variant="mu/1", resnet_units=(1, 1), resnet_width=8, resnet_groups=4, num_classes=5
    )
    export_saved_model(hybrid, tmp / "hybrid")

    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (3, IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
    floats = rng.uniform(-1, 1, (2, IMAGE_SIZE, IMAGE_SIZE, 3)).astype("float32")
    big = rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)
    gray = rng.integers(0, 256, (24, 20, 1), dtype=np.uint8)
    rows, cols = np.meshgrid(np.arange(36), np.arange(36), indexing="ij")
    smooth = np.stack([rows * 7, cols * 7, (rows + cols) * 3], -1).astype(np.uint8)
    encoded = [
        encode(pixels[0], "png"),  # exactly the model's size: no resampling
        encode(big, "png"),  # resized 40x48 -> 32x32
        encode(gray, "png"),  # grayscale, decoded to 3 channels, resized
        encode(smooth, "jpeg"),  # JPEG, resized
    ]
    b64 = [base64.b64encode(data).decode("ascii") for data in encoded]
    not_an_image = [base64.b64encode(b"definitely not an image").decode("ascii")]
    inputs = {"floats": floats, "pixels": pixels}
    path_a = str(tmp / "model_a" / "1")
    path_b = str(tmp / "model_b" / "2")
    calls = [
        call("a_float", path_a, "serving_default", input="floats"),
        call("a_uint8", path_a, "serve_uint8", input="pixels"),
        call("a_bytes", path_a, "serve_bytes", b64=b64),
        call("a_bad", path_a, "serve_bytes", b64=not_an_image),
        # the same process goes on serving after the error:
        call("a_after_bad", path_a, "serving_default", input="floats"),
        call("b_float", path_b, "serving_default", input="floats"),
        call("b_bytes", path_b, "serve_bytes", b64=b64),
    ]
    path_h = str(tmp / "hybrid")
    calls += [
        call("h_float", path_h, "serving_default", input="floats"),
        call("h_bytes", path_h, "serve_bytes", b64=b64),
    ]
    outputs, report = run_tf_only(tmp, calls, inputs)
    return dict(
        tmp=tmp,
        model_a=model_a,
        model_b=model_b,
        hybrid=hybrid,
        result_a=result_a,
        cli=cli,
        inputs=dict(floats=floats, pixels=pixels, encoded=encoded, big=big, gray=gray),
        outputs=outputs,
        report=report,
    )


@pytest.mark.slow
def test_result_says_which_path(served):
    result = served["result_a"]
    expected = "in_process" if keras.backend.backend() == "tensorflow" else "subprocess"
    assert result.method == expected
    assert result.backend == keras.backend.backend()
    assert result.path == str(served["tmp"] / "model_a" / "1")
    assert result.signatures == ("serving_default", "serve_uint8", "serve_bytes")
    assert result.outputs == (
        "logits",
        "probabilities",
        "top_k_indices",
        "top_k_probabilities",
        "top_k_classes",
    )
    assert os.path.isfile(os.path.join(result.path, "saved_model.pb"))
    # No staging folder is left next to the version folder.
    assert sorted(os.listdir(served["tmp"] / "model_a")) == ["1"]


@pytest.mark.slow
def test_tf_only_process_never_imported_keras(served):
    # The blocked names stay None: nothing in the serving process imported them.
    assert served["report"]["keras_modules"] == {
        "keras": "None",
        "keras_vit": "None",
        "tf_keras": "None",
    }


@pytest.mark.slow
def test_serving_default_matches_keras(served):
    out = served["outputs"]
    logits, probabilities = keras_heads(served["model_a"], served["inputs"]["floats"])
    np.testing.assert_allclose(out["a_float/logits"], logits, rtol=0, atol=ATOL)
    np.testing.assert_allclose(out["a_float/probabilities"], probabilities, rtol=0, atol=ATOL)
    # The head's softmax is not applied twice.
    np.testing.assert_allclose(out["a_float/probabilities"].sum(-1), 1.0, atol=1e-5)
    assert out["a_float/probabilities"].std() > 1e-3  # not the uniform softmax of probabilities
    np.testing.assert_allclose(
        out["a_float/probabilities"], to_numpy(keras.ops.softmax(logits)), rtol=0, atol=ATOL
    )
    top = np.argsort(-probabilities, axis=-1)[:, :3]
    np.testing.assert_array_equal(out["a_float/top_k_indices"], top)
    np.testing.assert_allclose(
        out["a_float/top_k_probabilities"],
        np.take_along_axis(probabilities, top, -1),
        rtol=0,
        atol=ATOL,
    )
    names = np.array(CLASS_NAMES)[top]
    assert out["a_float/top_k_classes"].tolist() == names.tolist()


@pytest.mark.slow
def test_serve_uint8_matches_keras(served):
    pixels = served["inputs"]["pixels"]
    logits, probabilities = keras_heads(served["model_a"], pixels.astype("float32") / 127.5 - 1)
    np.testing.assert_allclose(served["outputs"]["a_uint8/logits"], logits, rtol=0, atol=ATOL)
    np.testing.assert_allclose(
        served["outputs"]["a_uint8/probabilities"], probabilities, rtol=0, atol=ATOL
    )


@pytest.mark.slow
def test_serve_bytes_matches_keras(served):
    inputs = served["inputs"]
    # The PNG at the model's size decodes to its pixels exactly and is not resampled.
    np.testing.assert_array_equal(decode_and_resize(inputs["encoded"][0]), inputs["pixels"][0])
    images = np.stack([decode_and_resize(data) for data in inputs["encoded"]])
    assert images.shape == (4, IMAGE_SIZE, IMAGE_SIZE, 3)
    images = images / 127.5 - 1
    models = [
        ("a_bytes", served["model_a"]),
        ("b_bytes", served["model_b"]),
        ("h_bytes", served["hybrid"]),
    ]
    for prefix, model in models:
        logits, probabilities = keras_heads(model, images.astype("float32"))
        out = served["outputs"]
        np.testing.assert_allclose(out[f"{prefix}/logits"], logits, rtol=0, atol=ATOL)
        np.testing.assert_allclose(out[f"{prefix}/probabilities"], probabilities, rtol=0, atol=ATOL)


@pytest.mark.slow
def test_bytes_that_are_not_an_image_fail_the_request_only(served):
    error_type, message = served["report"]["errors"]["a_bad"]
    assert error_type == "InvalidArgumentError"
    assert "Unknown image file format" in message
    # The process survived the error and served the next request.
    np.testing.assert_array_equal(
        served["outputs"]["a_after_bad/logits"], served["outputs"]["a_float/logits"]
    )
    assert set(served["report"]["errors"]) == {"a_bad"}


@pytest.mark.slow
def test_cli_refuses_then_overwrites(served):
    assert served["cli"] == {"without_overwrite": 2, "with_overwrite": 0}
    out = served["outputs"]
    # The replaced SavedModel is model B's (4 classes, linear head: softmax added).
    logits, probabilities = keras_heads(served["model_b"], served["inputs"]["floats"])
    assert out["b_float/logits"].shape == (2, 4)
    np.testing.assert_allclose(out["b_float/logits"], logits, rtol=0, atol=ATOL)
    np.testing.assert_allclose(out["b_float/probabilities"], probabilities, rtol=0, atol=ATOL)
    assert out["b_float/top_k_indices"].shape == (2, 2)
    assert "b_float/top_k_classes" not in out


@pytest.mark.slow
def test_hybrid_model_exports(served):
    out = served["outputs"]
    logits, probabilities = keras_heads(served["hybrid"], served["inputs"]["floats"])
    assert out["h_float/logits"].shape == (2, 5)
    assert np.abs(logits).max() > 1e-2  # randomised weights: not a trivial all-zero head
    np.testing.assert_allclose(out["h_float/logits"], logits, rtol=0, atol=ATOL)
    np.testing.assert_allclose(out["h_float/probabilities"], probabilities, rtol=0, atol=ATOL)


@pytest.mark.slow
def test_dynamic_size_distilled_model_serves_two_image_sizes(tmp_path):
    """`(None, None, None, C)` signatures; a DeiT head's logits are the averaged heads'."""
    model = ViT(
        "mu/8",
        image_size=(16, 24),
        num_classes=4,
        num_layers=1,
        dynamic_image_size=True,
        distillation_token=True,
        num_register_tokens=1,
        classifier_activation="softmax",
    )
    randomize_weights(model, seed=5)
    result = export_saved_model(model, tmp_path / "dynamic", version=1, top_k=2, verbose=False)
    assert result.signatures == ("serving_default", "serve_uint8", "serve_bytes")
    rng = np.random.default_rng(0)
    inputs = {
        "small": rng.uniform(-1, 1, (2, 16, 24, 3)).astype("float32"),
        "large": rng.uniform(-1, 1, (3, 32, 40, 3)).astype("float32"),
        "pixels": rng.integers(0, 256, (1, 24, 16, 3), dtype=np.uint8),
    }
    png = base64.b64encode(encode(inputs["pixels"][0], "png")).decode("ascii")
    path = str(tmp_path / "dynamic" / "1")
    calls = [
        call("small", path, "serving_default", input="small"),
        call("large", path, "serving_default", input="large"),
        call("uint8", path, "serve_uint8", input="pixels"),
        call("bytes", path, "serve_bytes", b64=[png]),
    ]
    outputs, report = run_tf_only(tmp_path, calls, inputs)
    assert report["errors"] == {}
    logits_model = keras.Model(model.inputs[0], model.get_layer("head_average").output)
    for key in ("small", "large"):
        x = inputs[key]
        np.testing.assert_allclose(
            outputs[f"{key}/logits"], to_numpy(logits_model(x)), rtol=0, atol=ATOL
        )
        np.testing.assert_allclose(
            outputs[f"{key}/probabilities"], to_numpy(model(x)), rtol=0, atol=ATOL
        )
    pixels = inputs["pixels"].astype("float32") / 127.5 - 1
    np.testing.assert_allclose(outputs["uint8/probabilities"], to_numpy(model(pixels)), atol=ATOL)
    # serve_bytes resizes to the size the position embedding was made for, (16, 24).
    resized = tf.image.resize(inputs["pixels"][0], (16, 24), method="bilinear").numpy()
    expected = to_numpy(model(resized[None] / 127.5 - 1))
    np.testing.assert_allclose(outputs["bytes/probabilities"], expected, atol=ATOL)


def _missing(*modules):
    return [m for m in modules if importlib.util.find_spec(m) is None]


@pytest.mark.slow
@pytest.mark.skipif(
    bool(_missing("onnx", "onnxruntime", "tf2onnx")),
    reason=f"ONNX export needs onnx, onnxruntime and tf2onnx; missing: "
    f"{_missing('onnx', 'onnxruntime', 'tf2onnx')}",
)
def test_onnx_export_matches_keras(tmp_path):
    import onnxruntime

    model = build_model(num_classes=10)
    result = export_onnx(model, tmp_path / "vit.onnx")
    expected = "in_process" if keras.backend.backend() == "tensorflow" else "subprocess"
    assert (result.method, result.format) == (expected, "onnx")
    session = onnxruntime.InferenceSession(
        str(tmp_path / "vit.onnx"), providers=["CPUExecutionProvider"]
    )
    (onnx_input,) = session.get_inputs()
    assert onnx_input.name == "images" and onnx_input.shape[1:] == [IMAGE_SIZE, IMAGE_SIZE, 3]
    images = np.random.default_rng(1).uniform(-1, 1, (3, IMAGE_SIZE, IMAGE_SIZE, 3))
    images = images.astype("float32")
    expected_logits = to_numpy(model(images, training=False))
    for batch in (3, 1):  # the batch size is free
        (logits,) = session.run(None, {"images": images[:batch]})
        np.testing.assert_allclose(logits, expected_logits[:batch], rtol=0, atol=ATOL)
    with pytest.raises(FileExistsError, match="exists"):
        export_onnx(model, tmp_path / "vit.onnx")


def test_cli_message_names_the_path(tmp_path, capsys):
    model = ViT("mu/8", image_size=16, num_classes=3)
    model.save(tmp_path / "m.keras")
    (tmp_path / "serving" / "1").mkdir(parents=True)
    (tmp_path / "serving" / "1" / "saved_model.pb").write_bytes(b"")
    code = run_cli([str(tmp_path / "m.keras"), str(tmp_path / "serving"), "--version", "1"])
    assert code == 2
    err = capsys.readouterr().err
    assert "is not empty" in err and "--overwrite" in err


def test_non_empty_version_folder_needs_overwrite(tmp_path):
    model = ViT("mu/8", image_size=16, num_classes=3)
    target = tmp_path / "serving" / "3"
    target.mkdir(parents=True)
    (target / "notes.txt").write_text("not a SavedModel")
    with pytest.raises(FileExistsError, match="is not empty.*overwrite=True"):
        export_saved_model(model, tmp_path / "serving", version=3)
    # overwrite=True never deletes a folder that is not a SavedModel.
    with pytest.raises(FileExistsError, match="holds no saved_model.pb"):
        export_saved_model(model, tmp_path / "serving", version=3, overwrite=True)
    assert (target / "notes.txt").read_text() == "not a SavedModel"


def test_unknown_image_size_raises(tmp_path):
    inputs = keras.Input((None, None, 3))
    x = keras.layers.GlobalAveragePooling2D()(inputs)
    model = keras.Model(inputs, keras.layers.Dense(3, name="head")(x))
    with pytest.raises(ValueError, match=r"fixed image size.*\(None, None, None, 3\)"):
        export_saved_model(model, tmp_path / "serving", version=1)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(version=-1), "version must be a non-negative int"),
        (dict(version="1"), "version must be a non-negative int"),
        (dict(top_k=4), r"top_k must be an int in \[1, num_classes=3\]"),
        (dict(class_names=["a", "b"]), "2 names for num_classes=3"),
        (dict(class_names="abc"), "class_names must be a sequence"),
        (dict(method="jax2tf"), "method must be one of"),
    ],
)
def test_bad_arguments_raise(tmp_path, kwargs, match):
    model = ViT("mu/8", image_size=16, num_classes=3)
    with pytest.raises(ValueError, match=match):
        export_saved_model(model, tmp_path / "serving", **kwargs)
    assert not (tmp_path / "serving").exists()


def test_feature_extractor_raises(tmp_path):
    model = ViT("mu/8", image_size=16, include_top=False)
    with pytest.raises(ValueError, match="needs a classifier head.*without a head"):
        export_saved_model(model, tmp_path / "serving")


def test_missing_model_file_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match="Model file not found"):
        export_saved_model(tmp_path / "nope.keras", tmp_path / "serving")


# --- read_class_names, target paths, model files (no TensorFlow graph is traced) ----------------


def test_read_class_names(tmp_path):
    path = tmp_path / "classes.txt"
    path.write_bytes(b"cat\r\nhot dog\r\n\xc3\xa9clair\n\n  \n")
    assert read_class_names(path) == ["cat", "hot dog", "\u00e9clair"]
    (tmp_path / "latin1.txt").write_bytes(b"cat\n\xe9clair\n")
    with pytest.raises(ValueError, match=r"latin1\.txt.*is not UTF-8 text.*byte 4"):
        read_class_names(tmp_path / "latin1.txt")
    with pytest.raises(FileNotFoundError, match=r"nope\.txt"):
        read_class_names(tmp_path / "nope.txt")
    with pytest.raises(IsADirectoryError, match=re.escape(repr(str(tmp_path)))):
        read_class_names(tmp_path)


@pytest.mark.parametrize("exporter", [export_saved_model, export_onnx, export_litert])
def test_target_under_a_file_or_read_only_names_the_path(tmp_path, monkeypatch, exporter):
    model = ViT("mu/8", image_size=16, num_classes=3)

    def export(target):
        return exporter(model, target)

    # A name each exporter accepts (its writers check that the suffix names their format).
    name = {export_saved_model: "model", export_onnx: "model.onnx"}.get(exporter, "model.tflite")
    (tmp_path / "notes.txt").write_text("a file")
    under_file = str(tmp_path / "notes.txt" / "serving" / name)
    with pytest.raises(
        ValueError, match=re.escape(repr(str(tmp_path / "notes.txt")) + " is a file")
    ):
        export(under_file)
    read_only = tmp_path / "read_only"
    read_only.mkdir()
    real_access = os.access  # as root, chmod alone would not stop a write: ask os.access
    monkeypatch.setattr(
        os, "access", lambda path, mode: path != str(read_only) and real_access(path, mode)
    )
    with pytest.raises(PermissionError, match=re.escape(repr(str(read_only))) + " is not writable"):
        export(str(read_only / name))
    assert os.listdir(read_only) == []


def test_existing_file_as_saved_model_folder(tmp_path):
    model = ViT("mu/8", image_size=16, num_classes=3)
    (tmp_path / "serving").write_text("a file")
    with pytest.raises(FileExistsError, match="exists and is not a folder"):
        export_saved_model(model, tmp_path / "serving")


@pytest.mark.parametrize("keep", [0.5, 0.0])
def test_corrupt_keras_file_is_not_reported_as_missing(tmp_path, keep):
    model = ViT("mu/8", image_size=16, num_classes=3)
    model.save(tmp_path / "m.keras")
    data = (tmp_path / "m.keras").read_bytes()
    (tmp_path / "m.keras").write_bytes(data[: int(len(data) * keep)])
    # Each exporter's own kind of target (its writers check that the suffix names its format).
    for export, out in ((export_saved_model, "out"), (export_onnx, "out.onnx"),
                        (export_litert, "out.tflite")):  # fmt: skip
        with pytest.raises(ValueError, match=r"m\.keras'? is not a valid \.keras archive"):
            export(tmp_path / "m.keras", tmp_path / out)
        assert not (tmp_path / out).exists()


def test_export_package_never_imports_the_top_level_package():
    import ast

    import keras_vit.export

    folder = os.path.dirname(keras_vit.export.__file__)
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(folder, name)) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                assert "keras_vit" not in [a.name for a in node.names], name
            elif isinstance(node, ast.ImportFrom):
                assert node.module != "keras_vit", f"{name}: from keras_vit import ..."


# --- the shared TensorFlow-subprocess helper (one export and one error through it) ---------------


@pytest.mark.slow
def test_compiled_model_exports_through_the_subprocess(tmp_path):
    """A model compiled (with an optimizer) under this backend loads with compile=False there."""
    model = build_model(num_classes=3)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.save(tmp_path / "compiled.keras")
    (tmp_path / "classes.txt").write_text("ant\nbee\ncat\n\n")
    result = export_saved_model(
        tmp_path / "compiled.keras",
        tmp_path / "serving",
        class_names=read_class_names(tmp_path / "classes.txt"),
        method="subprocess",
    )
    assert (result.method, result.backend) == ("subprocess", keras.backend.backend())
    assert result.outputs[-1] == "top_k_classes"
    images = np.random.default_rng(2).uniform(-1, 1, (2, IMAGE_SIZE, IMAGE_SIZE, 3))
    images = images.astype("float32")
    outputs = tf.saved_model.load(result.path).signatures["serving_default"](
        images=tf.constant(images)
    )
    logits, _ = keras_heads(model, images)
    np.testing.assert_allclose(outputs["logits"].numpy(), logits, rtol=0, atol=ATOL)
    assert outputs["top_k_classes"].numpy()[0, 0].decode() in ("ant", "bee", "cat")


@pytest.mark.slow
def test_subprocess_error_keeps_its_type_and_message(tmp_path):
    ViT("mu/8", image_size=16, include_top=False).save(tmp_path / "features.keras")
    with pytest.raises(ValueError) as info:
        export_saved_model(tmp_path / "features.keras", tmp_path / "serving", method="subprocess")
    message = str(info.value)
    assert "needs a classifier head" in message
    assert "raised by the export subprocess with KERAS_BACKEND=tensorflow" in message
    assert not (tmp_path / "serving").exists()


@pytest.mark.slow  # 12-33 s for the int8 export (JAX, PyTorch: a subprocess)
@pytest.mark.parametrize("kind", ["int8", "lora"])
def test_saved_model_of_int8_and_lora_models_matches_keras(kind, tmp_path):
    # int8: the graph computes with the int8 kernels (same outputs as Keras). LoRA: the export
    # folds the adapters into a copy's kernels (keras_vit.merge_lora) and leaves the model as is.
    from keras_vit.training.lora import enable_lora, get_lora_settings
    from keras_vit.training.quantization import quantize

    model = ViT("mu/8", image_size=16, num_classes=3, num_layers=1)  # each block exports alike
    randomize_weights(model, seed=4)
    if kind == "int8":
        quantize(model, "int8")
    else:
        enable_lora(model, 2)
        randomize_weights(model, seed=5)  # nonzero adapters, as after training
    images = np.random.default_rng(3).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    result = export_saved_model(model, tmp_path / kind, verbose=False)
    outputs = tf.saved_model.load(result.path).signatures["serving_default"](
        images=tf.constant(images)
    )
    np.testing.assert_allclose(outputs["logits"].numpy(), to_numpy(model(images)), atol=ATOL)
    if kind == "lora":
        assert get_lora_settings(model) == {"rank": 2, "alpha": 2.0, "targets": ("query", "value")}


def test_onnx_refuses_float8_before_any_work(tmp_path):
    from keras_vit.training.quantization import quantize

    model = quantize(ViT("mu/8", image_size=16, num_classes=3), "float8")
    with pytest.raises(ValueError, match="tf2onnx has no float8 type.*Received: a float8 model"):
        export_onnx(model, tmp_path / "m.onnx")
    assert not os.listdir(tmp_path)
