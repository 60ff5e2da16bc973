"""Per-token NaFlex position-embedding resize against PyTorch's `F.interpolate` (timm's)."""

import numpy as np
import pytest
from keras import ops

from keras_vit.layers.naflex_position import axis_weights, naflex_position_embedding
from tests.weights.references import import_torch

MODES = [
    ("bicubic", True, False),
    ("bilinear", True, False),
    ("bilinear", False, False),
    ("bilinear", False, True),
    ("bicubic", False, False),
]


def _torch_resize(table, size, mode, antialias, align_corners):
    torch = import_torch()
    grid = torch.tensor(np.moveaxis(table, -1, 0)[None])
    out = torch.nn.functional.interpolate(
        grid, size=size, mode=mode, antialias=antialias, align_corners=align_corners
    )
    return np.moveaxis(out[0].numpy(), 0, -1)


@pytest.mark.parametrize("mode,antialias,align_corners", MODES)
def test_axis_weights_are_torch_rows(mode, antialias, align_corners):
    table = np.random.default_rng(0).normal(size=(5, 4, 3)).astype("float32")
    for size in [(2, 3), (5, 4), (7, 9), (1, 1)]:
        expected = _torch_resize(table, size, mode, antialias, align_corners)
        i, j = np.meshgrid(np.arange(size[0]), np.arange(size[1]), indexing="ij")
        opts = dict(interpolation=mode, antialias=antialias, align_corners=align_corners)
        wy = axis_weights(i, np.full_like(i, size[0]), 5, **opts)
        wx = axis_weights(j, np.full_like(j, size[1]), 4, **opts)
        got = np.einsum(
            "hwa,hwb,abd->hwd", ops.convert_to_numpy(wy), ops.convert_to_numpy(wx), table
        )
        np.testing.assert_allclose(got, expected, atol=1e-5, err_msg=str(size))


def test_batch_mixes_grids_and_ignores_padding():
    """Two images of other grids in one batch: each gets its own resized table; padding zeros."""
    rng = np.random.default_rng(1)
    table = rng.normal(size=(4, 4, 6)).astype("float32")
    grids = [(2, 5), (3, 3)]
    n = 12
    coord = np.zeros((2, n, 2), "int32")
    valid = np.zeros((2, n), bool)
    for b, (h, w) in enumerate(grids):
        y, x = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
        coord[b, : h * w] = np.stack([y.ravel(), x.ravel()], 1)
        valid[b, : h * w] = True
        coord[b, h * w :] = 7  # padding coordinates are ignored
    for preserving in (False, True):
        got = ops.convert_to_numpy(
            naflex_position_embedding(table, coord, valid, aspect_preserving=preserving)
        )
        for b, (h, w) in enumerate(grids):
            size = (max(h, w),) * 2 if preserving else (h, w)
            expected = _torch_resize(table, size, "bicubic", True, False)[:h, :w]
            np.testing.assert_allclose(got[b, : h * w], expected.reshape(h * w, 6), atol=1e-5)
            assert not got[b, h * w :].any()


def test_factorized_is_timm_linear():
    torch = import_torch()
    rng = np.random.default_rng(2)
    rows, columns = rng.normal(size=(4, 6)).astype("float32"), rng.normal(size=(5, 6))
    columns = columns.astype("float32")
    coord = np.stack(np.meshgrid(np.arange(3), np.arange(7), indexing="ij"), -1).reshape(1, 21, 2)
    got = naflex_position_embedding((rows, columns), coord, np.ones((1, 21), bool))

    def interp(table, size):
        t = torch.tensor(table.T[None])
        return torch.nn.functional.interpolate(t, size=size, mode="linear").numpy()[0].T

    expected = interp(rows, 3)[:, None] + interp(columns, 7)[None]
    np.testing.assert_allclose(ops.convert_to_numpy(got)[0], expected.reshape(21, 6), atol=1e-5)


@pytest.mark.parametrize("antialias,align_corners", [(False, True), (False, False), (True, False)])
def test_resample_position_embedding_bilinear_is_torch(antialias, align_corners):
    """The checkpoint loader's bilinear resize (timm's RADIO loader) keeps the prefix rows and
    resizes the grid as `F.interpolate(mode="bilinear")`, through these weights."""
    from keras_vit.layers.position_embedding import resample_position_embedding

    table = np.random.default_rng(2).normal(size=(3, 3, 4)).astype("float32")
    prefix = np.ones((1, 2, 4), "float32")
    posemb = np.concatenate([prefix, table.reshape(1, 9, 4)], axis=1)
    opts = dict(interpolation="bilinear", antialias=antialias, align_corners=align_corners)
    for size in [(5, 5), (2, 4)]:
        got = resample_position_embedding(posemb, size, 2, **opts)
        expected = _torch_resize(table, size, "bilinear", antialias, align_corners)
        np.testing.assert_array_equal(got[:, :2], prefix)
        np.testing.assert_allclose(got[0, 2:], expected.reshape(-1, 4), atol=1e-6)
    if align_corners:  # 3 -> 5 with corners aligned: the rows, and midpoints between them
        got = resample_position_embedding(posemb, (5, 5), 2, **opts)[0, 2:].reshape(5, 5, 4)
        np.testing.assert_allclose(got[::2, ::2], table, atol=1e-6)
        np.testing.assert_allclose(got[1::2, ::2], (table[1:] + table[:-1]) / 2, atol=1e-6)
