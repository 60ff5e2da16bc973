"""Tests of reduced-precision exports: keras_vit/export/{precision,model_precision,onnx_precision,
onnx_qat}.py, `export_onnx(precision=...)`, `export_saved_model(precision=...)`, the integer ONNX
graph of a quantization-aware model, and the refusals (before anything is written).

Exports are slow (a TensorFlow trace each): on every backend the module exports two ONNX files
(a QAT model's integer graph and a calibrated static int8 one: the JAX and PyTorch runs go
through the TensorFlow subprocess); the other conversions run in the TensorFlow process whatever
the backend, so they are exported on the TensorFlow backend only.
"""

import os
import warnings

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.export import precision as precisions
from keras_vit.export.onnx_qat import qat_weights_to_qdq
from keras_vit.export.precision import read_export_info
from keras_vit.models.vit import ViT
from keras_vit.training.qat import quantization_aware
from keras_vit.training.quantization import quantization_modes
from tests.helpers import backend_independent, randomize_weights, to_numpy

pytest.importorskip("tensorflow", reason="the exports trace with TensorFlow")
onnxruntime = pytest.importorskip("onnxruntime")
pytest.importorskip("tf2onnx")

IMAGE_SIZE = 16
RNG = np.random.default_rng(0)
PIXELS = RNG.integers(0, 256, (24, IMAGE_SIZE, IMAGE_SIZE, 3), dtype="uint8")
IMAGES = (PIXELS / 127.5 - 1).astype("float32")
on_tensorflow = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="the conversion runs in the TensorFlow process whatever the backend: exported once",
)


def tiny(seed=5):
    model = ViT("mu/8", image_size=IMAGE_SIZE, num_classes=4, num_layers=1)
    randomize_weights(model, seed=seed)
    return model


def run_onnx(path, images=IMAGES):
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: images})[0]


@pytest.fixture(scope="module")
def onnx_files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("precision")
    model = tiny()
    static = keras_vit.export_onnx(
        model, tmp / "static.onnx", precision="int8", representative_data=PIXELS, verbose=False
    )
    qat = quantization_aware(tiny(seed=6), PIXELS[:16])
    qat.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(True))
    qat.fit(IMAGES[:8], np.arange(8) % 4, batch_size=8, epochs=1, verbose=0)  # ranges move
    qat_result = keras_vit.export_onnx(qat, tmp / "qat.onnx", verbose=False)  # precision=None
    return dict(tmp=tmp, model=model, static=static, qat=qat, qat_result=qat_result)


# Slow: the module's two exports (a TensorFlow trace each, in a subprocess on JAX / PyTorch)
# and a QAT fit step; 30-60 s on 2 idle cores.
@pytest.mark.slow
def test_static_int8_onnx_is_close_to_keras(onnx_files):
    result = onnx_files["static"]
    assert (result.precision, result.quantization) == ("int8", "static_qdq")
    assert read_export_info(result.path)["quantization"] == "static_qdq"
    expected = to_numpy(onnx_files["model"](IMAGES))
    logits = run_onnx(result.path)
    # int8 (7-bit weights, calibrated uint8 inputs) of a random one-block model: measured
    # 0.05-0.15 of logits up to ~3-4; same class for nearly every image.
    assert np.abs(logits - expected).max() < 0.1 * np.abs(expected).max()
    assert (logits.argmax(1) == expected.argmax(1)).mean() >= 0.8
    assert "Identity:0" in result.outputs


@pytest.mark.slow
def test_qat_integer_onnx_computes_the_fake_quant_model(onnx_files):
    result = onnx_files["qat_result"]
    assert (result.precision, result.quantization) == ("int8", "qat_qdq")
    import onnx

    graph = onnx.load(result.path).graph
    int8 = [
        i for i in graph.initializer if i.data_type == onnx.TensorProto.INT8 and len(i.dims) == 2
    ]
    assert len(int8) >= 5  # q/k/v (one input: shared or not), output, two MLP, head
    for initializer in int8:
        assert np.abs(onnx.numpy_helper.to_array(initializer)).max() <= 63  # weight_bits=7
    expected = to_numpy(onnx_files["qat"](IMAGES))
    np.testing.assert_allclose(run_onnx(result.path), expected, atol=1e-5)


@pytest.mark.slow
def test_qat_onnx_runs_integer_matmuls(onnx_files):
    import onnx

    options = onnxruntime.SessionOptions()
    optimized = str(onnx_files["tmp"] / "optimized.onnx")
    options.optimized_model_filepath = optimized
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    onnxruntime.InferenceSession(
        str(onnx_files["qat_result"].path), options, providers=["CPUExecutionProvider"]
    )
    ops = [node.op_type for node in onnx.load(optimized).graph.node]
    assert ops.count("MatMulIntegerToFloat") + ops.count("QLinearMatMul") >= 5


@on_tensorflow
@pytest.mark.slow  # five exports (in this process: the TensorFlow backend)
def test_tensorflow_process_conversions(tmp_path):
    """Dynamic int8 and float16 ONNX, bfloat16 and int8 SavedModels of one model."""
    import tensorflow as tf

    model = tiny()
    expected = to_numpy(model(IMAGES))
    scale = np.abs(expected).max()
    dynamic = keras_vit.export_onnx(model, tmp_path / "d.onnx", precision="int8", verbose=False)
    half = keras_vit.export_onnx(model, tmp_path / "h.onnx", precision="float16", verbose=False)
    assert (dynamic.quantization, half.precision) == ("dynamic", "float16")
    assert np.abs(run_onnx(dynamic.path) - expected).max() < 0.1 * scale
    assert np.abs(run_onnx(half.path) - expected).max() < 3e-3 * scale
    assert read_export_info(half.path) == dict(
        format="onnx", precision="float16", keras_vit_version=keras_vit.__version__
    )
    float_result = keras_vit.export_saved_model(model, tmp_path / "f", verbose=False)
    assert read_export_info(float_result.path)["precision"] == "float32"
    for name, tolerance in (("bfloat16", 0.03), ("int8", 0.1)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # this CPU may lack the instructions
            result = keras_vit.export_saved_model(
                model, tmp_path / name, precision=name, verbose=False
            )
        assert result.precision == name and result.signatures == float_result.signatures
        assert read_export_info(result.path)["precision"] == name
        served = tf.saved_model.load(result.path).signatures
        logits = served["serve_uint8"](images=tf.constant(PIXELS))["logits"].numpy()
        assert logits.dtype == np.float32
        assert np.abs(logits - expected).max() < tolerance * scale, name
    assert model.dtype_policy.name == "float32" and not quantization_modes(model)


@on_tensorflow
def test_quantization_aware_saved_model_serves_the_fake_quant_model(tmp_path):
    import tensorflow as tf

    model = quantization_aware(tiny(), PIXELS)
    result = keras_vit.export_saved_model(model, tmp_path / "qat", verbose=False)
    assert (result.precision, result.quantization) == ("float32", "qat_fake_quant")
    served = tf.saved_model.load(result.path).signatures["serving_default"]
    np.testing.assert_allclose(
        served(images=tf.constant(IMAGES))["logits"].numpy(), to_numpy(model(IMAGES)), atol=1e-5
    )


# --- refusals: before anything is written --------------------------------------------------


@pytest.fixture(scope="module")
def qat_model():
    return quantization_aware(tiny(), PIXELS)


@pytest.mark.parametrize(
    "exporter, name, kwargs, match",
    [
        ("onnx", "m.onnx", dict(precision="bfloat16"), "no bfloat16 kernels"),
        ("onnx", "m.onnx", dict(precision="int4"), "precision must be one of"),
        ("onnx", "m.onnx", dict(representative_data=PIXELS), "only|calibrates"),
        ("onnx", "m.onnx", dict(precision="float16", representative_data=PIXELS), "calibrates"),
        ("onnx", "m.onnx", dict(precision="int8", representative_samples=3), "without repr"),
        ("onnx", "m.onnx", dict(precision="int8", representative_data=PIXELS[:, :8]),
         r"expected \(N, 16, 16, 3\)"),
        ("onnx", "m.onnx", dict(precision="int8", representative_data=IMAGES * 3), "range"),
        ("saved_model", "sm", dict(precision="float16"), "precision must be one of"),
    ],
)
def test_bad_precision_arguments_write_nothing(tmp_path, exporter, name, kwargs, match):
    export = keras_vit.export_onnx if exporter == "onnx" else keras_vit.export_saved_model
    with pytest.raises(ValueError, match=match):
        export(tiny(), tmp_path / name, **kwargs)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "exporter, name, kwargs, match",
    [
        ("onnx", "m.onnx", dict(precision="float32"), "exports to ONNX as int8"),
        ("onnx", "m.onnx", dict(precision="float16"), "exports to ONNX as int8"),
        ("onnx", "m.onnx", dict(precision="int8", representative_data=PIXELS), "learned"),
        ("saved_model", "sm", dict(precision="int8"), "no integer kernels"),
        ("saved_model", "sm", dict(precision="bfloat16"), "no integer kernels"),
        ("litert", "m.tflite", dict(), "quantization-aware model"),
        ("litert", "m.tflite", dict(quantize="int8", representative_data=PIXELS), "quantization"),
    ],
)
def test_quantization_aware_model_to_a_format_without_its_ops(
    tmp_path, qat_model, exporter, name, kwargs, match
):
    export = dict(
        onnx=keras_vit.export_onnx,
        saved_model=keras_vit.export_saved_model,
        litert=keras_vit.export_litert,
    )[exporter]
    with pytest.raises(ValueError, match=match):
        export(qat_model, tmp_path / name, **kwargs)
    assert os.listdir(tmp_path) == []


def test_quantized_model_is_not_quantized_twice(tmp_path):
    model = keras_vit.quantize(tiny(), "int8")
    for export, name in ((keras_vit.export_onnx, "m.onnx"), (keras_vit.export_saved_model, "s")):
        with pytest.raises(ValueError, match="already quantized.*quantize twice"):
            export(model, tmp_path / name, precision="int8")
    with pytest.raises(ValueError, match="already quantized.*cannot be undone"):
        keras_vit.export_saved_model(model, tmp_path / "s", precision="bfloat16")
    assert os.listdir(tmp_path) == []


def test_uncalibrated_quantization_aware_model_is_refused(tmp_path):
    with pytest.raises(ValueError, match="range was never set"):
        keras_vit.export_onnx(quantization_aware(tiny()), tmp_path / "m.onnx")
    assert os.listdir(tmp_path) == []


# --- backend-independent parts ---------------------------------------------------------------


@backend_independent
def test_cpu_flags_and_the_warning_given_once(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor : 0\nflags : fpu avx2 avx512f avx512_vnni\n")
    flags = precisions.cpu_flags(str(cpuinfo))
    assert "avx512_vnni" in flags
    assert precisions.native_support("int8", flags) is True
    assert precisions.native_support("bfloat16", flags) is False
    assert precisions.native_support("bfloat16", frozenset({"amx_bf16"})) is True
    assert precisions.cpu_flags(str(tmp_path / "missing")) is None
    assert precisions.native_support("float32", frozenset()) is True
    monkeypatch.setattr(precisions, "_WARNED", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = precisions.warn_if_slow("bfloat16", "tensorflow", flags)
        second = precisions.warn_if_slow("bfloat16", "tensorflow", flags)
        none = precisions.warn_if_slow("int8", "tensorflow", flags)
    assert first == second and "slower than float32" in first and none is None
    assert [type(w.message) for w in caught] == [RuntimeWarning]


@backend_independent
def test_read_export_info_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_export_info(tmp_path / "nothing.onnx")
    (tmp_path / "model.tflite").write_bytes(b"x")
    with pytest.raises(ValueError, match="SavedModel folder or an .onnx file"):
        read_export_info(tmp_path / "model.tflite")
    assert read_export_info(tmp_path) == {}


def _matmul_graph(weight, dequantized_input=True):
    import onnx
    from onnx import helper, numpy_helper

    nodes = [helper.make_node("MatMul", ["a", "w"], ["y"])]
    if dequantized_input:
        nodes.insert(0, helper.make_node("DequantizeLinear", ["q", "s", "z"], ["x"]))
        nodes.insert(1, helper.make_node("Reshape", ["x", "shape"], ["a"]))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("q", onnx.TensorProto.UINT8, [2, 3])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 2])],
        [
            numpy_helper.from_array(weight.astype("float32"), "w"),
            numpy_helper.from_array(np.array(0.1, "float32"), "s"),
            numpy_helper.from_array(np.array(128, "uint8"), "z"),
            numpy_helper.from_array(np.array([2, 3], "int64"), "shape"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])


@backend_independent
def test_qat_weights_become_int8_with_their_scales():
    scale = np.array([0.5, 0.01])
    integers = np.array([[63, -3], [-10, 63], [1, 0]])
    model = qat_weights_to_qdq(_matmul_graph(integers * scale))
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    q = RNG.integers(0, 256, (2, 3), dtype="uint8")
    expected = ((q.astype("float64") - 128) * 0.1) @ (integers * scale)
    np.testing.assert_allclose(session.run(None, {"q": q})[0], expected, rtol=1e-5)
    assert [i.name for i in model.graph.initializer if i.name == "w"] == []


@backend_independent
def test_weights_off_the_grid_or_without_quantized_input_are_refused():
    with pytest.raises(ValueError, match="not on a symmetric per-column integer grid"):
        qat_weights_to_qdq(_matmul_graph(RNG.normal(size=(3, 2))))
    with pytest.raises(ValueError, match="not the graph of a quantization-aware model"):
        qat_weights_to_qdq(_matmul_graph(np.ones((3, 2)), dequantized_input=False))
