import keras
import numpy as np
import pytest

from keras_vit import StdConv2D
from tests.helpers import to_numpy
from tests.layer_harness import run_layer_test


def np_standardize(kernel, epsilon=1e-5):
    """Per output channel over (kh, kw, C_in), population std, epsilon added to the std."""
    mean = kernel.mean(axis=(0, 1, 2), keepdims=True)
    std = kernel.std(axis=(0, 1, 2), keepdims=True)
    return (kernel - mean) / (std + epsilon)


@pytest.mark.parametrize(
    "kwargs,num_weights",
    [(dict(strides=2, epsilon=1e-4), 1), (dict(strides=2, use_bias=True, padding="same"), 2)],
)
def test_layer(kwargs, num_weights):
    run_layer_test(
        StdConv2D,
        {"filters": 8, "kernel_size": 3, **kwargs},
        input_shape=(2, 16, 16, 3),
        expected_output_shape=(2, 8, 8, 8),
        expected_num_trainable_weights=num_weights,
        expected_num_params=3 * 3 * 3 * 8 + 8 * (num_weights - 1),
    )


@pytest.mark.parametrize(
    "strides,kernel_size,padding", [(1, 3, "same"), (2, 7, "same"), (2, 3, "valid")]
)
def test_equals_conv_with_numpy_standardized_kernel(strides, kernel_size, padding):
    x = np.random.rand(2, 11, 9, 4).astype("float32")
    layer = StdConv2D(6, kernel_size, strides=strides, padding=padding)
    layer.build(x.shape)
    # A kernel far from standardised: big mean and scale per output channel.
    raw = np.random.default_rng(1).normal(3.0, 5.0, layer.kernel.shape).astype("float32")
    layer.kernel.assign(raw)
    conv = keras.layers.Conv2D(6, kernel_size, strides=strides, padding=padding, use_bias=False)
    conv.build(x.shape)
    conv.kernel.assign(np_standardize(raw.astype("float64")).astype("float32"))
    np.testing.assert_allclose(to_numpy(layer(x)), to_numpy(conv(x)), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(to_numpy(layer.kernel), raw)  # stored raw, official layout


@pytest.mark.parametrize("epsilon", [0, -1e-5, True, "1e-5"])
def test_bad_epsilon(epsilon):
    with pytest.raises(ValueError, match="epsilon must be a positive number"):
        StdConv2D(8, 3, epsilon=epsilon)
