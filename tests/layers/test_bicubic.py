"""keras_vit/layers/bicubic.py against PyTorch's F.interpolate(bicubic, antialias=True|False)."""

import keras
import numpy as np
import pytest

from keras_vit.layers import bicubic
from keras_vit.layers.position_embedding import resample_position_embedding
from tests.helpers import to_numpy, torch_bicubic

# (input grid, output grid): enlarging, shrinking, non-square both ways, identity, and the
# ViT-B/16 sizes 14 <-> 24 (224 and 384 px).
CASES = [
    ((4, 4), (7, 5)),
    ((7, 6), (3, 4)),
    ((5, 3), (2, 6)),
    ((4, 4), (4, 4)),
    ((14, 14), (24, 24)),
    ((24, 24), (14, 14)),
]


# Hugging Face's plain bicubic (antialias=False): enlarging, shrinking, non-square both ways.
PLAIN_CASES = [((4, 4), (6, 8)), ((7, 7), (3, 3)), ((16, 16), (7, 11)), ((5, 3), (5, 9)),
               ((2, 2), (9, 9))]  # fmt: skip


@pytest.fixture(scope="module")
def all_references(tmp_path_factory):
    """(grid, size, PyTorch's result) for CASES (antialiased) and PLAIN_CASES, one subprocess."""
    rng = np.random.default_rng(0)
    cases = [(src, dst, True) for src, dst in CASES] + [(s, d, False) for s, d in PLAIN_CASES]
    grids = [rng.normal(size=(*src, 6)).astype("float32") for src, _, _ in cases]
    expected = torch_bicubic(
        [(g, dst, antialias) for g, (_, dst, antialias) in zip(grids, cases, strict=True)],
        str(tmp_path_factory.mktemp("torch")),
    )
    sizes = [dst for _, dst, _ in cases]
    found = list(zip(grids, sizes, expected, strict=True))
    return found[: len(CASES)], found[len(CASES) :]


@pytest.fixture(scope="module")
def references(all_references):
    return all_references[0]


def test_plain_bicubic_numpy_matches_torch(all_references):
    for grid, size, expected in all_references[1]:
        got = bicubic.resize_bicubic(grid, size, antialias=False)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=str(size))
    # The two kernels differ (A = -0.5 with antialiasing, -0.75 without).
    assert not np.allclose(bicubic.resize_matrix(4, 7), bicubic.resize_matrix(4, 7, False))
    for n_in, n_out in ((3, 11), (11, 3)):
        np.testing.assert_allclose(bicubic.resize_matrix(n_in, n_out, False).sum(1), 1.0)
    np.testing.assert_array_equal(bicubic.resize_matrix(6, 6, antialias=False), np.eye(6))


def test_numpy_matches_torch(references):
    for grid, size, expected in references:
        got = bicubic.resize_bicubic(grid, size)
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=str(size))


def test_keras_ops_matches_torch_with_runtime_sizes(references):
    for grid, size, expected in references[1:4]:  # shrinking, non-square, identity
        got = to_numpy(bicubic.resize_bicubic_ops(keras.ops.convert_to_tensor(grid), size))
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=str(size))


def test_equal_sizes_are_the_identity_and_rows_sum_to_one():
    np.testing.assert_array_equal(bicubic.resize_matrix(5, 5), np.eye(5))
    for n_in, n_out in ((3, 8), (8, 3), (14, 24)):
        np.testing.assert_allclose(bicubic.resize_matrix(n_in, n_out).sum(1), 1.0, rtol=1e-12)
    np.testing.assert_array_equal(to_numpy(bicubic.resize_matrix_ops(5, 5)), np.eye(5))


def test_position_embedding_resampling_keeps_prefix_rows(references):
    grid, size, expected = references[0]  # (4, 4) -> (7, 5)
    prefix = np.random.default_rng(1).normal(size=(1, 3, 6)).astype("float32")
    posemb = np.concatenate([prefix, grid.reshape(1, -1, 6)], axis=1)
    out = resample_position_embedding(posemb, size, num_prefix_tokens=3, interpolation="bicubic")
    np.testing.assert_array_equal(out[:, :3], prefix)
    np.testing.assert_allclose(out[0, 3:], expected.reshape(-1, 6), rtol=1e-5, atol=1e-5)
    same = resample_position_embedding(posemb, (4, 4), num_prefix_tokens=3, interpolation="bicubic")
    np.testing.assert_array_equal(same, posemb)


def test_plain_position_embedding_resampling(all_references):
    grid, size, expected = all_references[1][0]  # (4, 4) -> (6, 8), antialias=False
    prefix = np.random.default_rng(2).normal(size=(1, 1, 6)).astype("float32")
    posemb = np.concatenate([prefix, grid.reshape(1, -1, 6)], axis=1)
    out = resample_position_embedding(posemb, size, 1, interpolation="bicubic", antialias=False)
    np.testing.assert_array_equal(out[:, :1], prefix)
    np.testing.assert_allclose(out[0, 1:], expected.reshape(-1, 6), rtol=1e-5, atol=1e-5)


def test_bad_arguments():
    with pytest.raises(ValueError, match="interpolation must be one of"):
        resample_position_embedding(np.zeros((1, 5, 4)), (3, 3), interpolation="cubic")
    with pytest.raises(ValueError, match="num_prefix_tokens must be a non-negative int"):
        resample_position_embedding(np.zeros((1, 5, 4)), (3, 3), num_prefix_tokens=-1)
    with pytest.raises(ValueError, match="in_size=0"):
        bicubic.resize_matrix(0, 3)
    with pytest.raises(ValueError, match=r"grid must have shape \(h, w, C\)"):
        bicubic.resize_bicubic(np.zeros((3, 3)), (2, 2))
