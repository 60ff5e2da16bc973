"""The generic layers of windowed attention (ViTDet, SAM): `window_partition` /
`window_unpartition`, `decomposed_relative_bias` and `linear_resize_matrix`
(decomposed_position.py), `WindowedSelfAttention`, `WindowedAttentionBlock`,
`GridPositionEmbedding`: the layer harness (config, serialization, `.keras`, weights, a
training step, mixed precision), a NumPy reference written from the papers' equations, and
their argument errors. Against timm: tests/families/sam."""

import numpy as np
import pytest

from keras_vit.layers.decomposed_position import decomposed_relative_bias, linear_resize_matrix
from keras_vit.layers.grid_position_embedding import GridPositionEmbedding, resample_grid_table
from keras_vit.layers.window_partition import window_partition, window_unpartition
from keras_vit.layers.windowed_attention import WindowedSelfAttention
from keras_vit.layers.windowed_block import WindowedAttentionBlock
from tests.helpers import np_gelu, np_layer_norm, np_softmax, to_numpy
from tests.layer_harness import run_layer_test

D, HEADS = 8, 2


def _x(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _np_table_rows(table, q, k):
    """`(q, k, C)`: the table resized to `2 max(q, k) - 1` rows by PyTorch's linear rule, then
    row `i * max(k/q, 1) - j * max(q/k, 1) + (k - 1) * max(q/k, 1)` for query i, key j."""
    length = 2 * max(q, k) - 1
    if table.shape[0] != length:
        out = np.zeros((length, table.shape[1]))
        scale = table.shape[0] / length
        for i in range(length):
            source = max((i + 0.5) * scale - 0.5, 0.0)
            low = min(int(source), table.shape[0] - 1)
            high = min(low + 1, table.shape[0] - 1)
            out[i] = (1 - (source - low)) * table[low] + (source - low) * table[high]
        table = out
    rows = np.empty((q, k, table.shape[1]))
    for i in range(q):
        for j in range(k):
            offset = i * max(k / q, 1.0) - j * max(q / k, 1.0) + (k - 1) * max(q / k, 1.0)
            rows[i, j] = table[int(offset)]
    return rows


def _np_attention(grid, layer):
    """Windowed (or global) attention of a `(B, H, W, D)` grid, from the definitions: pad with
    zeros to whole windows, attend within each, relative bias q . R_h + q . R_w, crop."""
    qkv_k, qkv_b = (to_numpy(w) for w in (layer.qkv.kernel, layer.qkv.bias))
    out_k, out_b = (to_numpy(w) for w in (layer.out.kernel, layer.out.bias))
    b, h, w, d = grid.shape
    s = layer.window_size or None
    hp, wp = (h + (-h) % s, w + (-w) % s) if s else (h, w)
    padded = np.zeros((b, hp, wp, d))
    padded[:, :h, :w] = grid
    out = np.zeros_like(padded)
    head_dim = d // layer.num_heads
    sh, sw = (s, s) if s else (h, w)
    for n in range(b):
        for r0 in range(0, hp, sh):
            for c0 in range(0, wp, sw):
                tokens = padded[n, r0 : r0 + sh, c0 : c0 + sw].reshape(sh * sw, d)
                q, k, v = np.split(tokens @ qkv_k + qkv_b, 3, axis=-1)
                heads = []
                for m in range(layer.num_heads):
                    part = slice(m * head_dim, (m + 1) * head_dim)
                    logits = q[:, part] @ k[:, part].T / np.sqrt(head_dim)
                    if layer.relative_position_size is not None:
                        rh = _np_table_rows(to_numpy(layer.relative_position_h), sh, sh)
                        rw = _np_table_rows(to_numpy(layer.relative_position_w), sw, sw)
                        qg = q[:, part].reshape(sh, sw, head_dim)
                        bias_h = np.einsum("hwc,hkc->hwk", qg, rh)
                        bias_w = np.einsum("hwc,wkc->hwk", qg, rw)
                        bias = bias_h[:, :, :, None] + bias_w[:, :, None, :]
                        logits = logits + bias.reshape(sh * sw, sh * sw)
                    heads.append(np_softmax(logits) @ v[:, part])
                mixed = np.concatenate(heads, -1) @ out_k + out_b
                out[n, r0 : r0 + sh, c0 : c0 + sw] = mixed.reshape(sh, sw, d)
    return out[:, :h, :w]


def _randomized(layer, seed=1):
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        weight.assign(rng.normal(scale=0.3, size=weight.shape).astype("float32"))
    return layer


def test_window_partition_round_trip_and_padding():
    x = _x(2, 5, 7, 3)
    windows, padded = window_partition(x, 3)
    assert padded == (6, 9) and tuple(windows.shape) == (2 * 2 * 3, 3, 3, 3)
    first = to_numpy(windows)[1]  # image 0, window row 0, column 1
    np.testing.assert_array_equal(first, x[0, 0:3, 3:6])
    corner = to_numpy(windows)[5]  # image 0, the bottom-right window: zero padding
    np.testing.assert_array_equal(corner[:2, :1], x[0, 3:5, 6:7])
    assert not corner[2:].any() and not corner[:, 1:].any()
    np.testing.assert_array_equal(to_numpy(window_unpartition(windows, 3, padded, (5, 7))), x)
    with pytest.raises(ValueError, match="window_size must be a positive integer"):
        window_partition(x, 0)


def test_linear_resize_matrix_is_pytorch_s_linear_interpolation():
    from tests.weights.references import import_torch

    torch = import_torch()
    table = _x(7, 4)
    for length in (3, 7, 11, 13):
        expected = torch.nn.functional.interpolate(
            torch.from_numpy(table.T[None]), size=length, mode="linear"
        )[0].numpy().T
        np.testing.assert_allclose(linear_resize_matrix(7, length) @ table, expected, atol=1e-6)


@pytest.mark.parametrize("q, k, rows", [(3, 3, 5), (2, 4, 7), (4, 2, 7), (3, 3, 9)])
def test_decomposed_bias_against_the_definition(q, k, rows):
    """Query and key grids of equal and unequal sizes, tables of the right and other lengths."""
    query = _x(2, q * q, HEADS, 4)
    table_h, table_w = _x(rows, 4, seed=1), _x(rows, 4, seed=2)
    bias = to_numpy(decomposed_relative_bias(query, table_h, table_w, (q, q), (k, k)))
    rh, rw = _np_table_rows(table_h, q, k), _np_table_rows(table_w, q, k)
    grid = query.reshape(2, q, q, HEADS, 4)
    expected = np.einsum("bhwnc,hkc->bnhwk", grid, rh)[..., None] + np.einsum(
        "bhwnc,wkc->bnhwk", grid, rw
    )[..., None, :]
    np.testing.assert_allclose(bias, expected.reshape(2, HEADS, q * q, k * k), atol=1e-5)


@pytest.mark.parametrize(
    "window, relative, size",
    [(3, 3, (5, 7)), (0, (5, 7), (5, 7)), (0, (3, 4), (5, 7)), (2, None, (4, 4))],
    ids=["windowed_padded", "global", "global_resized_tables", "windowed_no_relative"],
)
def test_windowed_attention_against_numpy(window, relative, size):
    layer = WindowedSelfAttention(HEADS, window_size=window, relative_position_size=relative)
    x = _x(2, *size, D)
    layer.build(x.shape)
    _randomized(layer)
    np.testing.assert_allclose(to_numpy(layer(x)), _np_attention(x, layer), atol=2e-5)


def test_windowed_attention_layer_harness():
    run_layer_test(
        WindowedSelfAttention,
        {"num_heads": HEADS, "window_size": 2, "relative_position_size": 2},
        input_shape=(2, 3, 3, D),
        expected_output_shape=(2, 3, 3, D),
        expected_num_trainable_weights=6,
    )


def test_windowed_block_against_numpy_and_harness():
    block = run_layer_test(
        WindowedAttentionBlock,
        {"num_heads": HEADS, "mlp_dim": 16, "window_size": 2, "relative_position_size": 2},
        input_shape=(2, 3, 3, D),
        expected_output_shape=(2, 3, 3, D),
        expected_num_trainable_weights=14,
    )
    _randomized(block)
    x = _x(2, 3, 3, D)

    def norm(layer, v):
        return np_layer_norm(v, to_numpy(layer.gamma), to_numpy(layer.beta), 1e-5)

    h = x + _np_attention(norm(block.attention_norm, x), block.attention)
    y = np_gelu(norm(block.mlp_norm, h) @ to_numpy(block.mlp_dense_1.kernel)
                + to_numpy(block.mlp_dense_1.bias), approximate=False)  # fmt: skip
    y = y @ to_numpy(block.mlp_dense_2.kernel) + to_numpy(block.mlp_dense_2.bias)
    np.testing.assert_allclose(to_numpy(block(x)), h + y, atol=5e-5)


def test_grid_position_embedding_and_its_resample():
    layer = run_layer_test(
        GridPositionEmbedding,
        {"grid_size": (2, 3)},
        input_shape=(2, 2, 3, D),
        expected_output_shape=(2, 2, 3, D),
        expected_num_trainable_weights=1,
    )
    x = _x(2, 2, 3, D)
    np.testing.assert_allclose(to_numpy(layer(x)), x + to_numpy(layer.table), atol=1e-6)
    table = _x(1, 2, 3, D)
    assert resample_grid_table(table, (2, 3)) is table
    assert resample_grid_table(table, (4, 5)).shape == (1, 4, 5, D)
    with pytest.raises(ValueError, match=r"expects a \(B, 2, 3, D\) grid"):
        GridPositionEmbedding((2, 3))(_x(1, 3, 3, D))


def test_arguments_are_checked_in_their_own_names():
    with pytest.raises(ValueError, match="window_size must be a non-negative int. Received: "
                                         "window_size=-1"):  # fmt: skip
        WindowedSelfAttention(HEADS, window_size=-1)
    with pytest.raises(ValueError, match="relative_position_size must be an int or a pair"):
        WindowedSelfAttention(HEADS, relative_position_size=(1, 2, 3))
    with pytest.raises(ValueError, match="num_heads must divide the width. Received: width=8, "
                                         "num_heads=3"):  # fmt: skip
        WindowedSelfAttention(3)(_x(1, 2, 2, D))
    with pytest.raises(ValueError, match=r"expects a \(B, H, W, D\) grid"):
        WindowedSelfAttention(HEADS)(_x(1, 4, D))
    with pytest.raises(ValueError, match="qkv_bias must be a bool"):
        WindowedAttentionBlock(HEADS, 16, qkv_bias="yes")
    with pytest.raises(ValueError, match="mlp_dim must be a positive integer"):
        WindowedAttentionBlock(HEADS, 0)
