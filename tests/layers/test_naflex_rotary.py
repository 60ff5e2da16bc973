"""Tests for keras_vit/layers/naflex_rotary.py: per-token rotary tables of NaFlex batches."""

import numpy as np
import pytest

from keras_vit.layers import (
    MultiHeadSelfAttention,
    NaFlexMixedRotaryEmbedding,
    NaFlexRotaryEmbedding,
)
from tests.helpers import check_config_complete, to_numpy
from tests.layers.test_rotary import np_dinov3_rotary, np_rotary
from tests.layers.test_rotary_mixed import np_mixed

GRIDS = [(2, 5), (4, 3)]  # two images of other grids and aspect ratios
LENGTH = 14  # 10 and 12 tokens, padded


def _batch(shuffle=False):
    """NaFlex coordinates of GRIDS (row-major, or each image's tokens shuffled), padded."""
    rng = np.random.default_rng(0)
    coord = np.zeros((len(GRIDS), LENGTH, 2), "int32")
    valid = np.zeros((len(GRIDS), LENGTH), bool)
    orders = []
    for i, (h, w) in enumerate(GRIDS):
        order = rng.permutation(h * w) if shuffle else np.arange(h * w)
        coord[i, : h * w] = np.stack(np.divmod(order, w), -1)
        valid[i, : h * w] = True
        orders.append(order)
    return coord, valid, orders


def _np_table(kind, grid, options):
    """The NumPy (N, 2 * head_dim) table of one image's grid, row-major."""
    if kind == "dinov3":
        sin, cos = np_dinov3_rotary(grid, 8, 100.0, options.get("normalize_coords", "separate"))
    else:
        sin, cos = np_rotary(
            grid,
            8,
            options.get("temperature", 10000.0),
            options.get("reference_grid_size"),
            options.get("grid_offset", 0.0),
            xy=options.get("grid_indexing") == "xy",
        )
    return np.concatenate([sin, cos], -1)


CASES = {
    "eva02": dict(reference_grid_size=(3, 3), grid_offset=0.5),
    "axial": dict(grid_indexing="xy", temperature=100.0),
    "dinov3": dict(kind="dinov3", temperature=100.0, normalize_coords="max"),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("shuffle", [False, True])
def test_per_token_tables_match_numpy(case, shuffle):
    """Each valid token gets the NumPy table row of its (y, x) in its own image's grid."""
    options = CASES[case]
    kind = options.get("kind", "eva02")
    coord, valid, orders = _batch(shuffle)
    layer = NaFlexRotaryEmbedding(8, **options)
    table = to_numpy(layer(coord, valid))
    assert table.shape == (len(GRIDS), LENGTH, 1, 16)
    for i, grid in enumerate(GRIDS):
        expected = _np_table(kind, grid, options)[orders[i]]
        np.testing.assert_allclose(table[i, : len(orders[i]), 0], expected, atol=1e-5)
    assert np.isfinite(table).all()  # padding: the table of (0, 0)


def test_mixed_tables_match_numpy():
    coord, valid, orders = _batch(shuffle=True)
    layer = NaFlexMixedRotaryEmbedding(num_layers=2, num_heads=3, head_dim=8)
    tables = [to_numpy(t) for t in layer(coord, valid)]
    frequencies = to_numpy(layer.frequencies)
    for block, table in enumerate(tables):
        assert table.shape == (len(GRIDS), LENGTH, 3, 16)
        for i, grid in enumerate(GRIDS):
            expected = np_mixed(grid, frequencies[:, block])[orders[i]]
            np.testing.assert_allclose(table[i, : len(orders[i])], expected, atol=1e-5)


def test_configs_round_trip_and_bad_inputs():
    for layer in (
        NaFlexRotaryEmbedding(8, reference_grid_size=4, grid_indexing="xy"),
        NaFlexMixedRotaryEmbedding(2, 2, 8),
    ):
        check_config_complete(layer)
        assert "patch_size" not in layer.get_config()
        with pytest.raises(ValueError, match=r"expects patch_coord \(batch, tokens, 2\)"):
            layer(np.zeros((2, 5), "int32"), np.ones((2, 5), bool))
    with pytest.raises(ValueError, match="normalize_coords is DINOv3's option"):
        NaFlexRotaryEmbedding(8, normalize_coords="max")


def test_attention_takes_per_image_tables():
    """`(B, N, 1 or heads, 2 * head_dim)`: one table per image (numbers: test_timm_naflex_rope)."""
    attention = MultiHeadSelfAttention(num_heads=2)
    tokens = np.zeros((2, 1 + LENGTH, 16), "float32")
    with pytest.raises(ValueError, match=r"\(batch, tokens, 1 or heads, 2 \* head_dim\)"):
        attention(tokens, rotary_embedding=np.zeros((2, LENGTH, 3, 16), "float32"))
