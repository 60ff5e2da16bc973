"""keras_vit/layers/patch_targets.py: masked patch prediction's targets against NumPy."""

import numpy as np
import pytest

from keras_vit.layers import patch_targets
from tests.helpers import np_patches, to_numpy


def np_targets(images, patch, target):
    """Plain NumPy reference of the three target kinds."""
    b, h, w, c = images.shape
    patches = np_patches(images, patch).reshape(b, -1, patch, patch, c)
    weights = 8 ** np.arange(c - 1, -1, -1)

    def classes(values):  # values in [-1, 1], (..., C)
        levels = np.clip(np.floor((values + 1.0) / 2.0 * 8.0), 0, 7).astype("int64")
        return (levels * weights).sum(-1)

    if target == "pixels":
        return patches.reshape(b, patches.shape[1], -1)
    if target == "color":
        return classes(patches.mean(axis=(2, 3)))
    s = patch // 4
    cells = np.zeros((b, patches.shape[1], 4, 4, c))
    for i in range(4):
        for j in range(4):
            cells[:, :, i, j] = patches[:, :, i * s : (i + 1) * s, j * s : (j + 1) * s].mean((2, 3))
    return classes(cells).reshape(b, patches.shape[1], 16)


@pytest.mark.parametrize("channels", [3, 1])
@pytest.mark.parametrize("target", ["color", "downsampled", "pixels"])
def test_targets_match_numpy(target, channels):
    rng = np.random.default_rng(1)
    # Levels in steps of 1/4 land exactly on the quantisation boundaries, incl. -1 and 1.
    images = rng.integers(-4, 5, (3, 16, 24, channels)).astype("float32") / 4.0
    images[0, :8, :8] = 1.0
    images[1, :8, :8] = -1.0
    patch = 8
    got = to_numpy(patch_targets.patch_targets(images, patch, target))
    expected = np_targets(images.astype("float64"), patch, target)
    if target == "pixels":
        np.testing.assert_allclose(got, expected, atol=1e-6)
    else:
        np.testing.assert_array_equal(got, expected)
        assert got.max() < 8**channels and got.min() >= 0
    layer_out = to_numpy(patch_targets.PatchTargets(patch, target)(images))
    np.testing.assert_array_equal(layer_out, got)


def test_color_target_is_the_top_three_bits_of_8_bit_pixels():
    """App. B.1.2's "3-bit colour": for 0..255 images preprocessed to [-1, 1] (x / 127.5 - 1)
    the level of every value is its top three bits, `p >> 5`, for all 256 values."""
    values = np.arange(256)
    gray = (values.reshape(1, 16, 16, 1) / 127.5 - 1.0).astype("float32")
    levels = to_numpy(patch_targets.patch_targets(gray, 1))  # 1 px patches: the mean is the pixel
    np.testing.assert_array_equal(levels.reshape(-1), values >> 5)
    # 4x4 cells of a 4 px patch are its pixels: the "downsampled" target is per-pixel levels.
    cells = to_numpy(patch_targets.patch_targets(gray, 4, "downsampled"))
    np.testing.assert_array_equal(cells.reshape(4, 4, 4, 4).transpose(0, 2, 1, 3).reshape(16, 16),
                                  (values >> 5).reshape(16, 16))
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (2, 4, 4, 3))
    classes = to_numpy(patch_targets.patch_targets((rgb / 127.5 - 1.0).astype("float32"), 1))
    top = rgb.reshape(2, 16, 3) >> 5
    np.testing.assert_array_equal(classes, top[..., 0] * 64 + top[..., 1] * 8 + top[..., 2])


def test_color_target_class_layout():
    image = np.zeros((1, 4, 4, 3), "float32")
    image[..., 0], image[..., 1], image[..., 2] = 1.0, -1.0, 0.0  # levels 7, 0, 4
    assert to_numpy(patch_targets.patch_targets(image, 4))[0, 0] == 7 * 64 + 0 * 8 + 4
    assert patch_targets.num_target_classes("color", 3) == 512
    assert patch_targets.num_target_classes("downsampled", 1) == 8
    with pytest.raises(ValueError, match="divisible by 4"):
        patch_targets.patch_targets(np.zeros((1, 6, 6, 3), "float32"), 6, "downsampled")


# ----------------------------------------------------------------------------- loss
