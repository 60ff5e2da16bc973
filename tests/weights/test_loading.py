"""Tests for keras_vit/weights/loading.py: the strict name-table loader and its transforms."""

import logging

import keras
import numpy as np
import pytest

from keras_vit.weights import loading as L
from tests.helpers import to_numpy

LOGGER = logging.getLogger("tests.loading")


def _model():
    inputs = keras.Input((6, 6, 3))
    x = keras.layers.Conv2D(4, 3, name="conv")(inputs)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(5, name="fc")(x)
    return keras.Model(inputs, x)


def _torch_layout(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "conv.weight": rng.normal(size=(4, 3, 3, 3)).astype("float32"),
        "conv.bias": rng.normal(size=(4,)).astype("float32"),
        "fc.weight": rng.normal(size=(5, 64)).astype("float32"),
        "fc.bias": rng.normal(size=(5,)).astype("float32"),
    }


TABLE = {
    "conv.weight": ("conv/kernel", L.CONV),
    "conv.bias": ("conv/bias", L.IDENTITY),
    "fc.weight": ("fc/kernel", L.LINEAR),
    "fc.bias": ("fc/bias", L.IDENTITY),
}


def test_linear_and_conv_match_torch():
    torch = pytest.importorskip("torch")
    arrays = _torch_layout()
    model = L.load_state_dict(_model(), arrays, TABLE, source="a dict", logger=LOGGER)
    x = np.random.default_rng(1).normal(size=(2, 6, 6, 3)).astype("float32")
    conv = torch.nn.Conv2d(3, 4, 3)
    conv.load_state_dict({"weight": torch.from_numpy(arrays["conv.weight"]),
                          "bias": torch.from_numpy(arrays["conv.bias"])})  # fmt: skip
    with torch.no_grad():
        features = conv(torch.from_numpy(x).permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
        flat = features.reshape(2, -1).numpy()
    expected = flat @ arrays["fc.weight"].T + arrays["fc.bias"]
    np.testing.assert_allclose(to_numpy(model(x)), expected, rtol=1e-5, atol=1e-5)


def test_fused_qkv_splits_into_heads():
    heads, head_dim, width = 2, 3, 4
    weight = np.arange(3 * heads * head_dim * width, dtype="float32").reshape(-1, width)
    shapes = ((width, heads, head_dim),) * 3
    assert L.QKV_WEIGHT.source_shape(shapes) == (18, 4)
    q, k, v = L.QKV_WEIGHT.apply(weight, shapes)
    # x @ kernel[:, h, :] is head h of torch's x @ W.T reshaped (..., 3, H, Dh).
    for index, kernel in enumerate((q, k, v)):
        block = weight[index * 6 : (index + 1) * 6]
        for h in range(heads):
            np.testing.assert_array_equal(kernel[:, h, :], block[h * 3 : (h + 1) * 3].T)
    bias = np.arange(18, dtype="float32")
    qb, _, vb = L.QKV_BIAS.apply(bias, ((heads, head_dim),) * 3)
    np.testing.assert_array_equal(qb, [[0, 1, 2], [3, 4, 5]])
    np.testing.assert_array_equal(vb, [[12, 13, 14], [15, 16, 17]])
    out = L.HEADS_OUT_WEIGHT.apply(np.arange(24.0).reshape(4, 6), ((heads, head_dim, width),))[0]
    np.testing.assert_array_equal(out.reshape(6, 4), np.arange(24.0).reshape(4, 6).T)


def test_one_error_lists_missing_unexpected_and_misshaped_and_changes_nothing():
    model = _model()
    before = [to_numpy(w).copy() for w in model.weights]
    arrays = _torch_layout()
    del arrays["conv.bias"]  # missing
    arrays["fc.weight"] = arrays["fc.weight"][:, :10]  # mis-shaped
    arrays["extra.weight"] = np.ones((7, 2), "float32")  # unexpected
    with pytest.raises(ValueError) as info:
        L.load_state_dict(model, arrays, TABLE, source="'ckpt.pth'", logger=LOGGER)
    message = str(info.value)
    assert "Cannot load 'ckpt.pth'" in message and "3 problem(s)" in message
    assert "missing    conv.bias: expected (4,), not in the checkpoint" in message
    assert "unexpected extra.weight: found (7, 2), no such model weight" in message
    assert "shape      fc.weight: expected (5, 64), found (5, 10)" in message
    for old, new in zip(before, model.weights, strict=True):
        np.testing.assert_array_equal(old, to_numpy(new))


def test_fills_skips_and_notes(caplog):
    model = _model()
    arrays = _torch_layout()
    arrays.pop("conv.bias")
    arrays["head_dist.weight"] = np.ones((2, 2), "float32")
    table = {k: v for k, v in TABLE.items() if k != "conv.bias"}
    with caplog.at_level(logging.INFO, logger=LOGGER.name):
        L.load_state_dict(
            model,
            arrays,
            table,
            source="x",
            logger=LOGGER,
            fills={"conv/bias": 0.0},
            skip={"head_dist.weight": "dropped head_dist"},
        )
    np.testing.assert_array_equal(to_numpy(model.get_layer("conv").bias), np.zeros(4))
    assert "dropped head_dist" in caplog.text and "assigned 4 model weights from x" in caplog.text


def test_table_that_does_not_fit_the_model():
    table = {**TABLE, "fc.scale": ("fc/scale", L.IDENTITY)}
    with pytest.raises(ValueError, match=r"maps 'fc.scale' to \['fc/scale'\]"):
        L.load_state_dict(_model(), _torch_layout(), table, source="x", logger=LOGGER)


@pytest.mark.parametrize(
    "bad",
    [
        np.array([["a"] * 64] * 5),  # strings
        np.ones((5, 64), bool),
        np.ones((5, 64), "complex64"),
        np.array([[None] * 64] * 5, dtype=object),
    ],
    ids=["str", "bool", "complex", "object"],
)
def test_non_numeric_arrays_are_errors_naming_file_and_array_and_change_nothing(bad):
    model = _model()
    before = [to_numpy(w).copy() for w in model.weights]
    arrays = _torch_layout()
    arrays["fc.weight"] = bad
    for strict in (True, False):  # never skipped: the file is not weights
        with pytest.raises(ValueError) as info:
            L.load_state_dict(
                model, arrays, TABLE, source="'ckpt.pth'", logger=LOGGER, strict=strict
            )
        message = str(info.value)
        assert "'ckpt.pth'" in message and "dtype      fc.weight: holds" in message
        assert "a weight must be a real number" in message
        for old, new in zip(before, model.weights, strict=True):
            np.testing.assert_array_equal(old, to_numpy(new))


def test_commit_converts_every_value_before_the_first_assignment():
    """A value that cannot become its variable (the plan of a loader let it through) fails the
    load before anything is assigned, naming the variable."""
    model = _model()
    before = [to_numpy(w).copy() for w in model.weights]
    variables = L.model_variables(model)
    assignments = [
        (variables["conv/kernel"], np.ones((3, 3, 3, 4), "float32")),
        (variables["fc/bias"], np.array(["x"] * 5)),
        (variables["fc/kernel"], np.ones((2, 2), "float32")),
    ]
    with pytest.raises(ValueError) as info:
        L.commit(model, assignments, {}, [], source="'f.npz'", logger=LOGGER)
    message = str(info.value)
    assert "dtype      fc/bias: holds non-numeric values" in message
    assert "shape      fc/kernel: expected (64, 5), found (2, 2)" in message
    for old, new in zip(before, model.weights, strict=True):
        np.testing.assert_array_equal(old, to_numpy(new))
