"""keras_vit/inspection/embeddings.py: position-embedding similarity, embedding filters."""

import numpy as np
import pytest

from keras_vit import inspection as vi
from tests.helpers import np_vit_forward, randomize_weights, to_numpy
from tests.inspection.references import np_distance, np_rollout, random_images, tiny_vit


@pytest.mark.parametrize("position_embedding", ["learned", "sincos2d"])
def test_position_embedding_similarity(position_embedding):
    model = tiny_vit(image_size=(32, 48), position_embedding=position_embedding)
    sim = vi.position_embedding_similarity(model)
    assert sim.shape == (4, 6, 4, 6)
    flat = sim.reshape(24, 24)
    np.testing.assert_allclose(np.diag(flat), 1.0, atol=1e-6)
    np.testing.assert_allclose(flat, flat.T, atol=1e-6)
    table = vi.patch_position_embeddings(model)
    if position_embedding == "learned":
        embeddings = to_numpy(model.get_layer("patch_encoder").position_embeddings)
        np.testing.assert_allclose(table, embeddings[0, 1:])
    unit = table / np.linalg.norm(table, axis=1, keepdims=True)
    np.testing.assert_allclose(flat, unit @ unit.T, atol=1e-6)


@pytest.mark.parametrize(
    "options",
    [
        dict(num_register_tokens=2, pooling="gap"),  # registers, no class token
        dict(num_register_tokens=1, distillation_token=True, prefix_position_embedding=False),
        dict(pooling="map", qk_norm=True),
    ],
    ids=["registers_gap", "dist_registers_no_prefix_rows", "map"],
)
def test_models_with_prefix_tokens(options):
    """Attention, rollout, distances and position embeddings skip register / dist tokens."""
    model = tiny_vit(**options)
    randomize_weights(model, scale=0.1)
    images = random_images((2, 32, 32, 3))
    prefix = model.get_layer("patch_encoder").num_prefix_tokens
    has_class = model.get_layer("patch_encoder").class_token
    attention = np_vit_forward(model, images, return_attention=True, **options)
    maps = vi.attention_maps(model, images)
    assert maps.shape == (2, 2, 2, prefix + 16, prefix + 16)
    np.testing.assert_allclose(maps, attention, atol=2e-5)
    rollout = np_rollout(attention, "mean", 0.0, has_class_token=has_class)
    expected = rollout[:, 0, prefix:] if has_class else rollout[:, prefix:, prefix:].mean(1)
    result = vi.attention_rollout(model, images)
    np.testing.assert_allclose(result.grid, expected.reshape(2, 4, 4), rtol=1e-4, atol=1e-6)
    distances = vi.mean_attention_distance(model, images)
    np.testing.assert_allclose(
        distances, np_distance(attention, (4, 4), (8.0, 8.0), prefix), rtol=1e-4
    )
    table = to_numpy(model.get_layer("patch_encoder").position_embeddings)[0, -16:]
    np.testing.assert_allclose(vi.patch_position_embeddings(model), table)
    assert vi.position_embedding_similarity(model).shape == (4, 4, 4, 4)


def test_position_embedding_similarity_needs_an_embedding():
    model = tiny_vit(position_embedding=None)
    with pytest.raises(ValueError, match="no position embedding"):
        vi.position_embedding_similarity(model)


def test_embedding_filters():
    model = tiny_vit()
    filters = vi.embedding_filters(model, n=6)
    assert filters.shape == (6, 8, 8, 3)
    flat = filters.reshape(6, -1).astype("float64")
    np.testing.assert_allclose(flat @ flat.T, np.eye(6), atol=1e-5)
    kernel = to_numpy(model.get_layer("patch_encoder").kernel).reshape(-1, 32).T
    _, s, vt = np.linalg.svd(kernel - kernel.mean(0), full_matrices=False)
    np.testing.assert_allclose(np.abs(flat), np.abs(vt[:6]), atol=1e-5)
    # each component explains the variance its singular value says, in decreasing order
    centred = kernel - kernel.mean(0)
    np.testing.assert_allclose(np.linalg.norm(centred @ flat.T, axis=0), s[:6], rtol=1e-4)
    with pytest.raises(ValueError, match="n must be an integer in \\[1, 32\\]"):
        vi.embedding_filters(model, n=33)


# --- pictures and command line -----------------------------------------------------------------
