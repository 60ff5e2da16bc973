"""Tests for keras_vit/layers/relative_position.py and the attention bias of the attention/block."""

import keras
import numpy as np
import pytest

from keras_vit.layers import (
    MultiHeadSelfAttention,
    RelativePositionBias,
    RelativePositionMLP,
    TransformerBlock,
    relative_position_index,
    resize_relative_position_table,
)
from keras_vit.layers.attention import portable_path
from tests.helpers import (
    block_params,
    check_config_complete,
    np_block,
    np_layer_norm,
    np_parallel_block,
    np_relative_position_index,
    np_relative_position_mlp,
    np_softmax,
    roundtrip_layer,
    to_numpy,
)
from tests.layer_harness import run_layer_test
from tests.weights.references import import_timm, import_torch


def np_index(grid):
    return np_relative_position_index(grid)


@pytest.mark.parametrize("grid", [(2, 3), (3, 3), (1, 4)])
def test_index_matches_numpy(grid):
    index = np_index(grid)
    np.testing.assert_array_equal(relative_position_index(grid), index)
    # Without a class token: the patch block alone.
    np.testing.assert_array_equal(relative_position_index(grid, False), index[1:, 1:])


def _random_table(layer, seed=0):
    table = np.random.default_rng(seed).normal(size=layer.relative_position_bias_table.shape)
    layer.relative_position_bias_table.assign(table.astype("float32"))
    return table


def test_layer_matches_numpy_and_round_trips(tmp_path):
    # Not run_layer_test: the output has no batch axis (one bias for every image).
    layer = RelativePositionBias(num_heads=3, grid_size=(2, 3))
    layer.build((2, 7, 8))
    assert layer.count_params() == (3 * 5 + 3) * 3
    check_config_complete(layer)
    table = _random_table(layer)
    x = np.zeros((1, 7, 8), "float32")
    symbolic = layer(keras.Input((7, 8)))
    assert tuple(symbolic.shape) == layer.compute_output_shape((None, 7, 8)) == (1, 3, 7, 7)
    roundtrip_layer(layer, x, tmp_path)
    expected = np.transpose(table[np_index((2, 3))], (2, 0, 1))[None]
    np.testing.assert_allclose(to_numpy(layer(np.zeros((1, 7, 8), "float32"))), expected,
                               rtol=1e-6)  # fmt: skip
    with pytest.raises(ValueError, match="the bias is for 7 tokens"):
        layer(np.zeros((1, 6, 8), "float32"))


def test_matches_timm_index_bias_and_resize():
    torch = import_torch()
    import_timm()
    from timm.layers import resize_rel_pos_bias_table
    from timm.models.beit import RelativePositionBias as TimmBias
    from timm.models.beit import gen_relative_position_index

    for grid in ((2, 3), (4, 4)):
        np.testing.assert_array_equal(relative_position_index(grid),
                                      gen_relative_position_index(grid).numpy())  # fmt: skip
    layer = RelativePositionBias(num_heads=2, grid_size=(3, 2))
    layer.build()
    table = _random_table(layer, seed=1)
    theirs = TimmBias((3, 2), num_heads=2)
    with torch.no_grad():
        theirs.relative_position_bias_table.copy_(torch.from_numpy(table))
        expected = theirs().numpy()
    np.testing.assert_allclose(to_numpy(layer(None))[0], expected, rtol=1e-6)
    # A checkpoint's square table for another grid, and a known non-square source grid.
    rng = np.random.default_rng(2)
    for old, new, known in (((2, 2), (3, 3), None), ((3, 3), (2, 4), None),
                            ((4, 4), (5, 6), None), ((2, 3), (4, 3), (2, 3))):  # fmt: skip
        old_table = rng.normal(size=((2 * old[0] - 1) * (2 * old[1] - 1) + 3, 2))
        old_table = old_table.astype("float32")
        shape = ((2 * new[0] - 1) * (2 * new[1] - 1) + 3, 2)
        want = resize_rel_pos_bias_table(torch.from_numpy(old_table), new, shape,
                                         old_window_size=known).numpy()  # fmt: skip
        got = resize_relative_position_table(old_table, new, known)
        assert got.shape == shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_resize_refuses_a_table_of_no_grid():
    with pytest.raises(ValueError, match="Cannot tell the grid"):
        resize_relative_position_table(np.zeros((13, 2)), (3, 3))


def _np_attention(x, p, bias):
    q = np.einsum("btd,dhk->bthk", x, p["query/kernel"]) + p["query/bias"]
    k = np.einsum("btd,dhk->bthk", x, p["key/kernel"])
    v = np.einsum("btd,dhk->bthk", x, p["value/kernel"]) + p["value/bias"]
    logits = np.einsum("bqhk,bshk->bhqs", q, k) / np.sqrt(q.shape[-1]) + bias
    out = np.einsum("bhqs,bshk->bqhk", np_softmax(logits), v)
    return np.einsum("bqhk,hkd->bqd", out, p["out/kernel"]) + p["out/bias"]


def _randomize(layer, seed=0):
    rng = np.random.default_rng(seed)
    for w in layer.weights:
        w.assign(rng.normal(0, 0.3, size=tuple(w.shape)).astype("float32"))


def test_attention_bias_matches_numpy_and_scores():
    x = np.random.default_rng(3).normal(size=(2, 5, 8)).astype("float32")
    bias = np.random.default_rng(4).normal(size=(1, 2, 5, 5)).astype("float32")
    layer = MultiHeadSelfAttention(num_heads=2, key_bias=False)
    layer.build(x.shape)
    _randomize(layer)
    p = {f"{n}/kernel": to_numpy(d.kernel) for n, d in (("query", layer.query_dense),
         ("key", layer.key_dense), ("value", layer.value_dense), ("out", layer.output_dense))}
    p.update({"query/bias": to_numpy(layer.query_dense.bias),
              "value/bias": to_numpy(layer.value_dense.bias),
              "out/bias": to_numpy(layer.output_dense.bias)})  # fmt: skip
    expected = _np_attention(x.astype("float64"), p, bias)
    np.testing.assert_allclose(to_numpy(layer(x, attention_bias=bias)), expected,
                               rtol=1e-5, atol=1e-5)  # fmt: skip
    out, scores = layer(x, attention_bias=bias, return_attention_scores=True)
    np.testing.assert_allclose(to_numpy(out), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(to_numpy(scores).sum(-1), 1.0, rtol=1e-5)


@pytest.fixture(scope="module")
def block_and_input():
    x = np.random.default_rng(5).normal(size=(2, 7, 16)).astype("float32")
    block = TransformerBlock(num_heads=2, mlp_dim=32, relative_position_grid=(2, 3),
                             layer_scale_init_value=0.5, key_bias=False)  # fmt: skip
    block.build(x.shape)
    _randomize(block, seed=6)
    return block, x


def test_block_with_relative_position_bias_matches_numpy(block_and_input):
    block, x = block_and_input
    shared = np.random.default_rng(7).normal(size=(1, 2, 7, 7)).astype("float32")
    p = {k: np.asarray(v, "float64") for k, v in block_params(block).items()}
    table = to_numpy(block.relative_position_bias.relative_position_bias_table)
    own = np.transpose(table[np_index((2, 3))], (2, 0, 1))[None]
    h = np_layer_norm(x.astype("float64"), p["ln0/scale"], p["ln0/bias"])
    y = x + _np_attention(h, p, own + shared) * p["ls1"]
    # The MLP half is np_block's (the attention half replaced by the biased one).
    no_attention = dict(p, **{"out/kernel": 0 * p["out/kernel"], "out/bias": 0 * p["out/bias"]})
    expected, _ = np_block(y, no_attention, approximate_gelu=True)
    with portable_path():
        got = to_numpy(block(x, attention_bias=shared))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    # The fast path (PyTorch: attn_mask of F.scaled_dot_product_attention) is the same.
    with portable_path(False):
        fast = to_numpy(block(x, attention_bias=shared))
    np.testing.assert_allclose(fast, got, rtol=1e-5, atol=1e-6)


def test_block_layer_contract():
    run_layer_test(
        TransformerBlock,
        dict(num_heads=2, mlp_dim=16, relative_position_grid=(2, 2)),
        input_shape=(2, 5, 8),
        expected_output_shape=(2, 5, 8),
        run_mixed_precision_check=True,
    )
    with pytest.raises(ValueError, match="relative_position_grid"):
        TransformerBlock(num_heads=2, mlp_dim=16, relative_position_grid=(2, 0))


def test_block_remat_keeps_the_bias(block_and_input):
    block, x = block_and_input
    shared = np.full((1, 2, 7, 7), 0.3, "float32")
    config = dict(block.get_config(), remat=True)
    again = TransformerBlock.from_config(config)
    again.build(x.shape)
    again.set_weights(block.get_weights())
    np.testing.assert_allclose(to_numpy(again(x, attention_bias=shared)),
                               to_numpy(block(x, attention_bias=shared)),
                               rtol=1e-5, atol=1e-6)  # fmt: skip
    assert keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(again))


def test_mlp_matches_numpy_timm_and_round_trips(tmp_path):
    torch = import_torch()
    import_timm()
    from timm.layers.pos_embed_rel import RelPosMlp

    layer = RelativePositionMLP(num_heads=2, grid_size=(2, 3), hidden_dim=8, num_prefix_tokens=1)
    x = np.zeros((1, 7, 4), "float32")
    layer.build(x.shape)
    check_config_complete(layer)
    _randomize(layer, seed=8)
    got = to_numpy(layer(x))
    np.testing.assert_allclose(got, np_relative_position_mlp(layer, (2, 3), 1), rtol=1e-5,
                               atol=1e-6)  # fmt: skip
    theirs = RelPosMlp((2, 3), num_heads=2, hidden_dim=8, prefix_tokens=1).eval()
    with torch.no_grad():
        for name, dense in (("fc1", layer.fc1), ("fc2", layer.fc2)):
            fc = getattr(theirs.mlp, name)
            fc.weight.copy_(torch.from_numpy(to_numpy(dense.kernel).T.copy()))
            fc.bias.copy_(torch.from_numpy(to_numpy(dense.bias)))
        expected = theirs.get_bias().numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    roundtrip_layer(layer, x, tmp_path)
    with pytest.raises(ValueError, match="num_prefix_tokens must be"):
        RelativePositionMLP(num_heads=2, grid_size=2, num_prefix_tokens=-1)


def test_block_with_relative_position_mlp():
    x = np.random.default_rng(9).normal(size=(2, 5, 8)).astype("float32")
    block = TransformerBlock(num_heads=2, mlp_dim=16, relative_position_grid=(2, 2),
                             relative_position_mlp_dim=8)  # fmt: skip
    block.build(x.shape)
    _randomize(block, seed=10)
    assert block.relative_position_bias.num_prefix_tokens == 1
    with portable_path():
        portable = to_numpy(block(x))
    with portable_path(False):
        np.testing.assert_allclose(to_numpy(block(x)), portable, rtol=1e-5, atol=1e-6)
    p = {k: np.asarray(v, "float64") for k, v in block_params(block).items()}
    p["attention_bias"] = np_relative_position_mlp(block.relative_position_bias, (2, 2), 1)
    expected, _ = np_block(x.astype("float64"), p)
    np.testing.assert_allclose(portable, expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="needs relative_position_grid"):
        TransformerBlock(num_heads=2, mlp_dim=16, relative_position_mlp_dim=8)


def test_parallel_block_matches_numpy_and_round_trips(tmp_path):
    """timm's ParallelThingsBlock: x + sum_j MSA_j(LN_j(x)), then + sum_j MLP_j(LN_j(x))."""
    x = np.random.default_rng(11).normal(size=(2, 5, 8)).astype("float32")
    block = TransformerBlock(num_heads=2, mlp_dim=16, num_parallel=3, layer_scale_init_value=0.5,
                             approximate_gelu=False)  # fmt: skip
    block.build(x.shape)
    _randomize(block, seed=12)
    assert len(block.trainable_weights) == 3 * 18  # 16 per branch and 2 scales
    expected = np_parallel_block(x.astype("float64"), block, approximate_gelu=False)
    np.testing.assert_allclose(to_numpy(block(x)), expected, rtol=1e-5, atol=1e-5)
    # Not the plain block of branch 0 alone: the other branches count.
    single = np_block(x.astype("float64"), block_params(block), approximate_gelu=False)[0]
    assert np.abs(single - expected).max() > 1e-2
    roundtrip_layer(block, x, tmp_path)
    with pytest.raises(ValueError, match="no attention scores"):
        block(x, return_attention_scores=True)
    with pytest.raises(ValueError, match="num_parallel > 1"):
        TransformerBlock(num_heads=2, mlp_dim=16, num_parallel=2, mlp="swiglu")
