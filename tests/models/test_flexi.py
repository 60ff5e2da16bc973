"""keras_vit/models/flexi.py: FlexiViT, one set of weights, a random patch size per batch."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.layers import resample_patch_embedding
from tests.helpers import to_numpy

SIZES = (4, 8, 16)


def _randomize(model, seed=0):
    rng = np.random.default_rng(seed)
    for weight in model.trainable_weights:
        weight.assign(rng.normal(0, 0.1, size=weight.shape).astype(weight.dtype))
    return model


def _backbone(**kwargs):
    options = dict(image_size=32, num_classes=5, num_layers=1)
    return _randomize(keras_vit.ViT("mu/8", **{**options, **kwargs}))


def _images(n=4, seed=1):
    return np.random.default_rng(seed).normal(size=(n, 32, 32, 3)).astype("float32")


@pytest.mark.slow
def test_each_patch_size_is_with_patch_size_of_the_same_weights():
    """The function trained at patch size p is the deployed `with_patch_size(model, p)`."""
    flexi = keras_vit.FlexiViT(_backbone(), SIZES, seed=0)
    images = _images()
    for size in SIZES:
        deployed = keras_vit.with_patch_size(flexi, size)
        expected = to_numpy(deployed(images))
        np.testing.assert_allclose(
            to_numpy(flexi._forward((size, size), images)), expected, rtol=1e-4, atol=1e-5
        )
    # Outside training the model runs at its patch size (the backbone's by default).
    np.testing.assert_allclose(
        to_numpy(flexi(images)),
        to_numpy(keras_vit.with_patch_size(flexi, 8)(images)),
        rtol=1e-4,
        atol=1e-5,
    )


def test_training_draws_every_patch_size():
    flexi = keras_vit.FlexiViT(_backbone(), SIZES, seed=3)
    draws = [int(to_numpy(flexi.draw_patch_size_index())) for _ in range(60)]
    assert set(draws) == {0, 1, 2} and min(draws.count(i) for i in range(3)) >= 8
    # A training call is the branch of the next draw.
    images = _images(2)
    for _ in range(2):
        state = to_numpy(flexi.seed_generator.state).copy()
        expected = int(to_numpy(flexi.draw_patch_size_index()))
        flexi.seed_generator.state.assign(state)
        size = SIZES[expected]
        np.testing.assert_allclose(
            to_numpy(flexi(images, training=True)),
            to_numpy(flexi._forward((size, size), images)),
            rtol=1e-5,
            atol=1e-6,
        )


@pytest.mark.slow
def test_fit_trains_the_base_weights_with_dropout():
    """`model.fit` with dropout and drop path inside the branches of the switch."""
    backbone = _backbone(dropout_rate=0.1, drop_path_rate=0.1)
    flexi = keras_vit.FlexiViT(backbone, SIZES, seed=0)
    kernel = to_numpy(flexi.patch_encoder.kernel).copy()
    states = [to_numpy(v).copy() for v in flexi.backbone.non_trainable_variables]
    assert states, "dropout layers should carry seed states"
    flexi.compile(
        keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    labels = np.arange(8) % 5
    history = flexi.fit(_images(8), labels, batch_size=4, epochs=3, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    assert flexi.patch_encoder.kernel.shape == (8, 8, 3, 32)
    assert not np.allclose(to_numpy(flexi.patch_encoder.kernel), kernel)
    if keras.backend.backend() != "torch":  # Keras' torch dropout draws from torch's generator
        after = [to_numpy(v) for v in flexi.backbone.non_trainable_variables]
        assert any(not np.array_equal(a, b) for a, b in zip(states, after, strict=True))


def test_dropout_draws_new_masks_inside_the_switch():
    flexi = keras_vit.FlexiViT(_backbone(dropout_rate=0.3), (8, 8), seed=0)  # two equal branches
    images = _images(2)
    first, second = (to_numpy(flexi(images, training=True)) for _ in range(2))
    assert not np.allclose(first, second)
    np.testing.assert_array_equal(to_numpy(flexi(images)), to_numpy(flexi(images)))


def test_static_backbone_is_rebuilt_dynamic_with_its_weights():
    backbone = _backbone(pooling="gap")
    flexi = keras_vit.FlexiViT(backbone, [12, (4, 8)], patch_size=(4, 8))
    assert flexi.backbone is not backbone and flexi.backbone.input_shape == (None, None, None, 3)
    for a, b in zip(backbone.weights, flexi.backbone.weights, strict=True):
        np.testing.assert_array_equal(to_numpy(a), to_numpy(b))
    assert flexi.patch_sizes == ((12, 12), (4, 8)) and flexi.patch_size == (4, 8)
    out = keras_vit.with_patch_size(flexi, (4, 8))
    np.testing.assert_allclose(
        to_numpy(out.layers[1].kernel),
        resample_patch_embedding(to_numpy(backbone.layers[1].kernel), (4, 8)),
        atol=1e-7,
    )
    images = _images(2)
    np.testing.assert_allclose(to_numpy(flexi(images)), to_numpy(out(images)), atol=1e-5)


def test_keras_file_round_trip(tmp_path):
    flexi = keras_vit.FlexiViT(_backbone(), SIZES, seed=5)
    images = _images(2)
    path = str(tmp_path / "flexi.keras")
    flexi.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, keras_vit.FlexiViT) and loaded.patch_sizes == flexi.patch_sizes
    np.testing.assert_allclose(to_numpy(loaded(images)), to_numpy(flexi(images)), atol=1e-6)


@pytest.mark.parametrize(
    "args,match",
    [
        ((None, SIZES), "backbone must be a keras.Model"),
        (("backbone", ()), "patch_sizes must be a non-empty sequence"),
        (("backbone", (4, 0)), "patch_sizes must be positive"),
        (("backbone", 8.0), "patch_sizes must be a non-empty sequence"),
    ],
)
def test_bad_arguments(args, match):
    backbone = keras_vit.ViT("mu/8", image_size=32, num_classes=5, num_layers=1)
    first, sizes = args
    with pytest.raises(ValueError, match=match):
        keras_vit.FlexiViT(backbone if first == "backbone" else first, sizes)


def test_a_backbone_with_patch_dropout_is_refused_in_flexivits_words():
    backbone = keras_vit.ViT("mu/8", image_size=32, num_classes=5, num_layers=1,
                             patch_dropout_rate=0.5)  # fmt: skip
    with pytest.raises(ValueError, match="FlexiViT changes the patch grid.*patch_dropout_rate=0"):
        keras_vit.FlexiViT(backbone, SIZES)


def test_patch_encoder_refuses_another_patch_size_without_dynamic_image_size():
    encoder = keras_vit.PatchEncoder(16, 8)
    with pytest.raises(ValueError, match="dynamic_image_size=True"):
        encoder(np.zeros((1, 16, 16, 3), "float32"), patch_size=4)


@pytest.mark.slow
def test_docs_example_runs():
    import os

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "docs", "models.md")) as f:
        text = f.read()
    section = text[text.index("## Any patch size: PI-resize and FlexiViT") :]
    code = section[section.index("```python\n") + 10 : section.index("```\n", 10)]
    scope = {"np": np, "keras": keras, "keras_vit": keras_vit}
    exec(compile(code, "docs/models.md", "exec"), scope)
    assert sorted(scope["deployed"]) == [4, 8, 16]
    assert scope["kernel"].shape == (12, 16, 3, 32) and scope["small"].output_shape == (None, 10)
