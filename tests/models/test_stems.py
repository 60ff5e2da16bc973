"""Tests for the BatchNorm stems of hybrid ViTs: ResNet-D (keras_vit/layers/resnet_d.py) and the
conv stem (keras_vit/layers/conv_stem.py), built through `ViT(stem=...)`.

Their numerics against timm are in tests/families/stems/test_timm_stems.py; here the conv stem
against
NumPy, the BatchNorm training behaviour under `fit`, `.keras` round trips, the PyTorch fast path
and the config checks.
"""

import dataclasses

import keras
import numpy as np
import pytest

from keras_vit import ViT
from keras_vit.layers.conv_stem import conv_stem
from keras_vit.layers.resnet_d import BATCH_NORM_EPSILON
from keras_vit.models.config import ViTConfig
from tests.helpers import backend_independent, np_gelu, randomize_weights, roundtrip_model, to_numpy

# ResNet-D: 2 stages of one unit, width 8 (stride 8: 32 px -> 4x4); conv stem: one 4x4/4
# convolution of width 8, then the 2x2 patch embedding (stride 8: 4x4).
STEMS = {
    "resnet_d": dict(resnet_units=(1, 1), resnet_width=8, stem="resnet_d", patch_size=1),
    "conv": dict(stem="conv", stem_widths=(8,), stem_strides=(4,), patch_size=2),
}
TINY = dict(image_size=32, num_layers=1, num_classes=5)


def _images(seed=0, size=32):
    return np.random.default_rng(seed).uniform(-1, 1, (2, size, size, 3)).astype("float32")


def _batch_norms(model):
    return [layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization)]


def _randomized(model, seed=0):
    """Random weights, BatchNorm variances positive."""
    randomize_weights(model, seed)
    rng = np.random.default_rng(seed + 1)
    for layer in _batch_norms(model):
        layer.moving_variance.assign(rng.uniform(0.5, 1.5, layer.moving_variance.shape))
    return model


@pytest.fixture(scope="module")
def models():
    return {kind: _randomized(ViT("mu/8", **TINY, **options)) for kind, options in STEMS.items()}


def test_conv_stem_matches_numpy():
    """Non-overlapping conv (a patch matmul) -> BatchNorm (running statistics) -> exact GELU."""
    x = keras.Input((16, 16, 3))
    model = _randomized(keras.Model(x, conv_stem(x, (6, 4), (4, 2))))
    images = _images(size=16)
    expected = images.astype("float64")
    for i, stride in enumerate((4, 2), start=1):
        kernel = to_numpy(model.get_layer(f"stem_conv{i}").kernel).astype("float64")
        b, h, w, c = expected.shape
        patches = expected.reshape(b, h // stride, stride, w // stride, stride, c)
        patches = patches.transpose(0, 1, 3, 2, 4, 5).reshape(b, h // stride, w // stride, -1)
        y = patches @ kernel.reshape(-1, kernel.shape[-1])
        norm = model.get_layer(f"stem_bn{i}")
        variables = (norm.moving_mean, norm.moving_variance, norm.gamma, norm.beta)
        mean, var, gamma, beta = (to_numpy(v).astype("float64") for v in variables)
        y = (y - mean) / np.sqrt(var + BATCH_NORM_EPSILON) * gamma + beta
        expected = np_gelu(y, approximate=False)
    np.testing.assert_allclose(to_numpy(model(images)), expected, rtol=1e-5, atol=1e-5)


def test_resnet_d_layers(models):
    model = models["resnet_d"]
    assert model.stem.output_shape == (None, 4, 4, 64)  # 4 * 8 * 2
    names = {layer.name for layer in model.layers}
    assert {"stem_conv1", "stem_bn3", "stem_pool", "layer1_0_down_conv", "layer2_0_down_pool",
            "layer2_0_bn3"} <= names  # fmt: skip
    assert "layer1_0_down_pool" not in names  # stride 1: no average pool on the shortcut
    assert model.get_layer("stem_conv1").kernel.shape == (3, 3, 3, 4)  # half the root width
    assert not any(layer.name.endswith("conv1") and layer.use_bias for layer in model.layers
                   if isinstance(layer, keras.layers.Conv2D))  # fmt: skip


def test_fit_trains_batch_norm_statistics_unless_frozen():
    """`fit` uses batch statistics and moves the running ones (Keras' BatchNormalization);
    `trainable = False` on the stem's norms runs them in inference mode and keeps them.
    (The conv stem's norms: the same Keras layer as ResNet-D's, in a cheaper model.)"""
    model = ViT("mu/8", **TINY, **STEMS["conv"])
    images, labels = _images(1), np.array([0, 3])
    norm = model.get_layer("stem_bn1")
    before = to_numpy(norm.moving_mean).copy()
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer="sgd", loss=loss)
    model.fit(images, labels, epochs=1, verbose=0)
    assert not np.allclose(to_numpy(norm.moving_mean), before)
    for layer in _batch_norms(model):
        layer.trainable = False
    frozen = {v.path: to_numpy(v).copy() for layer in _batch_norms(model) for v in layer.weights}
    model.compile(optimizer="sgd", loss=loss)
    history = model.fit(images, labels, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    for layer in _batch_norms(model):
        for v in layer.weights:
            np.testing.assert_array_equal(to_numpy(v), frozen[v.path])


@pytest.mark.parametrize("kind", list(STEMS))
def test_saved_and_reloaded(kind, models, tmp_path):
    loaded = roundtrip_model(models[kind], _images(), tmp_path)
    assert loaded.config == models[kind].config


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="the PyTorch fast path")
@pytest.mark.parametrize("kind", list(STEMS))
def test_torch_fast_path_equals_the_portable_path(kind, models):
    from keras_vit.layers.attention import portable_path

    model, images = models[kind], _images(2)
    for training in (False, True):  # training: batch statistics (no update in a plain call)
        with portable_path():
            expected = to_numpy(model(images, training=training))
        with portable_path(False):
            got = to_numpy(model(images, training=training))
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@backend_independent  # config validation only
def test_config_strides_and_checks():
    resnet_d = ViTConfig.from_variant("mu/1", **TINY, **{**STEMS["resnet_d"], "patch_size": 1})
    assert resnet_d.stem_stride == 8 and resnet_d.grid_size == (4, 4)
    assert resnet_d.resnet_norm_epsilon == BATCH_NORM_EPSILON and resnet_d.resnet_groups is None
    conv = ViTConfig.from_variant("mu/2", **TINY, **STEMS["conv"])
    assert conv.is_hybrid and conv.stem_stride == 4 and conv.grid_size == (4, 4)
    assert ViTConfig.from_dict(conv.to_dict()) == conv
    bad = [
        (dict(stem="resnet"), "stem must be one of"),
        (dict(stem="resnet_d"), "needs resnet_units"),
        (dict(resnet_units=(1,), stem="resnet_d", resnet_groups=4), "BiT stem"),
        (dict(resnet_units=(), stem="resnet_d"), "at least one stage"),
        (dict(resnet_units=(1,), stem="resnet_d", resnet_width=5), "even"),
        (dict(stem_widths=(8,)), "stem='conv' only"),
        (dict(stem="conv", stem_widths=(8,)), "needs stem_strides"),
        (dict(stem="conv", stem_widths=(8, 8), stem_strides=(4,)), "one entry per convolution"),
        (dict(stem="conv", stem_widths=(8,), stem_strides=(3,)), "total stride"),
        (dict(stem="conv", stem_widths=(8,), stem_strides=(4,), resnet_width=8), "not resnet_"),
    ]
    base = ViTConfig.from_variant("mu/1", **TINY)
    for overrides, message in bad:
        with pytest.raises(ValueError, match=message):
            dataclasses.replace(base, **overrides)
