"""keras_vit/models/patch_resize.py: `with_patch_size` (FlexiViT's PI-resize of a whole model)."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.layers import PatchEncoder, resample_patch_embedding, resample_position_embedding
from keras_vit.layers.patch_resize import linear_resize_matrix
from tests.helpers import to_numpy

TINY = dict(num_layers=1, num_classes=5)


def _randomize(model, seed=0):
    """Every weight random (the class token, head and biases start at zero)."""
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        weight.assign(rng.normal(0, 0.1, size=weight.shape).astype(weight.dtype))
    return model


def _encoder(model):
    return next(layer for layer in model.layers if isinstance(layer, PatchEncoder))


def _resize_patches(images, patch, new_patch):
    """Each `patch` of the images resized alone to `new_patch` (bilinear, PyTorch's matrix)."""
    b, h, w, c = images.shape
    (ph, pw), (nh, nw) = patch, new_patch
    x = images.reshape(b, h // ph, ph, w // pw, pw, c)
    rows, cols = linear_resize_matrix(ph, nh), linear_resize_matrix(pw, nw)
    x = np.einsum("Hh,Ww,byhxwc->byHxWc", rows, cols, x)
    return x.reshape(b, (h // ph) * nh, (w // pw) * nw, c).astype("float32")


@pytest.mark.parametrize(
    "options",
    [
        dict(pooling="token"),
        dict(pooling="gap", position_embedding="sincos2d"),
        dict(pooling="map", num_register_tokens=2, prefix_position_embedding=False),
    ],
    ids=["token", "gap-sincos", "map-registers"],
)
def test_enlarged_patch_on_resized_patches_gives_the_same_outputs(options):
    """Patch (4, 6) at 16x24 px -> patch (8, 9) at 32x36 px: the same grid, the same function."""
    model = _randomize(
        keras_vit.ViT("mu/4", patch_size=(4, 6), image_size=(16, 24), **TINY, **options)
    )
    bigger = keras_vit.with_patch_size(model, (8, 9), image_size=(32, 36))
    assert bigger.input_shape == (None, 32, 36, 3) and _encoder(bigger).patch_size == (8, 9)
    images = np.random.default_rng(1).normal(size=(2, 16, 24, 3)).astype("float32")
    expected = to_numpy(model(images))
    got = to_numpy(bigger(_resize_patches(images, (4, 6), (8, 9))))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_smaller_patch_resizes_the_kernel_and_position_embedding_and_copies_the_rest():
    model = _randomize(keras_vit.ViT("mu/8", patch_size=8, image_size=32, **TINY))
    small = keras_vit.with_patch_size(model, 4)
    old, new = _encoder(model), _encoder(small)
    assert small.name == model.name and new.grid_size == (8, 8)
    np.testing.assert_allclose(
        to_numpy(new.kernel), resample_patch_embedding(to_numpy(old.kernel), 4), atol=1e-7
    )
    np.testing.assert_allclose(
        to_numpy(new.position_embeddings),
        resample_position_embedding(to_numpy(old.position_embeddings), (8, 8), 1, None, "bicubic"),
        atol=1e-7,
    )
    resized = {id(old.kernel), id(old.position_embeddings)}
    for a, b in zip(model.weights, small.weights, strict=True):
        if id(a) not in resized:
            np.testing.assert_array_equal(to_numpy(a), to_numpy(b), err_msg=a.path)
    images = np.random.default_rng(2).normal(size=(2, 32, 32, 3)).astype("float32")
    assert to_numpy(small(images)).shape == (2, 5)


def test_options_change_the_resizes():
    model = _randomize(keras_vit.ViT("mu/8", patch_size=8, image_size=32, **TINY))
    bicubic = keras_vit.with_patch_size(
        model, 16, interpolation="bicubic", position_interpolation="linear"
    )
    np.testing.assert_allclose(
        to_numpy(_encoder(bicubic).kernel),
        resample_patch_embedding(to_numpy(_encoder(model).kernel), 16, "bicubic"),
        atol=1e-7,
    )
    np.testing.assert_allclose(
        to_numpy(_encoder(bicubic).position_embeddings),
        resample_position_embedding(to_numpy(_encoder(model).position_embeddings), (2, 2)),
        atol=1e-7,
    )


@pytest.mark.parametrize(
    "args,kwargs,match",
    [
        ((5,), {}, "must be divisible"),
        ((4,), {"interpolation": "area"}, "interpolation must be one of"),
        ((4,), {"position_interpolation": "cubic"}, "position_interpolation must be one of"),
    ],
)
def test_bad_input(args, kwargs, match):
    model = keras_vit.ViT("mu/8", patch_size=8, image_size=32, **TINY)
    with pytest.raises(ValueError, match=match):
        keras_vit.with_patch_size(model, *args, **kwargs)


def test_not_a_vit_is_refused():
    inputs = keras.Input((8,))
    with pytest.raises(ValueError, match="PatchEncoder"):
        keras_vit.with_patch_size(keras.Model(inputs, keras.layers.Dense(2)(inputs)), 4)
