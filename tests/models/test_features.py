"""`keras_vit.feature_extractor`: block outputs as maps or tokens (timm forward_intermediates)."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.models.features import take_indices
from tests.helpers import np_vit_forward, randomize_weights, to_numpy

OPTIONS = dict(num_classes=5, num_layers=3, num_register_tokens=2, distillation_token=True)


def _images(size=(16, 24), b=2, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (b, *size, 3)).astype("float32")


@pytest.fixture(scope="module")
def model():
    model = keras_vit.ViT("mu/8", image_size=(16, 24), dynamic_image_size=True, **OPTIONS)
    randomize_weights(model, seed=4)
    return model


def test_indices_follow_timm():
    assert take_indices(12, 1) == [11]
    assert take_indices(12, [-1, 0, 5]) == [11, 0, 5]
    for bad, match in (
        (0, "1 to 12"),
        (13, "1 to 12"),
        ([12], "out of range"),
        ([-13], "out of range"),
        ([], "at least one"),
        ("1", "ints"),
        (True, "an int or a list"),
    ):
        with pytest.raises(ValueError, match=match):
            take_indices(12, bad)


def test_spatial_and_tokens_match_numpy_at_two_sizes(model):
    spatial = keras_vit.feature_extractor(model, [0, -1])
    tokens = keras_vit.feature_extractor(model, 2, output="tokens")
    assert [tuple(s) for s in spatial.output_shape] == [(None, None, None, 32)] * 2
    for size in ((16, 24), (24, 32)):
        x = _images(size)
        blocks = np_vit_forward(model, x, stored_grid=(2, 3), return_blocks=True, **OPTIONS)
        grid = (size[0] // 8, size[1] // 8)
        maps = [to_numpy(m) for m in spatial(x)]
        for got, block in zip(maps, (blocks[0], blocks[2]), strict=True):
            expected = block[:, 4:].reshape(2, *grid, 32)  # cls, dist, 2 registers dropped
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(block).max())
        seqs = [to_numpy(t) for t in tokens(x)]
        for got, block in zip(seqs, blocks[1:], strict=True):
            np.testing.assert_allclose(got, block, rtol=1e-5, atol=1e-5 * np.abs(block).max())


def test_hybrid_maps_use_the_feature_map_grid(tmp_path):
    hybrid = keras_vit.ViT(
        "mu/1",
        resnet_units=(1, 1),
        resnet_width=8,
        resnet_groups=4,
        image_size=32,
        num_layers=2,
        num_classes=5,
        dynamic_image_size=True,
    )
    features = keras_vit.feature_extractor(hybrid, [-1])
    tokens = keras_vit.feature_extractor(hybrid, [-1], output="tokens")
    for size in ((32, 32), (48, 40)):
        x = _images(size)
        got, seq = features(x), tokens(x)
        grid = (size[0] // 8, size[1] // 8)
        np.testing.assert_array_equal(to_numpy(got), to_numpy(seq)[:, 1:].reshape(2, *grid, 32))
    path = str(tmp_path / "features.keras")
    features.save(path)
    loaded = keras_vit.load_model(path)
    x = _images((40, 48))
    np.testing.assert_array_equal(to_numpy(loaded(x)), to_numpy(features(x)))


def test_static_model_static_maps():
    static = keras_vit.ViT("mu/8", image_size=32, num_classes=3, pooling="gap")
    features = keras_vit.feature_extractor(static, 1)
    assert tuple(features.output_shape) == (None, 4, 4, 32)


def test_errors(model):
    with pytest.raises(ValueError, match="output must be one of"):
        keras_vit.feature_extractor(model, 1, output="NCHW")
    with pytest.raises(ValueError, match="out of range for a model with 3 blocks"):
        keras_vit.feature_extractor(model, [3])
    cnn = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3)])
    with pytest.raises(ValueError, match="needs a model built by keras_vit.*Sequential"):
        keras_vit.feature_extractor(cnn, 1)
    with pytest.raises(ValueError, match="a VisionTransformer.*Received: str"):
        keras_vit.feature_extractor("model.keras", 1)


def test_patch_dropout_in_training_is_said_not_a_reshape_error():
    """Patch dropout drops tokens in training: the grid cannot be laid (a raw reshape error
    before, issue 56); inference is unaffected."""
    vit = keras_vit.ViT("mu/4", image_size=16, num_layers=1, patch_dropout_rate=0.5)
    features = keras_vit.feature_extractor(vit, indices=[0])
    images = np.zeros((2, 16, 16, 3), "float32")
    out = features(images, training=False)
    out = out[0] if isinstance(out, (list, tuple)) else out
    assert tuple(to_numpy(out).shape) == (2, 4, 4, 32)
    with pytest.raises(ValueError, match=r"4x4 grid, but received 8 patch tokens.*training=False"):
        features(images, training=True)
