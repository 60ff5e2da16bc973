"""`dynamic_image_size=True`: any image size, the position embedding resampled as timm does."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.layers import PatchEncoder
from keras_vit.models.config import ViTConfig
from tests.helpers import np_vit_forward, randomize_weights, to_numpy

OPTIONS = dict(num_classes=5, num_layers=1, num_register_tokens=1, pre_norm=True)
HYBRID_STEM = dict(resnet_units=(1, 1), resnet_width=8, resnet_groups=4)
# (code, builder arguments, stored image size, other sizes): plain 16x24 px (2x3 grid) and a
# hybrid (stem stride 8, patch 1) at 32 px (4x4 grid).
CASES = {
    "plain": (
        "mu/8",
        dict(OPTIONS, prefix_position_embedding=False),
        (16, 24),
        [(24, 24), (32, 16)],
    ),
    "hybrid": ("mu/1", dict(OPTIONS, **HYBRID_STEM), (32, 32), [(48, 40)]),
}


def _images(size, b=2, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (b, *size, 3)).astype("float32")


@pytest.fixture(scope="module")
def built():
    """Each case's model, built once per module: (code, kwargs, size, others, model)."""
    cache = {}

    def get(name):
        if name not in cache:
            code, kwargs, size, others = CASES[name]
            model = keras_vit.ViT(code, image_size=size, dynamic_image_size=True, **kwargs)
            randomize_weights(model, seed=2)
            cache[name] = (code, kwargs, size, others, model)
        return cache[name]

    return get


@pytest.fixture(scope="module", params=sorted(CASES))
def dynamic(request, built):
    return built(request.param)


@pytest.fixture(scope="module")
def plain(built):
    return built("plain")


@pytest.fixture(scope="module")
def hybrid(built):
    return built("hybrid")


def _static_copy(code, kwargs, size, dynamic_model):
    """The same weights in a static model built at `size`, its table resampled at load time."""
    static = keras_vit.ViT(code, image_size=size, **kwargs)
    for layer in static.layers:
        if not layer.weights:
            continue
        source = dynamic_model.get_layer(layer.name)
        if isinstance(layer, PatchEncoder):
            for attr in ("kernel", "bias", "class_embedding", "register_embeddings"):
                if hasattr(layer, attr):
                    getattr(layer, attr).assign(to_numpy(getattr(source, attr)))
            layer.load_position_embedding(
                to_numpy(source.position_embeddings),
                source_grid=source.grid_size,
                interpolation="bicubic",
            )
        else:
            layer.set_weights(source.get_weights())
    return static


def test_input_shape_and_config(dynamic):
    code, kwargs, size, _, model = dynamic
    assert model.input_shape == (None, None, None, 3)
    assert ViTConfig.from_model(model) == ViTConfig.from_variant(
        code, image_size=size, dynamic_image_size=True, **kwargs
    )


def test_equals_static_models_with_the_resampled_table(dynamic):
    """At every size: the static model built there, with timm's load-time resampling."""
    code, kwargs, size, others, model = dynamic
    for other in [size, *others]:
        x = _images(other)
        static = _static_copy(code, kwargs, other, model)
        expected = to_numpy(static(x))
        got = to_numpy(model(x))
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


def test_plain_matches_numpy_at_other_sizes(plain):
    """The NumPy reference has no ResNet stem: the hybrid is checked against static models."""
    code, kwargs, size, others, model = plain
    for other in others:
        x = _images(other)
        expected = np_vit_forward(model, x, stored_grid=(size[0] // 8, size[1] // 8), **kwargs)
        got = to_numpy(model(x))
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


def test_predicts_fits_at_two_sizes_and_round_trips(plain, tmp_path):
    """predict and fit (compiled: jit on JAX, tf.function on TensorFlow) at two sizes."""
    code, kwargs, size, others, model = plain
    for other in (size, others[0]):
        x = _images(other)
        np.testing.assert_allclose(
            to_numpy(model.predict(x, verbose=0)), to_numpy(model(x)), rtol=1e-5, atol=1e-6
        )
    model.compile(
        keras.optimizers.SGD(1e-3),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    y = np.arange(2) % 5
    for other in (size, others[0]):
        history = model.fit(_images(other), y, batch_size=2, epochs=1, verbose=0)
        assert np.isfinite(history.history["loss"]).all()
    path = str(tmp_path / "dynamic.keras")
    model.save(path)
    loaded = keras_vit.load_model(path)
    for other in (size, others[0]):
        x = _images(other, seed=1)
        np.testing.assert_array_equal(to_numpy(loaded(x)), to_numpy(model(x)))


def test_hybrid_round_trips(hybrid, tmp_path):
    code, _, size, others, model = hybrid
    path = str(tmp_path / "hybrid.keras")
    model.save(path)
    loaded = keras_vit.load_model(path)
    x = _images(others[0], seed=1)
    np.testing.assert_array_equal(to_numpy(loaded(x)), to_numpy(model(x)))


def test_sizes_the_patch_does_not_divide_are_refused():
    model = keras_vit.ViT("mu/8", image_size=16, dynamic_image_size=True, **OPTIONS)
    with pytest.raises(ValueError, match="height must be divisible by the patch size.*20"):
        model(_images((20, 16)))
