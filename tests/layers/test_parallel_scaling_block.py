"""Tests for keras_vit/layers/parallel_scaling_block.py and differential_attention.py."""

import math

import numpy as np
import pytest

from keras_vit.layers import DifferentialAttention, ParallelScalingBlock
from tests.helpers import np_gelu, np_layer_norm, np_softmax, randomize_weights, to_numpy
from tests.layer_harness import run_layer_test

B, T, D, HEADS, M = 2, 5, 16, 2, 24


def _n(variable):
    return to_numpy(variable).astype("float64")


def _np_norm(x, layer, eps):
    if hasattr(layer, "gamma"):  # LayerNorm
        return np_layer_norm(x, _n(layer.gamma), _n(layer.beta), eps)
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * _n(layer.scale)


def _np_attention(q, k, v):
    """Softmax attention of (B, T, heads, d) heads."""
    w = np_softmax(np.einsum("bqhd,bkhd->bhqk", q / math.sqrt(q.shape[-1]), k))
    return np.einsum("bhqk,bkhd->bqhd", w, v)


def _np_differential(q, k, v, layer):
    """timm's DiffAttention on (B, T, 2H, d) queries / keys and (B, T, H, 2d) values."""
    q1, k1, q2, k2 = (_n(w) for w in layer.lambdas)
    init = 0.8 - 0.6 * math.exp(-0.3 * layer.block_index)
    lam = math.exp((q1 * k1).sum()) - math.exp((q2 * k2).sum()) + init
    w = np_softmax(np.einsum("bqhd,bkhd->bhqk", q / math.sqrt(q.shape[-1]), k))
    out = np.einsum("bhqk,bkhd->bqhd", w[:, 0::2] - lam * w[:, 1::2], v)
    return _np_norm(out, layer.sub_norm, 1e-5) * (1 - init)


def _np_block(x, block):
    eps, heads, m = block.layer_norm_epsilon, block.num_heads, block.mlp_dim
    y = _np_norm(x, block.in_norm, eps) @ _n(block.in_proj.kernel) + _n(block.in_proj.bias)
    hidden, q, k, v = y[..., :m], *np.split(y[..., m:], 3, axis=-1)
    qk_heads = 2 * heads if block.attention_type == "differential" else heads
    q, k = (t.reshape(B, T, qk_heads, -1) for t in (q, k))
    v = v.reshape(B, T, heads, -1)
    if block.qk_norm:
        q, k = _np_norm(q, block.query_norm, eps), _np_norm(k, block.key_norm, eps)
    if block.attention_type == "differential":
        attended = _np_differential(q, k, v, block)
    else:
        attended = _np_attention(q, k, v)
    attended, hidden = attended.reshape(B, T, D), np_gelu(hidden, block.approximate_gelu)
    if block.fused_output:
        both = np.concatenate([attended, hidden], -1)
        out = both @ _n(block.out_proj.kernel) + _n(block.out_proj.bias)
    else:
        out = attended @ _n(block.attention_out.kernel) + _n(block.attention_out.bias)
        out = out + hidden @ _n(block.mlp_out.kernel) + _n(block.mlp_out.bias)
    if block.layer_scale_init_value is not None:
        out = out * _n(block.layer_scale)
    return x + out


BLOCKS = {  # id: (kwargs, trainable weights)
    "xp": (dict(norm="rmsnorm", qk_norm=True, approximate_gelu=False), 9),
    "pwee": (dict(layer_scale_init_value=1e-5), 8),
    "dpwee": (dict(attention_type="differential", fused_output=True, block_index=3,
                   layer_scale_init_value=0.1, qk_norm=True), 16),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BLOCKS))
def test_block_matches_numpy(case):
    kwargs, _ = BLOCKS[case]
    block = ParallelScalingBlock(HEADS, M, **kwargs)
    block.build((None, T, D))
    randomize_weights(block, seed=len(case))
    x = np.random.default_rng(1).normal(size=(B, T, D))
    out, scores = block(x.astype("float32"), return_attention_scores=True)
    np.testing.assert_allclose(to_numpy(out), _np_block(x, block), rtol=1e-4, atol=1e-5)
    assert tuple(scores.shape) == (B, HEADS, T, T)


@pytest.mark.slow  # the harness's fit and mixed precision: about 30 s on JAX on a loaded CPU
@pytest.mark.parametrize("case", ["dpwee"])
def test_block_layer(case):
    kwargs, num_weights = BLOCKS[case]
    run_layer_test(
        ParallelScalingBlock,
        dict(num_heads=HEADS, mlp_dim=M, dropout_rate=0.1, drop_path_rate=0.1, **kwargs),
        input_shape=(B, T, D),
        expected_output_shape=(B, T, D),
        expected_num_trainable_weights=num_weights,
    )


def test_differential_attention_matches_numpy():
    layer = DifferentialAttention(HEADS, block_index=2)
    layer.build((None, T, D))
    randomize_weights(layer, seed=4)
    x = np.random.default_rng(2).normal(size=(B, T, D))
    q = np.einsum("btc,chd->bthd", x, _n(layer.query_dense.kernel)) + _n(layer.query_dense.bias)
    k = np.einsum("btc,chd->bthd", x, _n(layer.key_dense.kernel)) + _n(layer.key_dense.bias)
    v = np.einsum("btc,chd->bthd", x, _n(layer.value_dense.kernel)) + _n(layer.value_dense.bias)
    heads = _np_differential(q, k, v, layer)
    expected = np.einsum("bthd,hde->bte", heads, _n(layer.output_dense.kernel))
    expected += _n(layer.output_dense.bias)
    out, maps = layer(x.astype("float32"), return_attention_scores=True)
    np.testing.assert_allclose(to_numpy(out), expected, rtol=1e-4, atol=1e-5)
    assert tuple(maps.shape) == (B, HEADS, T, T)


def test_differential_attention_layer():
    run_layer_test(
        DifferentialAttention,
        dict(num_heads=HEADS, attention_dropout_rate=0.1, qk_norm=True, block_index=1),
        input_shape=(B, T, D),
        expected_output_shape=(B, T, D),
        expected_num_trainable_weights=17,  # 4 projections x 2, 2 QK norms x 2, sub_norm, 4
        run_training_check=False,  # the block's test trains the same function
        run_mixed_precision_check=False,
    )


def test_masked_keys_get_no_weight():
    """A NaFlex key mask: the outputs of valid tokens do not depend on masked ones."""
    block = ParallelScalingBlock(HEADS, M, attention_type="differential", fused_output=True)
    x = np.random.default_rng(3).normal(size=(1, T, D)).astype("float32")
    valid = np.array([[True, True, True, False, False]])
    changed = x.copy()
    changed[:, 3:] += 5.0
    first, second = (to_numpy(block(t, attention_mask=valid)) for t in (x, changed))
    np.testing.assert_allclose(first[:, :3], second[:, :3], rtol=1e-5, atol=1e-6)


def test_bad_arguments():
    with pytest.raises(ValueError, match="attention_type must be one of"):
        ParallelScalingBlock(HEADS, M, attention_type="linear")
    with pytest.raises(ValueError, match="2 \\* num_heads to divide hidden_dim"):
        DifferentialAttention(2)(np.zeros((1, T, 6), "float32"))
    with pytest.raises(ValueError, match="no rotary embedding or attention bias"):
        bias = np.zeros((1, HEADS, T, T), "float32")
        ParallelScalingBlock(HEADS, M)(np.zeros((1, T, D), "float32"), attention_bias=bias)
