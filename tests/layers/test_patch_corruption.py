"""keras_vit/layers/patch_corruption.py: masked patch prediction's corruption (and the PatchEncoder
inputs it drives)."""

import keras
import numpy as np
import pytest

from keras_vit.layers import PatchEncoder, patch_corruption, patch_targets
from tests.helpers import check_config_complete, to_numpy


def _draw(batch, num_patches, **kwargs):
    return [to_numpy(t) for t in patch_corruption.sample_corruption(batch, num_patches, **kwargs)]


def test_corruption_statistics_80_10_10():
    mask, source, weights = _draw(4000, 16, seed=3)
    corrupted = weights.astype(bool)
    # Exactly round(0.5 * 16) = 8 patches per image.
    np.testing.assert_array_equal(weights.sum(1), np.full(4000, 8.0))
    positions = np.arange(16)[None]
    replaced = source != positions
    assert not (mask & ~corrupted).any(), "mask embedding outside the corrupted patches"
    assert not (replaced & ~corrupted).any(), "random replacement outside the corrupted patches"
    assert not (mask & replaced).any()
    n = corrupted.sum()
    assert abs(mask.sum() / n - 0.8) < 0.01
    assert abs(replaced.sum() / n - 0.1) < 0.01
    assert abs((corrupted & ~mask & ~replaced).sum() / n - 0.1) < 0.01
    # Every position is equally likely to be corrupted.
    np.testing.assert_allclose(corrupted.mean(0), 0.5, atol=0.03)
    # Replacements borrow another patch of the same image, uniformly.
    assert ((source >= 0) & (source < 16)).all()
    offsets = (source - positions)[replaced] % 16
    assert offsets.min() >= 1
    counts = np.bincount(offsets, minlength=16)[1:]
    assert counts.min() > 0.5 * counts.mean()


@pytest.mark.parametrize(
    "num_patches, rate, expected", [(16, 0.25, 4), (10, 0.3, 3), (49, 0.5, 25), (16, 0.0, 0)]
)
def test_corruption_exact_count_per_image(num_patches, rate, expected):
    assert patch_corruption.num_corrupted(num_patches, rate) == expected
    mask, source, weights = _draw(64, num_patches, corruption_rate=rate, seed=0)
    np.testing.assert_array_equal(weights.sum(1), np.full(64, float(expected)))


def test_corruption_rates_are_arguments():
    mask, source, weights = _draw(2000, 16, mask_fraction=0.0, random_fraction=1.0, seed=1)
    corrupted = weights.astype(bool)
    assert not mask.any()
    np.testing.assert_array_equal(source != np.arange(16)[None], corrupted)
    mask, source, weights = _draw(2000, 16, mask_fraction=0.5, random_fraction=0.2, seed=2)
    n = weights.sum()
    assert abs(mask.sum() / n - 0.5) < 0.02
    assert abs((source != np.arange(16)[None]).sum() / n - 0.2) < 0.02


def test_corruption_seeding():
    a = _draw(8, 16, seed=5)
    b = _draw(8, 16, seed=5)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    generator = keras.random.SeedGenerator(5)
    first = _draw(8, 16, seed=generator)
    second = _draw(8, 16, seed=generator)
    assert not np.array_equal(first[2], second[2]), "a SeedGenerator must give fresh draws"


def test_corruption_argument_errors():
    with pytest.raises(ValueError, match="corruption_rate"):
        patch_corruption.sample_corruption(2, 16, corruption_rate=1.5)
    with pytest.raises(ValueError, match="mask_fraction \\+ random_fraction"):
        patch_corruption.sample_corruption(2, 16, mask_fraction=0.8, random_fraction=0.3)
    with pytest.raises(ValueError, match="target must be one of"):
        patch_targets.patch_targets(np.zeros((1, 8, 8, 3), "float32"), 4, target="colour")


def test_patch_corruption_layer_config_and_shapes():
    layer = patch_corruption.PatchCorruption(4, corruption_rate=0.25, seed=7)
    check_config_complete(layer)
    mask, source, weights = layer(np.zeros((3, 16, 8, 1), "float32"))
    assert tuple(mask.shape) == tuple(source.shape) == tuple(weights.shape) == (3, 8)
    np.testing.assert_array_equal(to_numpy(weights).sum(1), [2, 2, 2])
    check_config_complete(patch_targets.PatchTargets(4, target="downsampled"))


# --------------------------------------------------------- corrupted embeddings (PatchEncoder)


def test_patch_encoder_patch_source_and_mask():
    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (4, 16, 16, 3)).astype("float32")
    encoder = PatchEncoder(8, 4, use_mask_embedding=True, position_embedding="learned")
    encoder.build(images.shape)
    mask, source, weights = _draw(4, 16, seed=11)
    mask[0, :2] = True  # make sure each kind occurs
    source[1, 3] = 7
    plain = to_numpy(encoder(images))
    identity = np.tile(np.arange(16, dtype="int32"), (4, 1))
    np.testing.assert_allclose(to_numpy(encoder(images, patch_source=identity)), plain, atol=0)
    out = to_numpy(encoder(images, patch_mask=mask, patch_source=source))
    projected = to_numpy(encoder.project(images))
    pos = to_numpy(encoder.position_embeddings)[0]
    mask_embedding = to_numpy(encoder.mask_embedding)[0, 0]
    np.testing.assert_allclose(out[:, 0], plain[:, 0], atol=1e-6)  # class token untouched
    for b in range(4):
        for i in range(16):
            if mask[b, i]:
                expected = mask_embedding + pos[1 + i]
            else:
                expected = projected[b, source[b, i]] + pos[1 + i]
            np.testing.assert_allclose(out[b, 1 + i], expected, rtol=1e-5, atol=1e-5)
    untouched = ~mask & (source == np.arange(16)[None])
    np.testing.assert_array_equal(out[:, 1:][untouched], plain[:, 1:][untouched])
    with pytest.raises(ValueError, match="patch_source must have shape"):
        encoder(images, patch_source=identity[:, :5])


# ----------------------------------------------------------------------------- targets
