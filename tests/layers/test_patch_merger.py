"""Tests for keras_vit/layers/patch_merger.py."""

import keras
import numpy as np
import pytest

from keras_vit.layers import PatchMerger
from tests.helpers import check_config_complete, np_gelu, np_layer_norm, roundtrip_model, to_numpy

D = 8


def _randomized(layer, tokens, images, seed=0):
    layer(tokens, images)  # builds
    rng = np.random.default_rng(seed)
    for w in layer.weights:
        offset = 1.0 if w.path.endswith("gamma") else 0.0
        w.assign(rng.normal(0, 0.3, size=tuple(w.shape)).astype("float32") + offset)
    return layer


def _np_merger(layer, tokens, rows, columns):
    """The merge as loops over blocks, (row, column, channel) order, zero padding."""
    n = lambda v: to_numpy(v).astype("float64")  # noqa: E731
    x = tokens.astype("float64")
    if layer.norm == "layernorm":
        x = np_layer_norm(x, n(layer.token_norm.gamma), n(layer.token_norm.beta), 1e-6)
    k = layer.merge_size
    grid = x.reshape(len(x), rows, columns, -1)
    out_rows, out_columns = -(-rows // k), -(-columns // k)
    padded = np.zeros((len(x), out_rows * k, out_columns * k, grid.shape[-1]))
    padded[:, :rows, :columns] = grid
    merged = [
        np.concatenate([padded[:, i * k + a, j * k + b] for a in range(k) for b in range(k)], -1)
        for i in range(out_rows)
        for j in range(out_columns)
    ]
    h = np.stack(merged, 1) @ n(layer.fc1.kernel) + n(layer.fc1.bias)
    return np_gelu(h, approximate=False) @ n(layer.fc2.kernel) + n(layer.fc2.bias)


@pytest.mark.parametrize(
    "kwargs,grid",
    [
        (dict(merge_size=2, norm="layernorm"), (4, 6)),
        (dict(merge_size=3, hidden_dim=12, padding=True), (4, 5)),
    ],
)
def test_matches_numpy_shape_and_weights(kwargs, grid):
    rows, columns = grid
    rng = np.random.default_rng(1)
    tokens = rng.normal(size=(2, rows * columns, D)).astype("float32")
    images = np.zeros((2, rows * 4, columns * 4, 3), "float32")
    layer = _randomized(PatchMerger(output_dim=5, patch_size=4, **kwargs), tokens, images)
    out = to_numpy(layer(tokens, images))
    np.testing.assert_allclose(out, _np_merger(layer, tokens, rows, columns), atol=1e-4)
    k = kwargs["merge_size"]
    count = -(-rows // k) * -(-columns // k)
    assert out.shape == (2, count, 5)
    assert layer.compute_output_shape((None, rows * columns, D), images.shape) == (None, count, 5)
    hidden = kwargs.get("hidden_dim") or k * k * D
    norm = 2 * D if kwargs.get("norm") else 0
    assert layer.count_params() == norm + (k * k * D + 1) * hidden + (hidden + 1) * 5
    assert len(layer.trainable_weights) == 4 + (2 if norm else 0)


def test_training_step_and_keras_roundtrip_with_a_dynamic_grid(tmp_path):
    tokens = keras.Input((None, D))
    images = keras.Input((None, None, 3))
    merger = PatchMerger(2, output_dim=5, patch_size=4, norm="rmsnorm", name="merger")
    model = keras.Model([tokens, images], merger(tokens, images))
    check_config_complete(merger)
    x = [np.random.rand(2, 2 * 4, D).astype("float32"), np.zeros((2, 8, 16, 3), "float32")]
    model.compile("sgd", "mse")
    before = [to_numpy(w).copy() for w in model.trainable_weights]
    model.fit(x, np.ones((2, 2, 5), "float32"), epochs=1, verbose=0)
    after = [to_numpy(w) for w in model.trainable_weights]
    assert any(not np.allclose(a, b) for a, b in zip(before, after, strict=True))
    loaded = roundtrip_model(model, x, tmp_path)
    assert tuple(loaded(x).shape) == (2, 2, 5)


def test_bad_arguments_and_grids():
    with pytest.raises(ValueError, match="merge_size must be a positive integer"):
        PatchMerger(0, output_dim=4, patch_size=4)
    with pytest.raises(ValueError, match="output_dim"):
        PatchMerger(2, output_dim=None, patch_size=4)
    with pytest.raises(ValueError, match="norm must be one of"):
        PatchMerger(2, output_dim=4, patch_size=4, norm="batchnorm")
    with pytest.raises(ValueError, match="padding must be a bool"):
        PatchMerger(2, output_dim=4, patch_size=4, padding="yes")
    layer = PatchMerger(2, output_dim=4, patch_size=4)
    tokens, images = np.zeros((1, 6, D), "float32"), np.zeros((1, 12, 8, 3), "float32")
    message = r"divisible by merge_size=2 .*Received: a grid of 3 x 2 patches \(rows: 3\)"
    with pytest.raises(ValueError, match=message):
        layer(tokens, images)
    with pytest.raises(ValueError, match=message):
        layer.compute_output_shape((None, 6, D), (None, 12, 8, 3))
