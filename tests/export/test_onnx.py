"""keras_vit/export/onnx.py: a model with the exact GELU (every timm ViT) exports to an ONNX
graph onnxruntime runs, equal to Keras within 1e-5 (tf2onnx writes TensorFlow's erfc as an
`Erfc` node no ONNX opset has: `replace_erfc` rewrites it as `1 - Erf`); the tf2onnx memory
adapter (keras_vit/export/tf2onnx_memory.py) writes the graph tf2onnx writes without it."""

import collections
import contextlib
import gc
import os

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.export import onnx as onnx_export
from keras_vit.export.onnx import replace_erfc
from keras_vit.export.tf2onnx_memory import collecting_between_optimizers
from tests.helpers import backend_independent, randomize_weights, to_numpy

pytest.importorskip("tf2onnx")
ort = pytest.importorskip("onnxruntime")


def test_erfc_nodes_become_one_minus_erf():
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Erfc", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
    )
    assert replace_erfc(graph) == 1 and replace_erfc(graph) == 0
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    onnx.checker.check_model(model)
    x = np.array([-3.0, 0.0, 2.0], "float32")
    (y,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    from math import erfc

    np.testing.assert_allclose(y, [erfc(v) for v in x], atol=1e-6)


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="traced by TensorFlow in this process; the other backends' subprocess path is "
    "tests/export/test_saved_model.py's",
)
def test_exact_gelu_model_runs_in_onnxruntime(tmp_path, monkeypatch):
    model = keras_vit.ViT("mu/8", image_size=16, num_layers=1, num_classes=3,
                          approximate_gelu=False)  # fmt: skip
    randomize_weights(model, seed=1)
    path = str(tmp_path / "exact_gelu.onnx")
    keras_vit.export_onnx(model, path, verbose=False)
    images = np.random.default_rng(0).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    session = ort.InferenceSession(path)
    (logits,) = session.run(None, {session.get_inputs()[0].name: images})
    np.testing.assert_allclose(logits, to_numpy(model(images)), atol=1e-5)
    assert os.path.getsize(path) > 0

    # The tf2onnx adapter (a full collection before each optimizer) changes nothing written:
    # the same nodes and logits as tf2onnx alone. And it did collect.
    import onnx

    full_collections = []

    def count(phase, info):
        if phase == "start" and info["generation"] == 2:
            full_collections.append(1)

    gc.callbacks.append(count)
    try:
        keras_vit.export_onnx(model, str(tmp_path / "adapted.onnx"), verbose=False)
    finally:
        gc.callbacks.remove(count)
    with monkeypatch.context() as patched:
        patched.setattr(onnx_export, "collecting_between_optimizers", contextlib.nullcontext)
        keras_vit.export_onnx(model, str(tmp_path / "plain.onnx"), verbose=False)
    graphs = {k: onnx.load(str(tmp_path / f"{k}.onnx")).graph for k in ("adapted", "plain")}
    ops = {k: collections.Counter(n.op_type for n in g.node) for k, g in graphs.items()}
    assert ops["adapted"] == ops["plain"] and len(full_collections) >= 10
    for name in graphs:
        session = ort.InferenceSession(str(tmp_path / f"{name}.onnx"))
        (out,) = session.run(None, {session.get_inputs()[0].name: images})
        np.testing.assert_array_equal(out, logits)


@backend_independent
def test_the_tf2onnx_adapter_restores_tf2onnx_whatever_happens():
    from tf2onnx import optimizer

    before = list(optimizer._optimizers.items())
    with pytest.raises(RuntimeError, match="inside"):
        with collecting_between_optimizers():
            with collecting_between_optimizers():  # nested: adapted once
                adapted = list(optimizer._optimizers.values())
                assert all(type(f).__name__ == "_Collecting" for f in adapted)
                assert all(f.factory is b for f, (_, b) in zip(adapted, before, strict=True))
            raise RuntimeError("inside")
    assert list(optimizer._optimizers.items()) == before
