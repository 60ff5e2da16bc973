"""keras_vit/layers/patch_resize.py: PI-resize against timm's `resample_patch_embed`, PyTorch's
`F.interpolate` and an independent NumPy computation (full 2-D resize matrix, full pinv)."""


import keras
import numpy as np
import pytest

from keras_vit.layers import resample_patch_embedding
from keras_vit.layers.patch_resize import (
    linear_resize_matrix,
    resample_patch_embedding_ops,
    resize_matrix,
)
from tests.helpers import run_timm_script, to_numpy

# (old patch, new patch): up, down, non-square both ways, up on one axis and down on the other.
KERNEL_CASES = [((8, 8), (16, 16)), ((16, 16), (8, 8)), ((8, 6), (12, 4)), ((6, 9), (5, 14))]
AXIS_CASES = [(2, 4), (4, 2), (8, 16), (16, 8), (8, 12), (12, 8), (3, 7), (7, 3), (16, 5), (1, 3)]
MODES = [("bilinear", True), ("bilinear", False), ("bicubic", True), ("bicubic", False)]

# Runs in a subprocess that imports torch (and timm) before anything else: torch after
# TensorFlow can crash a process.
_TIMM_SCRIPT = """
import sys
import numpy as np
from tests.weights.references import import_timm
import torch
import torch.nn.functional as F
timm = import_timm()
from timm.layers import resample_patch_embed
source, target = sys.argv[1], sys.argv[2]
out = {}
with np.load(source) as data:
    for key in data.files:
        kind, mode, aa, *sizes = key.split("_")
        if kind == "kernel":
            h, w = int(sizes[0]), int(sizes[1])
            torch_kernel = torch.tensor(data[key].transpose(3, 2, 0, 1))  # (D, C, h, w)
            new = resample_patch_embed(torch_kernel, [h, w], interpolation=mode,
                                       antialias=aa == "True")
            out[key] = new.numpy().transpose(2, 3, 1, 0)
        else:
            n_in, n_out = int(sizes[0]), int(sizes[1])
            basis = torch.eye(n_in, dtype=torch.float64).reshape(n_in, 1, 1, n_in)
            resized = F.interpolate(basis, size=(1, n_out), mode=mode, antialias=aa == "True",
                                    align_corners=False)
            out[key] = resized.reshape(n_in, n_out).numpy().T
np.savez(target, **out)
"""


@pytest.fixture(scope="module")
def kernels():
    rng = np.random.default_rng(0)
    return {
        old: rng.normal(0, 0.02, size=(*old, 3, 8)).astype("float32") for old, _ in KERNEL_CASES
    }


@pytest.fixture(scope="module")
def timm_results(kernels, tmp_path_factory):
    """timm's resample_patch_embed of every kernel case and F.interpolate's per-axis matrices."""
    pytest.importorskip("torch")
    cases = {}
    for mode, aa in MODES:
        for old, new in KERNEL_CASES:
            cases[f"kernel_{mode}_{aa}_{new[0]}_{new[1]}_{old[0]}_{old[1]}"] = kernels[old]
        for n_in, n_out in AXIS_CASES:
            cases[f"axis_{mode}_{aa}_{n_in}_{n_out}"] = np.zeros(1)
    folder = tmp_path_factory.mktemp("timm")
    source, target = str(folder / "in.npz"), str(folder / "out.npz")
    np.savez(source, **cases)
    return run_timm_script(_TIMM_SCRIPT, source, target)


@pytest.mark.parametrize("mode,antialias", MODES)
def test_axis_matrices_match_torch_interpolate(timm_results, mode, antialias):
    for n_in, n_out in AXIS_CASES:
        expected = timm_results[f"axis_{mode}_{antialias}_{n_in}_{n_out}"]
        np.testing.assert_allclose(
            resize_matrix(n_in, n_out, mode, antialias), expected, atol=1e-12, err_msg=(n_in, n_out)
        )


@pytest.mark.parametrize("mode,antialias", MODES)
def test_matches_timm_resample_patch_embed(kernels, timm_results, mode, antialias):
    for old, new in KERNEL_CASES:
        expected = timm_results[f"kernel_{mode}_{antialias}_{new[0]}_{new[1]}_{old[0]}_{old[1]}"]
        got = resample_patch_embedding(kernels[old], new, interpolation=mode, antialias=antialias)
        assert got.shape == (*new, 3, 8) and got.dtype == np.float32
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5, err_msg=f"{old}->{new}")


def _numpy_bilinear_2d(image, new_size):
    """Independent 2-D antialiased bilinear resize (PIL's triangle filter), one pixel at a time."""
    (h, w), (nh, nw) = image.shape, new_size
    out = np.zeros(new_size)
    for i in range(nh):
        for j in range(nw):
            total = value = 0.0
            for y in range(h):
                for x in range(w):
                    sy, sx = h / nh, w / nw
                    wy = max(0.0, 1 - abs(y + 0.5 - sy * (i + 0.5)) / max(sy, 1.0))
                    wx = max(0.0, 1 - abs(x + 0.5 - sx * (j + 0.5)) / max(sx, 1.0))
                    total += wy * wx
                    value += wy * wx * image[y, x]
            out[i, j] = value / total
    return out


@pytest.mark.parametrize("old,new", [((4, 4), (6, 6)), ((6, 4), (3, 5))])
def test_matches_numpy_full_pseudo_inverse(old, new):
    """The full (new_h * new_w, old_h * old_w) matrix from resized basis images, its pinv."""
    rng = np.random.default_rng(1)
    kernel = rng.normal(size=(*old, 2, 3))
    basis = np.eye(old[0] * old[1]).reshape(-1, *old)
    resize = np.stack([_numpy_bilinear_2d(b, new).reshape(-1) for b in basis], axis=1)
    flat = kernel.reshape(old[0] * old[1], -1)  # (h * w, C * D)
    expected = (np.linalg.pinv(resize).T @ flat).reshape(*new, 2, 3)
    got = resample_patch_embedding(kernel, new)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)


def test_enlarging_keeps_every_token():
    """<x, w> == <B x, PI-resize(w)> for patches x: the defining property when enlarging."""
    rng = np.random.default_rng(2)
    kernel = rng.normal(size=(4, 6, 3, 5))
    patches = rng.normal(size=(7, 4, 6, 3))
    rows, cols = linear_resize_matrix(4, 8), linear_resize_matrix(6, 9)
    resized = np.einsum("Hh,Ww,bhwc->bHWc", rows, cols, patches)
    new = resample_patch_embedding(kernel, (8, 9))
    np.testing.assert_allclose(
        np.einsum("bhwc,hwcd->bd", resized, new),
        np.einsum("bhwc,hwcd->bd", patches, kernel),
        rtol=1e-9,
        atol=1e-9,
    )


def test_equal_size_is_unchanged_and_ops_match_numpy(kernels):
    kernel = kernels[(8, 8)]
    assert resample_patch_embedding(kernel, 8) is kernel
    for new in ((16, 16), (4, 12)):
        for mode in ("bilinear", "bicubic"):
            expected = resample_patch_embedding(kernel, new, interpolation=mode)
            got = resample_patch_embedding_ops(keras.ops.convert_to_tensor(kernel), new, mode)
            np.testing.assert_allclose(to_numpy(got), expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(kernel=np.zeros((4, 4, 3))), "kernel must have shape"),
        (dict(patch_size=0), "patch_size must be positive"),
        (dict(interpolation="nearest"), "interpolation must be one of"),
        (dict(patch_size=(4, 4, 4)), "patch_size must be an int or a pair"),
    ],
)
def test_bad_input(kwargs, match):
    args = {"kernel": np.zeros((4, 4, 3, 2)), "patch_size": 8, **kwargs}
    with pytest.raises(ValueError, match=match):
        resample_patch_embedding(**args)
