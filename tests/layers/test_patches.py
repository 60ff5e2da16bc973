import keras
import numpy as np
import pytest

from keras_vit.layers import Patches
from tests.helpers import np_patches, to_numpy
from tests.layer_harness import run_layer_test


def test_layer():
    run_layer_test(
        Patches,
        {"patch_size": (2, 4)},
        input_shape=(2, 4, 12, 3),
        expected_output_shape=(2, 6, 24),
        expected_num_trainable_weights=0,
    )


@pytest.mark.parametrize(
    "shape,patch", [((2, 8, 12, 3), 4), ((1, 6, 8, 1), (3, 2)), ((2, 4, 4, 2), 4)]
)
def test_matches_numpy_order(shape, patch):
    images = np.random.rand(*shape).astype("float32")
    out = to_numpy(Patches(patch)(images))
    np.testing.assert_array_equal(out, np_patches(images, patch))


def test_official_kernel_layout_multiplies_patches():
    """The (P, P, C, D) conv kernel flattened to (P*P*C, D) multiplies the patches."""
    images = np.random.rand(2, 8, 8, 3).astype("float32")
    kernel = np.random.rand(4, 4, 3, 5).astype("float32")
    conv = to_numpy(keras.ops.conv(images, kernel, strides=4, padding="valid")).reshape(2, 4, 5)
    dense = to_numpy(Patches(4)(images)) @ kernel.reshape(-1, 5)
    np.testing.assert_allclose(conv, dense, rtol=1e-5, atol=1e-5)


def test_unknown_image_size_gives_unknown_patch_count():
    assert Patches(4).compute_output_shape((None, None, None, 3)) == (None, None, 48)


@pytest.mark.parametrize(
    "patch,shape,match",
    [
        (5, (None, 16, 16, 3), "height must be divisible.*height=16"),
        ((4, 3), (None, 16, 16, 3), "width must be divisible.*width=16"),
        (4, (None, 16, 16), "rank 4"),
    ],
)
def test_bad_input(patch, shape, match):
    with pytest.raises(ValueError, match=match):
        Patches(patch).build(shape)


@pytest.mark.parametrize("patch", [0, -2, (4, 0), "4", (1, 2, 3), True])
def test_bad_patch_size(patch):
    with pytest.raises(ValueError, match="patch_size"):
        Patches(patch)
