"""keras_vit/inspection/attention.py: attention maps and rollout against NumPy."""

import numpy as np
import pytest

from keras_vit import inspection as vi
from tests.helpers import randomize_weights
from tests.inspection.references import (
    np_reference_attention,
    np_rollout,
    random_attention,
    random_images,
    tiny_vit,
    uniformise_attention,
)


def test_attention_maps_match_numpy_reference():
    model = tiny_vit()
    randomize_weights(model, scale=0.1)
    images = random_images((3, 32, 32, 3))
    maps = vi.attention_maps(model, images, batch_size=2)
    assert maps.shape == (3, 2, 2, 17, 17)
    np.testing.assert_allclose(maps.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(maps, np_reference_attention(model, images), atol=2e-5)


@pytest.mark.parametrize("head_fusion", ["mean", "max", "min"])
@pytest.mark.parametrize("discard_ratio", [0.0, 0.3])
def test_compute_rollout_matches_numpy(head_fusion, discard_ratio):
    attention = random_attention((2, 3, 4, 10, 10))
    got = vi.compute_rollout(attention, head_fusion, discard_ratio, num_prefix_tokens=1)
    want = np_rollout(attention.astype("float64"), head_fusion, discard_ratio)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-12)


def test_compute_rollout_discard_keeps_class_token_self_attention():
    attention = np.full((1, 1, 1, 5, 5), 0.2)
    attention[0, 0, 0, 0, 0] = 0.0  # the lowest entry, but it must survive (be 0 + identity)
    attention[0, 0, 0, 0, 1:] = 0.25
    rollout = vi.compute_rollout(attention, discard_ratio=0.5)
    # the class row keeps its own (zero) weight plus identity and the four 0.25 entries
    np.testing.assert_allclose(rollout[0, 0], [0.5, 0.125, 0.125, 0.125, 0.125])


def test_compute_rollout_rejects_bad_arguments():
    attention = random_attention((1, 1, 1, 5, 5))
    with pytest.raises(ValueError, match="head_fusion"):
        vi.compute_rollout(attention, head_fusion="median")
    with pytest.raises(ValueError, match="discard_ratio"):
        vi.compute_rollout(attention, discard_ratio=1.0)
    with pytest.raises(ValueError, match="attention must have shape"):
        vi.compute_rollout(attention[0])


@pytest.mark.parametrize("head_fusion,discard_ratio", [("mean", 0.0), ("max", 0.9)])
def test_attention_rollout_model_path_matches_numpy(head_fusion, discard_ratio):
    model = tiny_vit(image_size=(32, 48))
    randomize_weights(model, scale=0.1)
    images = random_images((2, 32, 48, 3))
    result = vi.attention_rollout(model, images, head_fusion, discard_ratio)
    assert result.grid.shape == (2, 4, 6) and result.image.shape == (2, 32, 48)
    rollout = np_rollout(np_reference_attention(model, images), head_fusion, discard_ratio)
    np.testing.assert_allclose(
        result.grid, rollout[:, 0, 1:].reshape(2, 4, 6), rtol=1e-4, atol=1e-6
    )
    # the up-sampled map is the grid map resized bilinearly (half-pixel centres, edges clamped)
    from skimage.transform import resize

    for grid, image in zip(result.grid, result.image, strict=True):
        want = resize(grid.astype("float64"), (32, 48), order=1, mode="edge", anti_aliasing=False)
        np.testing.assert_allclose(image, want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("pooling", ["token", "gap"])
def test_uniform_attention_gives_uniform_map(pooling):
    model = tiny_vit(pooling=pooling)
    randomize_weights(model, scale=0.1)
    uniformise_attention(model)
    images = random_images((2, 32, 32, 3))
    maps = vi.attention_maps(model, images)
    tokens = 16 + (pooling == "token")
    np.testing.assert_allclose(maps, 1.0 / tokens, atol=1e-6)
    result = vi.attention_rollout(model, images)
    assert result.grid.shape == (2, 4, 4)
    np.testing.assert_allclose(result.grid, result.grid[:, :1, :1] * np.ones((1, 4, 4)), rtol=1e-5)
    np.testing.assert_allclose(
        result.image, result.grid[:, :1, :1] * np.ones((1, 32, 32)), rtol=1e-5
    )
    if pooling == "gap":  # no class token: the mean row of the rollout, 1 / T everywhere
        np.testing.assert_allclose(result.grid, 1.0 / 16, rtol=1e-5)
    else:  # class token: (1 - 2**-L) / T on every patch (eigen-decomposition of (I + J/T) / 2)
        np.testing.assert_allclose(result.grid, (1 - 2.0**-2) / 17, rtol=1e-5)


# --- mean attention distance -------------------------------------------------------------------


@pytest.mark.parametrize("attention_type", ["standard", "differential"])
def test_parallel_scaling_and_differential_attention_maps(attention_type):
    """ParallelScalingBlock maps sum to 1; differential maps (A1 - lambda A2) to 1 - lambda."""
    import math

    import keras_vit
    from keras_vit.layers.differential_attention import lambda_init
    from tests.helpers import to_numpy

    model = keras_vit.ViT("mu/8", image_size=16, num_classes=3, num_layers=1,
                          block_kind="parallel_scaling", attention_type=attention_type)  # fmt: skip
    images = np.random.default_rng(0).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    maps = vi.attention_maps(model, images)
    assert maps.shape == (2, 1, 2, 5, 5)  # class token + 2 x 2 patches
    expected = 1.0
    if attention_type == "differential":
        q1, k1, q2, k2 = (to_numpy(w).astype("float64") for w in model.blocks[0].lambdas)
        lam = math.exp((q1 * k1).sum()) - math.exp((q2 * k2).sum()) + lambda_init(0)
        expected = 1.0 - lam
    np.testing.assert_allclose(maps.sum(-1), expected, rtol=1e-5, atol=1e-5)
