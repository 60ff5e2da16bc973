import keras
import numpy as np
import pytest

from keras_vit import StdConv2D
from tests.helpers import np_conv_same, np_standardize, to_numpy
from tests.layer_harness import run_layer_test


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
    "strides,kernel_size,padding",
    [(1, 3, "same"), (2, 7, "same"), (2, 1, "same"), (2, 3, "valid")],
)
def test_equals_conv_with_numpy_standardized_kernel(strides, kernel_size, padding):
    x = np.random.default_rng(0).uniform(-1, 1, (2, 11, 9, 4)).astype("float32")
    layer = StdConv2D(6, kernel_size, strides=strides, padding=padding)
    layer.build(x.shape)
    # A kernel far from standardised: big mean and scale per output channel.
    raw = np.random.default_rng(1).normal(3.0, 5.0, layer.kernel.shape).astype("float32")
    layer.kernel.assign(raw)
    expected = np_standardize(raw.astype("float64"))
    np.testing.assert_allclose(
        to_numpy(layer.standardized_kernel()), expected, rtol=1e-5, atol=1e-5
    )
    conv = keras.layers.Conv2D(6, kernel_size, strides=strides, padding=padding, use_bias=False)
    conv.build(x.shape)
    conv.kernel.assign(expected.astype("float32"))
    np.testing.assert_allclose(to_numpy(layer(x)), to_numpy(conv(x)), rtol=1e-4, atol=1e-4)
    if padding == "same":  # and against a plain NumPy convolution in float64
        reference = np_conv_same(x.astype("float64"), expected, strides)
        np.testing.assert_allclose(to_numpy(layer(x)), reference, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(to_numpy(layer.kernel), raw)  # stored raw, official layout


def test_standardizes_stored_kernel_at_every_call():
    layer = StdConv2D(4, 3)
    x = np.random.default_rng(0).uniform(-1, 1, (1, 8, 8, 3)).astype("float32")
    y1 = to_numpy(layer(x))
    raw = to_numpy(layer.kernel)
    # The stored kernel stays raw; an affine change of it per output channel does not change
    # the output, a different kernel does (so nothing is cached from the first call).
    layer.kernel.assign(raw * 7.0 + 2.0)
    np.testing.assert_allclose(to_numpy(layer(x)), y1, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(to_numpy(layer.kernel), raw * 7.0 + 2.0, rtol=1e-6)
    layer.kernel.assign(raw[::-1].copy())
    assert not np.allclose(to_numpy(layer(x)), y1, atol=1e-3)


@pytest.mark.parametrize("epsilon", [0, -1e-5, True, "1e-5"])
def test_bad_epsilon(epsilon):
    with pytest.raises(ValueError, match="epsilon must be a positive number"):
        StdConv2D(8, 3, epsilon=epsilon)


def test_variance_epsilon_mode_matches_timm_formula():
    # timm's StdConv2dSame: F.batch_norm over the kernel, i.e. (w - mean) / sqrt(var + eps).
    layer = StdConv2D(5, 3, epsilon=1e-3, epsilon_mode="variance")
    layer.build((1, 8, 8, 4))
    raw = np.random.default_rng(2).normal(0.0, 0.05, layer.kernel.shape).astype("float32")
    layer.kernel.assign(raw)
    w = raw.astype("float64") - raw.mean(axis=(0, 1, 2), keepdims=True)
    expected = w / np.sqrt(w.var(axis=(0, 1, 2), keepdims=True) + 1e-3)
    np.testing.assert_allclose(to_numpy(layer.standardized_kernel()), expected, rtol=1e-5)
    # The official placement gives a measurably different kernel with this epsilon.
    assert not np.allclose(np_standardize(raw.astype("float64"), 1e-3), expected, rtol=1e-3)
    assert StdConv2D.from_config(layer.get_config()).epsilon_mode == "variance"


def test_bad_epsilon_mode():
    with pytest.raises(ValueError, match="epsilon_mode must be one of"):
        StdConv2D(8, 3, epsilon_mode="var")
