"""preprocess_input: [0, 255] -> [-1, 1]; anything that is not pixel values is refused."""

import keras
import numpy as np
import pytest

from keras_vit.preprocessing import preprocess_input


@pytest.mark.parametrize(
    "images",
    [np.array([0, 255], "uint8"), np.array([0.0, 255.0], "float32"), [0, 255], np.int64([0, 255])],
)
def test_scales_numbers_to_minus_one_one(images):
    out = keras.ops.convert_to_numpy(preprocess_input(images))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [-1.0, 1.0], rtol=0, atol=1e-7)


def test_backend_tensor_and_symbolic_input():
    out = preprocess_input(keras.ops.convert_to_tensor(np.full((1, 2, 2, 3), 127.5, "float32")))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(out), 0.0, atol=1e-7)
    symbolic = preprocess_input(keras.Input((4, 4, 3), dtype="uint8"))
    assert tuple(symbolic.shape) == (None, 4, 4, 3)


@pytest.mark.parametrize(
    "images, received",
    [
        (np.array(["cat.png"]), "dtype="),
        (["cat.png", "dog.png"], "dtype="),
        (np.array([True, False]), "dtype=bool"),
        (np.array([1 + 2j]), "dtype=complex"),
    ],
)
def test_refuses_what_is_not_pixel_values(images, received):
    with pytest.raises(ValueError, match="numeric pixel values") as info:
        preprocess_input(images)
    assert received in str(info.value)


def test_refuses_boolean_backend_tensor():
    with pytest.raises(ValueError, match="dtype=bool"):
        preprocess_input(keras.ops.ones((2,), "bool"))
