"""Tests for keras_vit/weights/interpolate.py: PyTorch's bicubic resize in NumPy."""

import numpy as np
import pytest

from keras_vit.weights.interpolate import (
    bicubic_matrix,
    resample_grid,
    resample_position_embedding,
)

SIZES = [((4, 4), (6, 8)), ((7, 7), (3, 3)), ((14, 14), (24, 24)), ((16, 16), (7, 11)),
         ((5, 3), (5, 9)), ((2, 2), (9, 9))]  # fmt: skip


@pytest.mark.parametrize("antialias", [True, False])
@pytest.mark.parametrize("old,new", SIZES)
def test_matches_torch_interpolate(old, new, antialias):
    torch = pytest.importorskip("torch")
    grid = np.random.default_rng(0).normal(size=(*old, 5)).astype("float32")
    reference = torch.nn.functional.interpolate(
        torch.from_numpy(grid).permute(2, 0, 1)[None],
        size=new,
        mode="bicubic",
        align_corners=False,
        antialias=antialias,
    )[0].permute(1, 2, 0)
    np.testing.assert_allclose(
        resample_grid(grid, new, antialias), reference.numpy(), rtol=1e-5, atol=1e-5
    )


def test_rows_sum_to_one_and_same_size_is_identity():
    for antialias in (True, False):
        for old, new in [(3, 11), (11, 3), (7, 7)]:
            np.testing.assert_allclose(bicubic_matrix(old, new, antialias).sum(1), 1.0)
        np.testing.assert_allclose(bicubic_matrix(6, 6, antialias), np.eye(6), atol=1e-12)
    # The two kernels differ (A = -0.5 with antialias, -0.75 without).
    assert not np.allclose(bicubic_matrix(4, 7, True), bicubic_matrix(4, 7, False))


def test_position_embedding_keeps_prefix_rows():
    posemb = np.random.default_rng(1).normal(size=(1, 2 + 16, 8)).astype("float32")
    out = resample_position_embedding(posemb, (3, 5), num_prefix_tokens=2, antialias=True)
    assert out.shape == (1, 2 + 15, 8)
    np.testing.assert_array_equal(out[:, :2], posemb[:, :2])
    np.testing.assert_allclose(
        out[0, 2:].reshape(3, 5, 8), resample_grid(posemb[0, 2:].reshape(4, 4, 8), (3, 5), True)
    )
    same = resample_position_embedding(posemb, (4, 4), num_prefix_tokens=2, antialias=False)
    np.testing.assert_array_equal(same, posemb)
    with pytest.raises(ValueError, match="Cannot infer a square grid"):
        resample_position_embedding(posemb[:, :-1], (3, 3), 2, antialias=True)
