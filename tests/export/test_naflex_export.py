"""NaFlex models (`naflex=True`) in ONNX and LiteRT, and with int8 and LoRA (issue 31).

One tiny NaFlex model (mu/4 at 16 px: a 4 x 4 position table, 1 block, random weights) and one
batch of six images of different sizes and aspect ratios (`keras_vit.data.naflex_batch`, 16
patches per image at most):

- ONNX (`export_onnx`): the three named inputs with the batch size and the sequence length free,
  run by onnxruntime at 16 and at 24 patches: logits equal to Keras within 1e-5. Every backend
  (in process on TensorFlow, the TensorFlow subprocess on JAX and PyTorch).
- LiteRT (`export_litert`): the three inputs at `max_patches` rows, builtin operators only, run by
  the LiteRT interpreter: float within test_litert's ATOL, float16 and dynamic_int8 within
  test_litert's tolerances, full int8 (calibrated on images of any sizes, through the subprocess
  helper) within 20% of the largest logit (measured 9%; the same class for 5 of 6 images).
  TensorFlow backend (the converter runs under TensorFlow whatever the backend; its subprocess
  path is the int8 export here).
- int8 (`keras_vit.quantize`) and LoRA (`enable_lora`, `merge_lora`) on every backend, as
  tests/training/test_quantization.py and test_lora.py measure them, with `.keras` round trips;
  the int8 model exports to a SavedModel (TensorFlow backend: the trace is TensorFlow's).
"""

import importlib.util
import os

import keras
import numpy as np
import pytest

from keras_vit.data import naflex_batch
from keras_vit.export import export_litert, export_onnx, export_saved_model
from keras_vit.models.vit import ViT
from keras_vit.saving import load_model
from keras_vit.training.lora import TARGETS, enable_lora, get_lora_settings, merge_lora
from keras_vit.training.quantization import quantization_modes, quantize
from tests.helpers import randomize_weights, to_numpy

tf = pytest.importorskip("tensorflow", reason="export traces with TensorFlow")

ATOL = 1e-5  # ONNX and SavedModel against Keras (tests/export/test_saved_model.py)
LITERT_ATOL = 1e-4  # LiteRT float against Keras (tests/export/test_litert.py)
PATCH_SIZE = 4
MAX_PATCHES = 16  # the position table's grid: export_litert's default
SIZES = ((12, 20), (20, 12), (9, 30), (16, 16), (7, 7), (33, 65))
IN_PROCESS = keras.backend.backend() == "tensorflow"
TF_ONLY = pytest.mark.skipif(
    not IN_PROCESS,
    reason="the LiteRT converter and the SavedModel trace run under TensorFlow whatever the "
    "backend (the subprocess path: test_onnx_three_inputs_any_batch_and_length here)",
)
ONNX_MISSING = [
    m for m in ("onnx", "onnxruntime", "tf2onnx") if importlib.util.find_spec(m) is None
]


def build_model():
    return ViT("mu/4", image_size=16, num_classes=3, naflex=True, num_layers=1)


def feed(batch):
    """A NaFlex batch as the exported graphs take it (`patch_coord` int32)."""
    return dict(
        patches=batch["patches"],
        patch_coord=batch["patch_coord"].astype("int32"),
        patch_valid=batch["patch_valid"],
    )


@pytest.fixture(scope="module")
def naflex():
    model = build_model()
    randomize_weights(model, seed=2, scale=0.1)
    rng = np.random.default_rng(0)
    images = [rng.uniform(-1, 1, (*size, 3)).astype("float32") for size in SIZES]
    batches = {n: naflex_batch(images, PATCH_SIZE, n) for n in (MAX_PATCHES, 24)}
    assert len(set(batches[MAX_PATCHES]["patch_valid"].sum(-1).tolist())) > 2  # mixed grids
    logits = {n: to_numpy(model(batch)) for n, batch in batches.items()}
    return dict(model=model, images=images, batches=batches, logits=logits)


@pytest.mark.slow  # a TensorFlow subprocess on JAX and PyTorch (9-15 s)
@pytest.mark.skipif(bool(ONNX_MISSING), reason=f"ONNX export needs {ONNX_MISSING}")
def test_onnx_three_inputs_any_batch_and_length(naflex, tmp_path):
    import onnxruntime

    result = export_onnx(naflex["model"], tmp_path / "naflex.onnx", verbose=False)
    assert result.method == ("in_process" if IN_PROCESS else "subprocess")
    assert sorted(result.inputs) == ["patch_coord", "patch_valid", "patches"]
    session = onnxruntime.InferenceSession(result.path, providers=["CPUExecutionProvider"])
    shapes = {i.name: (i.type, i.shape) for i in session.get_inputs()}
    assert shapes["patches"][0] == "tensor(float)" and shapes["patches"][1][2] == 48
    assert shapes["patch_coord"][0] == "tensor(int32)" and shapes["patch_coord"][1][2] == 2
    assert shapes["patch_valid"][0] == "tensor(bool)"
    for _, shape in shapes.values():  # batch size and sequence length free
        assert all(isinstance(d, str) for d in shape[:2]), shapes
    for n, batch in naflex["batches"].items():
        (logits,) = session.run(None, feed(batch))
        np.testing.assert_allclose(logits, naflex["logits"][n], rtol=0, atol=ATOL)
    two = {k: v[2:4] for k, v in feed(naflex["batches"][MAX_PATCHES]).items()}
    (logits,) = session.run(None, two)
    np.testing.assert_allclose(logits, naflex["logits"][MAX_PATCHES][2:4], rtol=0, atol=ATOL)


def _litert_logits(path, batch):
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=str(path)).get_signature_runner("serving_default")
    return runner(**feed(batch))["logits"]


@pytest.fixture(scope="module")
def litert_files(naflex, tmp_path_factory):
    """Float at 24 patches; float16, dynamic_int8 and int8 at the default 16 (int8 calibrated
    on uint8 images of any sizes, written by the TensorFlow subprocess)."""
    pytest.importorskip("ai_edge_litert.interpreter", reason="needs ai-edge-litert")
    if not IN_PROCESS:
        pytest.skip("LiteRT: TensorFlow backend")
    tmp = tmp_path_factory.mktemp("naflex_litert")
    model = naflex["model"]
    results = {None: export_litert(model, tmp / "float.tflite", max_patches=24, verbose=False)}
    for mode in ("float16", "dynamic_int8"):
        results[mode] = export_litert(model, tmp / f"{mode}.tflite", quantize=mode, verbose=False)
    rng = np.random.default_rng(1)
    calibration = [rng.integers(0, 256, (*size, 3), dtype=np.uint8) for size in SIZES * 3]
    results["int8"] = export_litert(
        model, tmp / "int8.tflite", quantize="int8", representative_data=calibration,
        method="subprocess", verbose=False,
    )  # fmt: skip
    return results


@pytest.mark.slow
@TF_ONLY
def test_litert_float_three_inputs_at_max_patches(naflex, litert_files):
    from ai_edge_litert.interpreter import Interpreter

    from tests.export.test_litert import op_names

    result = litert_files[None]
    assert result.inputs == ("patches", "patch_coord", "patch_valid")
    assert result.outputs == ("logits",)
    details = Interpreter(model_path=result.path).get_signature_runner(
        "serving_default"
    ).get_input_details()
    shapes = {name: list(d["shape_signature"]) for name, d in details.items()}
    assert shapes == {"patches": [-1, 24, 48], "patch_coord": [-1, 24, 2], "patch_valid": [-1, 24]}
    assert details["patch_valid"]["dtype"] == np.bool_
    names = op_names(result.path)
    assert not [n for n in names if n.startswith("Flex") or n == "CUSTOM"], names
    batch = naflex["batches"][24]
    logits = _litert_logits(result.path, batch)
    np.testing.assert_allclose(logits, naflex["logits"][24], rtol=0, atol=LITERT_ATOL)
    one = {k: v[5:] for k, v in batch.items()}  # any batch size
    np.testing.assert_allclose(
        _litert_logits(result.path, one), naflex["logits"][24][5:], rtol=0, atol=LITERT_ATOL
    )


@pytest.mark.slow
@TF_ONLY
@pytest.mark.parametrize(
    "mode, tolerance", [("float16", 0.005), ("dynamic_int8", 0.05), ("int8", 0.2)]
)
def test_litert_quantized_close_to_keras(naflex, litert_files, mode, tolerance):
    from tests.export.test_litert import tensor_dtypes

    result = litert_files[mode]
    assert result.quantize == mode
    assert result.method == ("subprocess" if mode == "int8" else "in_process")
    assert {"float16": "float16"}.get(mode, "int8") in tensor_dtypes(result.path)
    expected = naflex["logits"][MAX_PATCHES]
    logits = _litert_logits(result.path, naflex["batches"][MAX_PATCHES])
    assert logits.dtype == np.float32  # int8 keeps a float interface
    error, scale = np.abs(logits - expected).max(), np.abs(expected).max()
    assert 0 < error <= tolerance * scale, (mode, error, scale)
    if mode != "int8":  # int8: the same class for 5 of the 6 images (the bound above decides)
        np.testing.assert_array_equal(logits.argmax(-1), expected.argmax(-1))


@TF_ONLY
def test_cli_max_patches(naflex, tmp_path, capsys):
    """`keras-vit export --max-patches`: the .tflite's sequence length of a NaFlex model; ONNX
    (any length) and image models refuse it, writing nothing."""
    from ai_edge_litert.interpreter import Interpreter

    from keras_vit.cli import main

    path = tmp_path / "naflex.keras"
    naflex["model"].save(path)
    out = tmp_path / "naflex.tflite"
    assert main(["export", str(path), str(out), "--max-patches", "24"]) == 0
    runner = Interpreter(model_path=str(out)).get_signature_runner("serving_default")
    assert list(runner.get_input_details()["patches"]["shape_signature"]) == [-1, 24, 48]
    np.testing.assert_allclose(
        runner(**feed(naflex["batches"][24]))["logits"], naflex["logits"][24], rtol=0,
        atol=LITERT_ATOL,
    )  # fmt: skip
    capsys.readouterr()
    assert main(["export", str(path), str(tmp_path / "m.onnx"), "--max-patches", "24"]) == 2
    assert "--max-patches applies to --format saved_model and litert only" in (
        capsys.readouterr().err
    )
    plain = tmp_path / "plain.keras"
    ViT("mu/4", image_size=16, num_classes=3).save(plain)
    assert main(["export", str(plain), str(tmp_path / "p.tflite"), "--max-patches", "8"]) != 0
    assert "max_patches" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["naflex.keras", "naflex.tflite", "plain.keras"]


def test_litert_arguments_are_checked_before_any_work(naflex, tmp_path):
    model = naflex["model"]
    with pytest.raises(ValueError, match=r"max_patches must be a positive int.*max_patches=0"):
        export_litert(model, tmp_path / "m.tflite", max_patches=0)
    with pytest.raises(ValueError, match="for a model without naflex=True"):
        export_litert(ViT("mu/4", image_size=16, num_classes=3), tmp_path / "m.tflite",
                      max_patches=16)  # fmt: skip
    with pytest.raises(ValueError, match=r"dataset specs.*Received: 'digits'"):
        export_litert(model, tmp_path / "m.tflite", quantize="int8", representative_data="digits")
    short = {k: v[:, :8] for k, v in naflex["batches"][MAX_PATCHES].items()}
    with pytest.raises(ValueError, match=r"shape \(B, 16, 48\).*patches of shape \(6, 8, 48\)"):
        export_litert(model, tmp_path / "m.tflite", quantize="int8", representative_data=short)
    with pytest.raises(ValueError, match=r"\(H, W, 3\) arrays.*image 0 of shape \(4, 4\)"):
        export_litert(model, tmp_path / "m.tflite", quantize="int8",
                      representative_data=[np.zeros((4, 4))])  # fmt: skip
    with pytest.raises(ValueError, match=r"\[-1, 1\].*float64 with values in \[255, 255\]"):
        export_litert(model, tmp_path / "m.tflite", quantize="int8",
                      representative_data=[np.full((8, 8, 3), 255.0)])  # fmt: skip
    assert not os.listdir(tmp_path)


def test_int8_close_to_float_reloads_and_exports(naflex, tmp_path):
    model = build_model()
    model.set_weights(naflex["model"].get_weights())
    batch, reference = naflex["batches"][MAX_PATCHES], naflex["logits"][MAX_PATCHES]
    quantize(model, "int8")
    modes = quantization_modes(model)
    assert set(modes.values()) == {"int8"} and len(modes) >= 1 * 6 + 1  # + the patch embedding
    out = to_numpy(model(batch))
    # test_quantization's measure: a few % of the logits' range, the same class.
    assert np.abs(out - reference).max() < 0.05 * np.abs(reference).max()
    assert (out.argmax(-1) == reference.argmax(-1)).mean() >= 5 / 6
    model.save(tmp_path / "int8.keras")
    loaded = load_model(tmp_path / "int8.keras")
    assert quantization_modes(loaded) == modes
    np.testing.assert_array_equal(to_numpy(loaded(batch)), out)
    if not IN_PROCESS:
        return  # the trace is TensorFlow's (the subprocess path: tests/export/test_saved_model.py)
    result = export_saved_model(model, tmp_path / "serving", verbose=False)
    served = tf.saved_model.load(result.path).signatures["serving_default"](
        **{k: tf.constant(v) for k, v in feed(batch).items()}
    )
    np.testing.assert_allclose(served["logits"].numpy(), out, rtol=0, atol=ATOL)


def test_lora_round_trips_and_merges(naflex, tmp_path):
    model = build_model()
    model.set_weights(naflex["model"].get_weights())
    batch, reference = naflex["batches"][MAX_PATCHES], naflex["logits"][MAX_PATCHES]
    enable_lora(model, 2, targets=TARGETS)
    assert get_lora_settings(model)["targets"] == TARGETS
    np.testing.assert_allclose(to_numpy(model(batch)), reference, rtol=0, atol=ATOL)  # B = 0
    rng = np.random.default_rng(5)
    for w in model.weights:  # nonzero adapters, as after training
        if w.name in ("lora_kernel_a", "lora_kernel_b"):
            w.assign(rng.normal(0, 0.2, tuple(w.shape)).astype("float32"))
    adapted = to_numpy(model(batch))
    assert np.abs(adapted - reference).max() > 1e-3  # the adapters act
    model.save(tmp_path / "lora.keras")  # Keras writes the merged kernels
    loaded = load_model(tmp_path / "lora.keras")
    assert get_lora_settings(loaded) is None
    np.testing.assert_allclose(to_numpy(loaded(batch)), adapted, rtol=0, atol=ATOL)
    assert merge_lora(model) is model and get_lora_settings(model) is None
    np.testing.assert_allclose(to_numpy(model(batch)), adapted, rtol=0, atol=ATOL)
