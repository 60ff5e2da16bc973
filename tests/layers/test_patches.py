import keras
import numpy as np
import pytest

from keras_vit.layers import Patches
from tests.helpers import check_config_complete, np_patches, roundtrip_layer, to_numpy


@pytest.mark.parametrize("shape,patch", [((2, 8, 12, 3), 4), ((1, 6, 8, 1), (3, 2)), ((2, 4, 4, 2), 4)])
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


def test_output_shape_and_no_weights():
    layer = Patches(4)
    assert layer.compute_output_shape((None, 8, 12, 3)) == (None, 6, 48)
    layer.build((None, 8, 12, 3))
    assert layer.weights == []


def test_config_and_serialization(tmp_path):
    check_config_complete(Patches((2, 4)))
    roundtrip_layer(Patches((2, 4)), np.random.rand(2, 4, 8, 3).astype("float32"), tmp_path)


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
