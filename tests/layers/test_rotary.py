"""Tests for keras_vit/layers/rotary.py and the rotary / q-v-bias options of the attention."""

import keras
import numpy as np
import pytest

from keras_vit.layers import (
    MultiHeadSelfAttention,
    RotaryEmbedding2D,
    apply_rotary_embedding,
    dinov3_rotary_embedding_2d,
    rotary_embedding_2d,
)
from keras_vit.layers.attention import portable_path
from tests.helpers import check_config_complete, np_softmax, to_numpy
from tests.weights.references import import_timm, import_torch


def np_rotary(grid, head_dim, temperature=10000.0, reference=None, offset=0.0, xy=False):
    """EVA-02's RoPE (RoPE-ViT's axial one with `xy`: columns first) per token and frequency."""
    bands = head_dim // 4
    freqs = [temperature ** (-i / bands) for i in range(bands)]
    rows, cols = grid
    sin, cos = [], []
    for r in range(rows):
        for c in range(cols):
            y, x = r + offset, c + offset
            if reference is not None:
                y, x = y / rows * reference[0], x / cols * reference[1]
            first, second = (x, y) if xy else (y, x)
            angles = [first * f for f in freqs] + [second * f for f in freqs]
            pairs = np.repeat(np.array(angles), 2)
            sin.append(np.sin(pairs))
            cos.append(np.cos(pairs))
    return np.array(sin), np.array(cos)


def np_dinov3_rotary(grid, head_dim, temperature=100.0, normalize="separate", offset=0.0):
    """DINOv3's RoPE (eval) per token: centres in [-1, 1], angles 2 pi c / period, interleaved."""
    bands = head_dim // 4
    periods = [temperature ** (i / bands) for i in range(bands)]
    rows, cols = grid
    denominator = {"separate": grid, "min": (min(grid),) * 2, "max": (max(grid),) * 2}[normalize]
    sin, cos = [], []
    for r in range(rows):
        for c in range(cols):
            y = 2 * (r + 0.5 + offset) / denominator[0] - 1
            x = 2 * (c + 0.5 + offset) / denominator[1] - 1
            angles = [2 * np.pi * y / p for p in periods] + [2 * np.pi * x / p for p in periods]
            pairs = np.repeat(np.array(angles), 2)
            sin.append(np.sin(pairs))
            cos.append(np.cos(pairs))
    return np.array(sin), np.array(cos)


@pytest.mark.parametrize(
    "grid,normalize,offset", [((3, 5), "separate", 0.0), ((4, 2), "min", 0.5), ((2, 3), "max", 0.0)]
)
def test_dinov3_embedding_matches_numpy(grid, normalize, offset):
    sin, cos = np_dinov3_rotary(grid, 8, 100.0, normalize, offset)
    got = to_numpy(dinov3_rotary_embedding_2d(grid, 8, 100.0, normalize, offset))
    np.testing.assert_allclose(got, np.concatenate([sin, cos], -1), atol=2e-6)
    layer = RotaryEmbedding2D(8, 100.0, grid_offset=offset, patch_size=2, kind="dinov3",
                              normalize_coords=normalize)  # fmt: skip
    check_config_complete(layer)
    images = np.zeros((1, 2 * grid[0], 2 * grid[1], 3), "float32")
    np.testing.assert_allclose(to_numpy(layer(images)), got)


def np_rotate(x, sin, cos):
    rotated = np.empty_like(x)
    rotated[..., 0::2] = -x[..., 1::2]
    rotated[..., 1::2] = x[..., 0::2]
    return x * cos + rotated * sin


@pytest.mark.parametrize(
    "grid,head_dim,reference,offset",
    [((3, 4), 8, None, 0.0), ((5, 2), 16, (16, 16), 0.0), ((2, 2), 12, (4, 3), 0.5)],
)
def test_embedding_matches_numpy(grid, head_dim, reference, offset):
    sin, cos = np_rotary(grid, head_dim, 100.0, reference, offset)
    got = to_numpy(rotary_embedding_2d(grid, head_dim, 100.0, reference, offset))
    np.testing.assert_allclose(got, np.concatenate([sin, cos], -1), atol=1e-6)
    x = np.random.default_rng(0).normal(size=(2, 3, grid[0] * grid[1], head_dim))
    got = to_numpy(apply_rotary_embedding(x.astype("float32"), got))
    np.testing.assert_allclose(got, np_rotate(x, sin, cos), atol=1e-5)


@pytest.mark.parametrize("reference", [None, (16, 16)])
def test_embedding_matches_timm(reference):
    torch = import_torch()
    import_timm()
    from timm.layers.pos_embed_sincos import RotaryEmbeddingCat, apply_rot_embed_cat

    grid = (3, 5)
    rope = RotaryEmbeddingCat(
        dim=16, in_pixels=False, feat_shape=list(grid), ref_feat_shape=reference
    )
    expected = rope.get_embed().numpy()
    got = to_numpy(RotaryEmbedding2D(16, reference_grid_size=reference)(np.zeros((1, *grid, 8))))
    np.testing.assert_allclose(got, expected, atol=1e-6)
    x = np.random.default_rng(1).normal(size=(2, 2, 15, 16)).astype("float32")
    want = apply_rot_embed_cat(torch.from_numpy(x), torch.from_numpy(expected)).numpy()
    np.testing.assert_allclose(to_numpy(apply_rotary_embedding(x, got)), want, atol=1e-5)


@pytest.mark.parametrize("grid,reference,offset", [((3, 5), None, 0.0), ((4, 2), (7, 9), 1.0)])
def test_axial_xy_matches_numpy_and_timm(grid, reference, offset):
    """RoPE-ViT's axial RoPE: timm's RotaryEmbeddingCat(grid_indexing='xy', temperature=100)."""
    torch = import_torch()
    import_timm()
    from timm.layers.pos_embed_sincos import RotaryEmbeddingCat

    del torch
    sin, cos = np_rotary(grid, 16, 100.0, reference, offset, xy=True)
    layer = RotaryEmbedding2D(16, 100.0, reference, offset, grid_indexing="xy")
    got = to_numpy(layer(np.zeros((1, *grid, 8), "float32")))
    np.testing.assert_allclose(got, np.concatenate([sin, cos], -1), atol=1e-5)
    rope = RotaryEmbeddingCat(
        dim=16,
        temperature=100.0,
        in_pixels=False,
        feat_shape=list(grid),
        ref_feat_shape=reference,
        grid_offset=offset,
        grid_indexing="xy",
    )
    np.testing.assert_allclose(got, rope.get_embed().numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="grid_indexing must be one of"):
        RotaryEmbedding2D(16, grid_indexing="yx")


def test_layer_config_and_shapes():
    layer = RotaryEmbedding2D(8, temperature=100.0, reference_grid_size=4, grid_offset=0.5)
    check_config_complete(layer)
    clone = RotaryEmbedding2D.from_config(layer.get_config())
    assert clone.reference_grid_size == (4, 4)
    x = np.zeros((2, 3, 5, 4), "float32")
    np.testing.assert_allclose(to_numpy(clone(x)), to_numpy(layer(x)))
    assert layer.compute_output_shape((None, 3, 5, 4)) == (15, 16)
    assert layer.compute_output_shape((None, None, None, 4)) == (None, 16)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(head_dim=6), "divisible by 4"),
        (dict(head_dim=8, temperature=0), "temperature must be positive"),
        (dict(head_dim=8, reference_grid_size=0), "reference_grid_size"),
        (dict(head_dim=8, grid_offset="a"), "grid_offset must be a float"),
        (dict(head_dim=8, kind="axial"), "kind must be one of"),
        (dict(head_dim=8, kind="dinov3", normalize_coords="mean"), "normalize_coords must be"),
        (dict(head_dim=8, normalize_coords="min"), "needs kind='dinov3'"),
        (dict(head_dim=8, kind="dinov3", reference_grid_size=4), "no reference_grid_size"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RotaryEmbedding2D(**kwargs)


def test_layer_needs_a_feature_map():
    with pytest.raises(ValueError, match="height, width, channels"):
        RotaryEmbedding2D(8)(np.zeros((1, 4, 8), "float32"))


# --- the attention with q/v-only biases and RoPE ---

D, HEADS, GRID = 32, 2, (2, 3)


def _attention(key_bias=False, seed=0):
    layer = MultiHeadSelfAttention(HEADS, key_bias=key_bias)
    layer.build((None, 1 + GRID[0] * GRID[1], D))
    rng = np.random.default_rng(seed)
    for w in layer.weights:
        w.assign(rng.normal(0, 0.3, size=tuple(w.shape)).astype("float32"))
    return layer


def _np_attention(layer, x, sin, cos):
    n = lambda v: to_numpy(v).astype("float64")  # noqa: E731
    heads, hd = HEADS, D // HEADS
    q = np.einsum("btd,dhk->bthk", x, n(layer.query_dense.kernel)) + n(layer.query_dense.bias)
    k = np.einsum("btd,dhk->bthk", x, n(layer.key_dense.kernel))
    if layer.key_bias:
        k = k + n(layer.key_dense.bias)
    v = np.einsum("btd,dhk->bthk", x, n(layer.value_dense.kernel)) + n(layer.value_dense.bias)
    for t in (q, k):  # rotate the patches, not the class token
        t[:, 1:] = np_rotate(t[:, 1:], sin[:, None], cos[:, None])
    weights = np_softmax(np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(hd), -1)
    out = np.einsum("bhqk,bkhd->bqhd", weights, v)
    assert heads * hd == D
    return np.einsum("bqhd,hde->bqe", out, n(layer.output_dense.kernel)) + n(
        layer.output_dense.bias
    )


def _tokens(seed=2):
    return np.random.default_rng(seed).normal(size=(2, 1 + GRID[0] * GRID[1], D))


def test_attention_key_bias_off():
    layer = MultiHeadSelfAttention(HEADS, key_bias=False)
    layer.build((None, 4, D))
    assert layer.key_dense.bias is None and layer.query_dense.bias is not None
    assert len(layer.weights) == 7
    check_config_complete(layer)
    assert MultiHeadSelfAttention.from_config(layer.get_config()).key_bias is False


@pytest.mark.parametrize("key_bias", [False, True])
def test_attention_with_rope_matches_numpy(key_bias):
    layer = _attention(key_bias)
    x = _tokens()
    sin, cos = np_rotary(GRID, D // HEADS)
    embedding = rotary_embedding_2d(GRID, D // HEADS)
    want = _np_attention(layer, x, sin, cos)
    got = layer(x.astype("float32"), rotary_embedding=embedding)
    np.testing.assert_allclose(to_numpy(got), want, atol=1e-4)
    out, scores = layer(
        x.astype("float32"), rotary_embedding=embedding, return_attention_scores=True
    )
    np.testing.assert_allclose(to_numpy(out), want, atol=1e-4)
    assert tuple(scores.shape) == (2, HEADS, x.shape[1], x.shape[1])


def test_attention_rejects_wrong_rope_width():
    layer = _attention()
    with pytest.raises(ValueError, match="2 \\* head_dim"):
        layer(_tokens().astype("float32"), rotary_embedding=rotary_embedding_2d(GRID, 8))


def test_attention_matches_timm_eva_attention():
    torch = import_torch()
    import_timm()
    from timm.layers.pos_embed_sincos import RotaryEmbeddingCat
    from timm.models.eva import EvaAttention

    for fused in (False, True):
        ref = EvaAttention(
            D, num_heads=HEADS, qkv_fused=fused, num_prefix_tokens=1, scale_norm=False
        ).eval()
        layer = MultiHeadSelfAttention(HEADS, key_bias=False)
        layer.build((None, 7, D))
        rng = np.random.default_rng(3)
        with torch.no_grad():
            for p in ref.parameters():
                p.copy_(torch.from_numpy(rng.normal(0, 0.3, size=tuple(p.shape))))
            if fused:
                q, k, v = ref.qkv.weight.numpy().reshape(3, D, D)
                qb, vb = ref.q_bias.numpy(), ref.v_bias.numpy()
            else:
                q, k, v = (m.weight.numpy() for m in (ref.q_proj, ref.k_proj, ref.v_proj))
                qb, vb = ref.q_proj.bias.numpy(), ref.v_proj.bias.numpy()
        shape = (D, HEADS, D // HEADS)
        layer.query_dense.kernel.assign(q.T.reshape(shape))
        layer.query_dense.bias.assign(qb.reshape(shape[1:]))
        layer.key_dense.kernel.assign(k.T.reshape(shape))
        layer.value_dense.kernel.assign(v.T.reshape(shape))
        layer.value_dense.bias.assign(vb.reshape(shape[1:]))
        layer.output_dense.kernel.assign(ref.proj.weight.detach().numpy().T.reshape(HEADS, -1, D))
        layer.output_dense.bias.assign(ref.proj.bias.detach().numpy())
        rope = RotaryEmbeddingCat(
            dim=D // HEADS, in_pixels=False, feat_shape=list(GRID), ref_feat_shape=[16, 16]
        )
        x = _tokens(4).astype("float32")
        with torch.no_grad():
            want = ref(torch.from_numpy(x), rope=rope.get_embed()).numpy()
        embedding = RotaryEmbedding2D(D // HEADS, reference_grid_size=16)(
            np.zeros((1, *GRID, D), "float32")
        )
        got = to_numpy(layer(x, rotary_embedding=embedding))
        np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="the PyTorch fast path")
def test_attention_without_key_bias_fast_path_equals_portable():
    layer = _attention(False)
    x = _tokens().astype("float32")
    with portable_path(False):
        fast = to_numpy(layer(x))
    with portable_path():
        portable = to_numpy(layer(x))
    np.testing.assert_allclose(fast, portable, atol=1e-6)
