"""keras_vit/inspection/distance.py: mean attention distance against NumPy."""

import numpy as np
import pytest

from keras_vit import inspection as vi
from tests.helpers import randomize_weights
from tests.inspection.references import (
    np_distance,
    np_reference_attention,
    random_attention,
    random_images,
    tiny_vit,
    uniformise_attention,
)


@pytest.mark.parametrize("prefix", [0, 1])
def test_compute_attention_distance_matches_numpy(prefix):
    attention = random_attention((2, 3, 2, prefix + 6, prefix + 6), seed=1)
    got = vi.compute_attention_distance(attention, (2, 3), (4.0, 8.0), num_prefix_tokens=prefix)
    assert got.shape == (3, 2)
    np.testing.assert_allclose(got, np_distance(attention, (2, 3), (4.0, 8.0), prefix), rtol=1e-5)


def test_attention_distance_is_zero_for_self_attention():
    eye = np.broadcast_to(np.eye(13), (2, 3, 4, 13, 13))
    np.testing.assert_array_equal(vi.compute_attention_distance(eye, (3, 4), (16.0, 16.0)), 0.0)
    # all attention on the class token: no patch weight, distance 0 rather than NaN
    to_cls = np.zeros((1, 1, 1, 5, 5))
    to_cls[..., 0] = 1.0
    np.testing.assert_array_equal(vi.compute_attention_distance(to_cls, (2, 2), (8.0, 8.0)), 0.0)


def test_attention_distance_known_value():
    # two patches side by side, each attends only to the other: one cell width apart
    swap = np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0]])[None, None, None]
    np.testing.assert_allclose(vi.compute_attention_distance(swap, (1, 2), (16.0, 12.0)), [[12.0]])


def test_mean_attention_distance_model_matches_numpy():
    model = tiny_vit(image_size=(32, 48))
    randomize_weights(model, scale=0.1)
    images = random_images((2, 32, 48, 3))
    got = vi.mean_attention_distance(model, images)
    want = np_distance(np_reference_attention(model, images), (4, 6), (8.0, 8.0), 1)
    assert got.shape == (2, 2)
    np.testing.assert_allclose(got, want, rtol=1e-4)


def test_mean_attention_distance_uniform_attention():
    model = tiny_vit()
    uniformise_attention(model)
    got = vi.mean_attention_distance(model, random_images((1, 32, 32, 3)))
    centres = [((i + 0.5) * 8, (j + 0.5) * 8) for i in range(4) for j in range(4)]
    mean_pair = np.mean([np.hypot(a[0] - b[0], a[1] - b[1]) for a in centres for b in centres])
    np.testing.assert_allclose(got, mean_pair, rtol=1e-5)


# --- position embeddings and filters -----------------------------------------------------------
