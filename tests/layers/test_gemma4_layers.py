"""The generic layers Gemma 4's vision tower is built from, each alone: `RMSNorm`
(rms_norm.py), `ClippedDense`, `GatedMLP`, `split_rotary`, `NormedSelfAttention`,
`SandwichNormBlock`, `TablePatchEmbedding`, `GridCellPooling`, `FeatureStandardization`:
the layer harness (config, serialization, `.keras`, weights, a training step, mixed precision),
one NumPy check each, and their argument errors. Against timm: tests/families/gemma4."""

import numpy as np
import pytest

from keras_vit.layers.cell_pooling import GridCellPooling
from keras_vit.layers.clipped_dense import ClippedDense
from keras_vit.layers.gated_mlp import GatedMLP
from keras_vit.layers.normed_attention import NormedSelfAttention
from keras_vit.layers.rms_norm import RMSNorm
from keras_vit.layers.sandwich_block import SandwichNormBlock
from keras_vit.layers.split_rotary import apply_split_rotary, split_rotary_table
from keras_vit.layers.standardization import FeatureStandardization
from keras_vit.layers.table_patch_embedding import TablePatchEmbedding
from tests.helpers import check_config_complete, np_gelu, to_numpy
from tests.layer_harness import run_layer_test

D = 16


def _x(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _rms(x, eps=1e-6):
    return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps)


def test_rms_norm():
    run_layer_test(
        RMSNorm, {"epsilon": 1e-5}, input_shape=(2, 3, D), expected_num_trainable_weights=1
    )
    run_layer_test(
        RMSNorm,
        {"scale": False},
        input_shape=(2, 3, D),
        expected_num_trainable_weights=0,
        run_training_check=False,
    )
    x = _x(2, 3, D)
    np.testing.assert_allclose(to_numpy(RMSNorm(scale=False)(x)), _rms(x), atol=1e-6)
    with pytest.raises(ValueError, match="epsilon must be positive. Received: epsilon=0"):
        RMSNorm(epsilon=0)


def test_clipped_dense():
    run_layer_test(
        ClippedDense,
        {"units": 4, "clip": True},
        input_shape=(2, 3, D),
        expected_output_shape=(2, 3, 4),
        expected_num_trainable_weights=1,
        expected_num_non_trainable_weights=4,
    )
    layer = ClippedDense(4, clip=True)
    x = _x(2, D)
    layer.build(x.shape)
    layer.input_max.assign(0.5)
    layer.output_min.assign(-0.1)
    expected = np.maximum(np.minimum(x, 0.5) @ to_numpy(layer.kernel), -0.1)
    np.testing.assert_allclose(to_numpy(layer(x)), expected, atol=1e-6)
    with pytest.raises(ValueError, match="units must be a positive integer"):
        ClippedDense(0)


def test_gated_mlp():
    run_layer_test(
        GatedMLP,
        {"hidden_units": 24},
        input_shape=(2, 3, D),
        expected_num_trainable_weights=3,
        expected_num_params=3 * 24 * D,
    )
    layer = GatedMLP(24)
    x = _x(2, D)
    layer.build(x.shape)
    k = [to_numpy(d.kernel) for d in (layer.gate_dense, layer.up_dense, layer.down_dense)]
    expected = (np_gelu(x @ k[0], approximate=True) * (x @ k[1])) @ k[2]
    np.testing.assert_allclose(to_numpy(layer(x)), expected, atol=1e-5)
    with pytest.raises(ValueError, match="activation must be one of .*Received: activation='relu'"):
        GatedMLP(8, activation="relu")


def _np_split_rotary(x, cols, rows, theta=100.0):
    """timm's Gemma4RotaryEmbedding2D + apply_multidimensional_rope in NumPy."""
    head_dim = x.shape[-1]
    part = head_dim // 2
    inv = 1.0 / theta ** (np.arange(0, part, 2) / part)
    out = []
    for i, pos in enumerate((cols, rows)):
        emb = np.concatenate([pos[:, None] * inv] * 2, -1)[:, None]  # (N, 1, part)
        xp = x[..., i * part : (i + 1) * part]
        rot = np.concatenate([-xp[..., part // 2 :], xp[..., : part // 2]], -1)
        out.append(xp * np.cos(emb) + rot * np.sin(emb))
    return np.concatenate(out, -1)


def test_split_rotary_is_gemma4s():
    x = _x(2, 6, 3, 8)
    cols, rows = np.tile(np.arange(3.0), 2), np.repeat(np.arange(2.0), 3)
    cos, sin = split_rotary_table([cols, rows], 8)
    np.testing.assert_allclose(
        to_numpy(apply_split_rotary(x, cos, sin)), _np_split_rotary(x, cols, rows), atol=1e-5
    )
    with pytest.raises(ValueError, match="head_dim must be a positive multiple of 4"):
        split_rotary_table([cols, rows], 6)


def test_normed_attention():
    run_layer_test(
        NormedSelfAttention,
        {"num_heads": 2, "head_dim": 8, "num_key_value_heads": 1},
        input_shape=(2, 5, D),
        expected_num_trainable_weights=6,
    )
    layer = NormedSelfAttention(num_heads=2, head_dim=8)
    x = _x(1, 4, D)
    layer.build(x.shape)
    k = {n: to_numpy(getattr(layer, n).kernel) for n in ("query", "key", "value", "out")}
    q, kk, v = (_rms((x @ k[n]).reshape(1, 4, 2, 8)) for n in ("query", "key", "value"))
    logits = np.einsum("bqhd,bkhd->bhqk", q, kk)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    expected = np.einsum("bhqk,bkhd->bqhd", w, v).reshape(1, 4, D) @ k["out"]
    np.testing.assert_allclose(to_numpy(layer(x)), expected, atol=1e-5)
    with pytest.raises(ValueError, match="num_key_value_heads must divide num_heads"):
        NormedSelfAttention(num_heads=3, head_dim=8, num_key_value_heads=2)


def test_sandwich_block():
    layer = run_layer_test(
        SandwichNormBlock,
        {"num_heads": 2, "head_dim": 8, "mlp_dim": 24, "clip": True},
        input_shape=(2, 5, D),
        expected_num_trainable_weights=13,
        expected_num_non_trainable_weights=28,
    )
    x = _x(1, 5, D)
    norms = layer.norms
    attention = to_numpy(layer.attention(to_numpy(norms[0](x))))
    h = x + to_numpy(norms[1](attention))
    expected = h + to_numpy(norms[3](layer.mlp(norms[2](h))))
    np.testing.assert_allclose(to_numpy(layer(x)), expected, atol=1e-5)
    with pytest.raises(ValueError, match="mlp_dim must be a positive integer"):
        SandwichNormBlock(num_heads=2, head_dim=8, mlp_dim=0)


def test_table_patch_embedding():
    run_layer_test(
        TablePatchEmbedding,
        {"hidden_dim": 8, "patch_size": 4, "table_size": 6},
        input_shape=(2, 16, 8, 3),
        expected_output_shape=(2, 8, 8),
        expected_num_trainable_weights=2,
    )
    layer = TablePatchEmbedding(8, 4, table_size=6)
    x = _x(1, 8, 12, 3)
    layer.build(x.shape)
    kernel, table = to_numpy(layer.kernel), to_numpy(layer.position_table)
    patches = x.reshape(1, 2, 4, 3, 4, 3).transpose(0, 1, 3, 5, 2, 4).reshape(1, 6, 48)
    rows, cols = np.repeat(np.arange(2), 3), np.tile(np.arange(3), 2)
    expected = patches @ kernel + table[0][cols] + table[1][rows]
    np.testing.assert_allclose(to_numpy(layer(x)), expected, atol=1e-5)
    with pytest.raises(ValueError, match="needs table_size >= 3"):
        TablePatchEmbedding(8, 4, table_size=2).build((1, 8, 12, 3))


def test_grid_cell_pooling():
    layer = GridCellPooling(2, scale_by_root_width=False)
    check_config_complete(layer)
    assert GridCellPooling.from_config(layer.get_config()).get_config() == layer.get_config()
    assert layer.compute_output_shape((2, 24, D), grid_size=(4, 6)) == (2, 6, D)
    x = _x(1, 24, D)
    cells = x.reshape(1, 2, 2, 3, 2, D).mean(axis=(2, 4)).reshape(1, 6, D) * np.sqrt(D)
    np.testing.assert_allclose(to_numpy(GridCellPooling(2)(x, grid_size=(4, 6))), cells, atol=1e-5)
    with pytest.raises(ValueError, match="multiples of kernel_size=4"):
        GridCellPooling(4)(x, grid_size=(4, 6))


def test_feature_standardization():
    run_layer_test(
        FeatureStandardization,
        {},
        input_shape=(2, 3, D),
        expected_num_trainable_weights=0,
        expected_num_non_trainable_weights=2,
        run_training_check=False,
    )
    layer = FeatureStandardization()
    x = _x(2, D)
    layer.build(x.shape)
    layer.bias.assign(np.full(D, 0.5, "float32"))
    layer.scale.assign(np.full(D, 2.0, "float32"))
    np.testing.assert_allclose(to_numpy(layer(x)), (x - 0.5) * 2.0, atol=1e-6)
