"""keras_vit/inspection/attention.py on non-square images: a plain model with
`dynamic_image_size`, and NaFlex batches (padding left out, each image at its own grid).

The reference for both is the same model run without padding: a NaFlex model on one unpadded
image computes exactly the plain model's function at that image's grid (same weights, the
position table resized the same way), so the NaFlex maps of an image must equal its plain
`dynamic_image_size` maps, whatever else is in the batch.
"""

import dataclasses

import numpy as np
import pytest

from keras_vit.data import naflex_batch
from keras_vit.inspection import attention_maps, attention_rollout, compute_rollout
from keras_vit.models.config import ViTConfig
from keras_vit.models.encoder import build_model

RNG = np.random.default_rng(0)
# 16 x 40 -> a 2 x 5 grid; 24 x 16 -> 3 x 2 (padded to 10 beside it)
IMAGES = [RNG.uniform(-1, 1, (16, 40, 3)).astype("float32"),
          RNG.uniform(-1, 1, (24, 16, 3)).astype("float32")]  # fmt: skip
BUDGET = 10


@pytest.fixture(scope="module")
def models():
    """A NaFlex model (class token) and the plain dynamic-size model with its weights."""
    config = ViTConfig.from_variant("mu/8", image_size=24, num_layers=1, num_classes=3,
                                    naflex=True, prefix_position_embedding=False)  # fmt: skip
    naflex = build_model(config)
    rng = np.random.default_rng(1)
    naflex.set_weights([w + rng.normal(0, 0.2, w.shape).astype(w.dtype)
                        for w in naflex.get_weights()])  # fmt: skip
    plain = build_model(dataclasses.replace(config, naflex=False, dynamic_image_size=True))
    plain.set_weights(naflex.get_weights())
    return naflex, plain


def test_dynamic_image_size_on_a_non_square_image(models):
    _, plain = models
    maps = attention_maps(plain, IMAGES[0][None])
    assert maps.shape == (1, 1, 2, 11, 11)  # class token + 2 x 5 patches
    np.testing.assert_allclose(maps.sum(axis=-1), 1.0, atol=1e-5)
    result = attention_rollout(plain, IMAGES[0][None])
    assert result.grid.shape == (1, 2, 5) and result.image.shape == (1, 16, 40)
    rollout = compute_rollout(maps, num_prefix_tokens=1)
    np.testing.assert_allclose(result.grid[0].ravel(), rollout[0, 0, 1:], rtol=1e-6)


def test_naflex_maps_ignore_padding_and_equal_the_plain_model(models):
    naflex, plain = models
    batch = naflex_batch(IMAGES, 8, BUDGET)
    valid = batch["patch_valid"]
    assert not valid.all()
    maps = attention_maps(naflex, batch)
    assert maps.shape == (2, 1, 2, 1 + BUDGET, 1 + BUDGET)
    keep = np.concatenate([[True], valid[1]])
    assert not maps[1][..., ~keep, :].any() and not maps[1][..., :, ~keep].any()
    rollout = attention_rollout(naflex, batch)
    for i, image in enumerate(IMAGES):
        keep = np.concatenate([[True], valid[i]])
        expected = attention_maps(plain, image[None])[0]  # each image at its own grid
        np.testing.assert_allclose(maps[i][..., keep, :][..., keep], expected, atol=2e-6)
        grid = compute_rollout(expected[None], num_prefix_tokens=1)[0, 0, 1:]
        assert rollout.grid[i].shape == (image.shape[0] // 8, image.shape[1] // 8)
        np.testing.assert_allclose(rollout.grid[i].ravel(), grid, rtol=1e-5, atol=1e-7)
        assert rollout.image[i].shape == image.shape[:2]


def test_naflex_needs_a_naflex_batch(models):
    naflex, _ = models
    with pytest.raises(ValueError, match="NaFlex batch"):
        attention_maps(naflex, IMAGES[0][None])
