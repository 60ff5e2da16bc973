"""Tests of keras_vit/layers/fake_quant.py: fake quantization (values, straight-through
gradients), TensorFlow's op as the TensorFlow adapter, the quantization-aware Dense layers."""

import keras
import numpy as np
import pytest

from keras_vit.layers import fake_quant
from keras_vit.layers._torch_kernels import is_plain
from keras_vit.layers.fake_quant import (
    QuantizationAwareDense,
    QuantizationAwareEinsumDense,
    fake_quant_weights,
    kernel_reduce_axes,
)
from tests.helpers import roundtrip_layer, to_numpy

RNG = np.random.default_rng(0)
X = (RNG.normal(size=(6, 50)) * 2).astype("float32")
RANGES = [(-1.0, 1.0, 8), (-0.3, 2.7, 8), (0.2, 3.0, 8), (-5.0, -1.0, 4), (-1.7, 0.9, 3)]


def np_fake_quant(x, low, high, bits):
    """TensorFlow's FakeQuantWithMinMaxVars, written from its kernel (fake_quant_ops_functor.h)."""
    low, high = min(low, 0.0), max(high, 0.0)
    quant_max = 2.0**bits - 1
    scale = np.float32((high - low) / quant_max)
    zero_point = np.clip(np.floor(-low / scale + 0.5), 0, quant_max)
    nudged_min, nudged_max = -zero_point * scale, (quant_max - zero_point) * scale
    clamped = np.clip(x, nudged_min, nudged_max)
    return np.floor((clamped - nudged_min) / scale + 0.5) * scale + nudged_min, (
        nudged_min,
        nudged_max,
    )


@pytest.mark.parametrize("low, high, bits", RANGES)
def test_fake_quant_matches_numpy(low, high, bits):
    expected, _ = np_fake_quant(X.astype("float64"), low, high, bits)
    got = to_numpy(fake_quant.fake_quant(X, low, high, bits))
    step = (max(high, 0) - min(low, 0)) / (2**bits - 1)
    np.testing.assert_allclose(got, expected, atol=1e-5 * step + 1e-6)
    assert len(np.unique(np.round(got / step, 3))) <= 2**bits


def _gradients(function, x, low, high):
    """d sum(w * f(x, low, high)) / d (x, low, high), on this backend."""
    weights = np.linspace(-1, 1, x.size).reshape(x.shape).astype("float32")
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return jax.grad(
            lambda a, b, c: (function(a, b, c) * weights).sum(), argnums=(0, 1, 2)
        )(x, np.float32(low), np.float32(high))
    if backend == "torch":
        import torch

        values = (x, np.float32(low), np.float32(high))
        tensors = [torch.tensor(v, requires_grad=True) for v in values]
        (function(*tensors) * torch.tensor(weights)).sum().backward()
        return [t.grad.numpy() for t in tensors]
    import tensorflow as tf

    tensors = [tf.Variable(v) for v in (x, np.float32(low), np.float32(high))]
    with tf.GradientTape() as tape:
        value = tf.reduce_sum(function(*tensors) * weights)
    return [g.numpy() for g in tape.gradient(value, tensors)]


def test_straight_through_gradients_of_fake_quant():
    low, high = -0.8, 1.3
    grad_x, grad_low, grad_high = _gradients(fake_quant.fake_quant, X, low, high)
    weights = np.linspace(-1, 1, X.size).reshape(X.shape)
    _, (nudged_min, nudged_max) = np_fake_quant(X, low, high, 8)
    inside = (X >= nudged_min) & (X <= nudged_max)
    np.testing.assert_allclose(to_numpy(grad_x), np.where(inside, weights, 0.0), atol=1e-6)
    np.testing.assert_allclose(float(grad_low), weights[X < nudged_min].sum(), rtol=1e-5)
    np.testing.assert_allclose(float(grad_high), weights[X > nudged_max].sum(), rtol=1e-5)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="the TensorFlow adapter")
@pytest.mark.parametrize("low, high, bits", RANGES)
def test_tensorflow_op_adapter_equals_the_portable_path(low, high, bits):
    def portable(x, a, b):
        return fake_quant.fake_quant(x, a, b, bits)

    def adapter(x, a, b):
        return fake_quant._tf_fake_quant(x, a, b, bits)

    np.testing.assert_allclose(
        to_numpy(adapter(X, low, high)), to_numpy(portable(X, low, high)), atol=5e-7
    )
    for got, expected in zip(
        _gradients(adapter, X, low, high), _gradients(portable, X, low, high), strict=True
    ):
        np.testing.assert_allclose(to_numpy(got), to_numpy(expected), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bits", [8, 7, 4])
def test_weights_per_output_channel_symmetric(bits):
    kernel = RNG.normal(size=(5, 3)).astype("float32") * np.array([0.1, 1.0, 10.0], "float32")
    got = to_numpy(fake_quant_weights(kernel, (0,), bits))
    levels = 2 ** (bits - 1) - 1
    scale = np.abs(kernel).max(0) / levels
    np.testing.assert_allclose(got, np.round(kernel / scale) * scale, rtol=1e-6)
    np.testing.assert_allclose(np.abs(got).max(0), np.abs(kernel).max(0), rtol=1e-6)


def test_reduce_axes_follow_the_einsum_equation():
    query = keras.layers.EinsumDense("abc,cde->abde", output_shape=(None, 2, 4))
    output = keras.layers.EinsumDense("abcd,cde->abe", output_shape=(None, 8))
    assert kernel_reduce_axes(query) == (0,)
    assert kernel_reduce_axes(output) == (0, 1)
    assert kernel_reduce_axes(keras.layers.Dense(3)) == (0,)


def test_quantization_aware_dense_layer(tmp_path):
    layer = QuantizationAwareDense(4, weight_bits=8, activation_range="learned")
    x = RNG.uniform(-1, 1, (3, 6)).astype("float32")
    layer.build((None, 6))
    assert [v.name for v in layer.trainable_variables] == [
        "kernel", "bias", "activation_min", "activation_max"
    ]
    layer.activation_min.assign(-1.0)
    layer.activation_max.assign(1.0)
    layer.range_initialized.assign(1.0)
    expected_x, _ = np_fake_quant(x, -1.0, 1.0, 8)
    kernel = to_numpy(layer.kernel)
    scale = np.abs(kernel).max(0) / 127
    expected = expected_x @ (np.round(kernel / scale) * scale) + to_numpy(layer.bias)
    np.testing.assert_allclose(to_numpy(layer(x)), expected, atol=1e-5)
    config = layer.get_config()  # Dense's arguments and the QAT settings, round-tripping
    assert {key: config[key] for key in fake_quant.DEFAULTS} == dict(
        weight_bits=8, activation_bits=8, activation_range="learned", ema_decay=0.99
    )
    assert QuantizationAwareDense.from_config(config).get_config() == config
    roundtrip_layer(QuantizationAwareDense(4), x, tmp_path)
    assert not is_plain(layer)  # the PyTorch fast path leaves it to its Keras call


def test_quantization_aware_einsum_dense_tracks_ranges_in_training():
    layer = QuantizationAwareEinsumDense(
        "abc,cde->abde", output_shape=(None, 2, 4), bias_axes="de", ema_decay=0.5
    )
    x = RNG.uniform(-2, 3, (2, 5, 6)).astype("float32")
    layer(x, training=True)  # the first batch sets the range
    np.testing.assert_allclose(
        [to_numpy(layer.activation_min), to_numpy(layer.activation_max)], [x.min(), x.max()]
    )
    layer(x * 0.0 + 1.0, training=True)  # then a moving average
    np.testing.assert_allclose(to_numpy(layer.activation_min), 0.5 * x.min() + 0.5, rtol=1e-6)
    layer(x * 10, training=False)  # inference leaves it
    np.testing.assert_allclose(to_numpy(layer.activation_min), 0.5 * x.min() + 0.5, rtol=1e-6)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(weight_bits=9), r"weight_bits must be an int in \[2, 8\]"),
        (dict(activation_bits=True), "activation_bits must be an int"),
        (dict(activation_range="minmax"), "activation_range must be one of"),
        (dict(ema_decay=1.0), r"ema_decay must be a number in \[0, 1\)"),
    ],
)
def test_bad_settings_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        QuantizationAwareDense(3, **kwargs)


def test_quantizing_a_quantization_aware_layer_again_raises():
    layer = QuantizationAwareDense(3)
    layer.build((None, 4))
    with pytest.raises(ValueError, match="quantize twice"):
        layer.quantize("int8")
