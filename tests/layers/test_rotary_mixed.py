"""Tests for keras_vit/layers/rotary_mixed.py (RoPE-ViT's mixed RoPE) and its models."""

import math

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.layers import MixedRotaryEmbedding, MultiHeadSelfAttention, mixed_rotary_embedding
from keras_vit.layers.rotary_mixed import mixed_rotary_frequencies
from keras_vit.models.config import ViTConfig
from tests.helpers import check_config_complete, to_numpy
from tests.layers.test_rotary import np_rotate
from tests.weights.references import import_timm, import_torch


def np_mixed(grid, frequencies):
    """Per token and head: angles x * fx + y * fy (x the column, y the row), pairs repeated."""
    rows, cols = grid
    heads = frequencies.shape[1]
    table = []
    for r in range(rows):
        for c in range(cols):
            angles = [np.repeat(c * frequencies[0, h] + r * frequencies[1, h], 2)
                      for h in range(heads)]  # fmt: skip
            table.append(np.concatenate([np.sin(angles), np.cos(angles)], -1))
    return np.array(table)  # (N, heads, 2 * head_dim)


def test_initial_frequencies_are_timms_formula():
    angles = np.random.default_rng(0).uniform(0, 2 * math.pi, (3, 2, 1)).astype("float32")
    got = to_numpy(mixed_rotary_frequencies(3, 2, 16, 10.0, angles))
    magnitude = 1.0 / 10.0 ** (np.arange(0, 16, 4) / 16)
    fx = np.concatenate([magnitude * np.cos(angles), magnitude * np.cos(angles + math.pi / 2)], -1)
    fy = np.concatenate([magnitude * np.sin(angles), magnitude * np.sin(angles + math.pi / 2)], -1)
    np.testing.assert_allclose(got, np.stack([fx, fy]), atol=1e-6)
    layer = MixedRotaryEmbedding(3, 2, 16)
    layer.build((None, 4, 4, 3))
    norms = np.linalg.norm(to_numpy(layer.frequencies)[..., :4], axis=0)  # |(fx, fy)| = magnitude
    np.testing.assert_allclose(norms, np.broadcast_to(magnitude, norms.shape), rtol=1e-5)


def test_tables_match_numpy_and_timm():
    torch = import_torch()
    import_timm()
    from timm.layers.pos_embed_sincos import RotaryEmbeddingMixed, apply_rot_embed_cat

    grid = (3, 5)
    ref = RotaryEmbeddingMixed(dim=32, depth=2, num_heads=2, feat_shape=list(grid))
    layer = MixedRotaryEmbedding(2, 2, 16, patch_size=2)
    layer.build((None, 6, 10, 3))
    layer.frequencies.assign(ref.freqs.detach().numpy())
    tables = layer(np.zeros((1, 6, 10, 3), "float32"))
    expected = ref.get_embed().detach().numpy()  # (depth, heads, N, 2 * head_dim)
    freqs = ref.freqs.detach().numpy()
    x = np.random.default_rng(1).normal(size=(2, 15, 2, 16)).astype("float32")  # (B, N, h, hd)
    for i, table in enumerate(tables):
        table = to_numpy(table)
        np.testing.assert_allclose(table, expected[i].transpose(1, 0, 2), atol=1e-5)
        np.testing.assert_allclose(table, np_mixed(grid, freqs[:, i]), atol=1e-5)
        want = apply_rot_embed_cat(torch.from_numpy(x.transpose(0, 2, 1, 3)),
                                   torch.from_numpy(expected[i])).numpy()  # fmt: skip
        sin, cos = np.split(table, 2, -1)
        np.testing.assert_allclose(np_rotate(x, sin, cos), want.transpose(0, 2, 1, 3), atol=1e-5)
    one = mixed_rotary_embedding(grid, freqs[:, 1])
    np.testing.assert_allclose(to_numpy(one), to_numpy(tables[1]), atol=1e-6)


def test_attention_takes_a_table_per_head():
    layer = MultiHeadSelfAttention(2)
    tokens = np.random.default_rng(2).normal(size=(1, 7, 32)).astype("float32")
    freqs = np.zeros((2, 2, 8), "float32")  # zero frequencies: no rotation at all
    np.testing.assert_allclose(
        to_numpy(layer(tokens, rotary_embedding=mixed_rotary_embedding((2, 3), freqs))),
        to_numpy(layer(tokens)),
        atol=1e-5,
    )
    with pytest.raises(ValueError, match="tokens, heads = 2, 2 \\* head_dim"):
        layer(tokens, rotary_embedding=np.zeros((6, 3, 32), "float32"))


def test_layer_config_shapes_and_bad_arguments():
    layer = MixedRotaryEmbedding(2, 3, 8, temperature=100, patch_size=(2, 1))
    check_config_complete(layer)
    clone = MixedRotaryEmbedding.from_config(layer.get_config())
    assert clone.patch_size == (2, 1) and clone.temperature == 100.0
    assert layer.compute_output_shape((None, 4, 3, 1)) == [(6, 3, 16)] * 2
    for kwargs, message in (
        (dict(head_dim=6), "divisible by 4"),
        (dict(head_dim=8, temperature=0), "temperature must be positive"),
        (dict(head_dim=8, num_layers=0), "num_layers"),
    ):
        with pytest.raises(ValueError, match=message):
            MixedRotaryEmbedding(**{"num_layers": 1, "num_heads": 2, **kwargs})


@pytest.mark.slow  # 17 s on JAX on a loaded 2-core machine (1.4 s on PyTorch, 2.2 s on TF)
def test_mixed_model_frequencies_are_trainable_and_round_trip(tmp_path):
    model = keras_vit.ViT("mu/8", image_size=16, num_classes=3, num_layers=2,
                          rotary_embedding="mixed", rotary_temperature=10.0)  # fmt: skip
    frequencies = model.rotary_embedding.frequencies
    assert tuple(frequencies.shape) == (2, 2, 2, 8)
    assert any(w is frequencies for w in model.trainable_weights)
    rng = np.random.default_rng(3)
    for w in model.weights:  # a head and frequencies that change the output
        w.assign(rng.normal(0, 0.5, tuple(w.shape)).astype("float32"))
    images = rng.normal(size=(2, 16, 16, 3)).astype("float32")
    before = to_numpy(model(images))
    path = tmp_path / "mixed.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(to_numpy(loaded(images)), before, atol=1e-6)
    assert loaded.config.rotary_embedding == "mixed"
    frequencies.assign(to_numpy(frequencies) * 2.0)
    assert not np.allclose(to_numpy(model(images)), before, atol=1e-4)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(rotary_embedding="mixed", rotary_reference_grid=4), "no reference grid"),
        (dict(rotary_embedding="mixed", rotary_grid_offset=1.0), "no reference grid"),
    ],
)
def test_config_checks(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ViTConfig.from_variant("mu/8", image_size=16, **kwargs)
