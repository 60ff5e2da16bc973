import keras
import numpy as np
import pytest

from keras_vit.layers import MultiHeadSelfAttention
from keras_vit.layers.attention import portable_path
from tests.helpers import np_msa, to_numpy
from tests.layer_harness import run_layer_test

D = 16


def _tokens(b=2, t=5, d=D, seed=0):
    return np.random.default_rng(seed).normal(size=(b, t, d)).astype("float32")


def _params(layer):
    n = to_numpy
    p = {
        "query/kernel": n(layer.query_dense.kernel),
        "query/bias": n(layer.query_dense.bias),
        "key/kernel": n(layer.key_dense.kernel),
        "key/bias": n(layer.key_dense.bias),
        "value/kernel": n(layer.value_dense.kernel),
        "value/bias": n(layer.value_dense.bias),
        "out/kernel": n(layer.output_dense.kernel),
        "out/bias": n(layer.output_dense.bias),
    }
    if layer.qk_norm:
        p.update(
            {
                "query_norm/scale": n(layer.query_norm.gamma),
                "query_norm/bias": n(layer.query_norm.beta),
                "key_norm/scale": n(layer.key_norm.gamma),
                "key_norm/bias": n(layer.key_norm.beta),
            }
        )
    return {k: v.astype("float64") for k, v in p.items()}


def _randomize(layer, x):
    layer.build(x.shape)
    rng = np.random.default_rng(1)
    for w in layer.weights:
        value = rng.normal(0, 0.4, size=tuple(w.shape)).astype("float32")
        w.assign(value + (1.0 if w.path.endswith("gamma") else 0.0))
    return layer


def test_layer():
    # Without qk_norm the layer runs inside every TransformerBlock test (test_transformer_block).
    run_layer_test(
        MultiHeadSelfAttention,
        {
            "num_heads": 2,
            "qk_norm": True,
            "attention_dropout_rate": 0.1,
            "layer_norm_epsilon": 1e-5,
        },
        input_shape=(2, 5, D),
        expected_output_shape=(2, 5, D),
        expected_num_trainable_weights=12,
        expected_num_params=4 * (D * D + D) + 4 * (D // 2),
    )


@pytest.mark.parametrize("qk_norm", [False, True])
def test_matches_numpy(qk_norm):
    x = _tokens()
    layer = _randomize(MultiHeadSelfAttention(2, qk_norm=qk_norm, layer_norm_epsilon=1e-5), x)
    expected, weights = np_msa(x.astype("float64"), _params(layer), eps=1e-5)
    out, scores = layer(x, return_attention_scores=True)
    scale = np.abs(expected).max()
    np.testing.assert_allclose(to_numpy(out), expected, rtol=1e-5, atol=1e-5 * scale)
    np.testing.assert_allclose(to_numpy(scores), weights, rtol=1e-5, atol=1e-6)
    # The fused kernel (no weights asked for) computes the same.
    np.testing.assert_allclose(to_numpy(layer(x)), expected, rtol=1e-5, atol=1e-5 * scale)
    if qk_norm:
        plain, _ = np_msa(
            x.astype("float64"), {k: v for k, v in _params(layer).items() if "norm" not in k}
        )
        assert np.abs(plain - expected).max() > 1e-2  # the norm changes the result


@pytest.mark.parametrize("kv_heads", [1, 2])
def test_grouped_query_matches_numpy(kv_heads):
    """Grouped-query attention is multi-head attention whose key / value heads are repeated,
    each to `heads / kv_heads` consecutive query heads (timm's `repeat_interleave`)."""
    x = _tokens()
    layer = _randomize(MultiHeadSelfAttention(4, qk_norm=True, num_key_value_heads=kv_heads), x)
    assert tuple(layer.key_dense.kernel.shape) == (D, kv_heads, D // 4)
    p = _params(layer)
    for name in ("key/kernel", "key/bias", "value/kernel", "value/bias"):
        p[name] = np.repeat(p[name], 4 // kv_heads, axis=-2)  # (.., kv_heads, head_dim)
    expected, weights = np_msa(x.astype("float64"), p)
    out, scores = layer(x, return_attention_scores=True)
    np.testing.assert_allclose(to_numpy(out), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(to_numpy(scores), weights, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(to_numpy(layer(x)), expected, rtol=1e-5, atol=1e-5)
    with portable_path(False):  # PyTorch: the fast path leaves grouped-query attention alone
        np.testing.assert_allclose(to_numpy(layer(x)), expected, rtol=1e-5, atol=1e-5)
    assert MultiHeadSelfAttention.from_config(layer.get_config()).num_key_value_heads == kv_heads
    with pytest.raises(ValueError, match="num_key_value_heads must divide num_heads"):
        MultiHeadSelfAttention(4, num_key_value_heads=3)


def test_same_function_and_weights_as_keras_multi_head_attention():
    """Keras' MultiHeadAttention with the same weights gives the same outputs and scores."""
    x = _tokens()
    ours = _randomize(MultiHeadSelfAttention(2), x)
    keras_mha = keras.layers.MultiHeadAttention(num_heads=2, key_dim=D // 2)
    keras_mha.build(x.shape, x.shape)
    keras_mha.set_weights(ours.get_weights())
    assert [tuple(w.shape) for w in keras_mha.weights] == [tuple(w.shape) for w in ours.weights]
    out, scores = keras_mha(x, x, return_attention_scores=True)
    got, got_scores = ours(x, return_attention_scores=True)
    np.testing.assert_allclose(to_numpy(got), to_numpy(out), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(to_numpy(got_scores), to_numpy(scores), rtol=1e-5, atol=1e-7)


def test_attention_dropout_only_in_training():
    x = _tokens()
    layer = MultiHeadSelfAttention(2, attention_dropout_rate=0.5)
    np.testing.assert_allclose(to_numpy(layer(x)), to_numpy(layer(x, training=False)), rtol=1e-6)
    assert not np.allclose(to_numpy(layer(x, training=True)), to_numpy(layer(x)))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(num_heads=0), "num_heads"),
        (dict(num_heads=2, attention_dropout_rate=1.0), "attention_dropout_rate"),
        (dict(num_heads=2, qk_norm="yes"), "qk_norm must be a bool"),
        (dict(num_heads=2, layer_norm_epsilon=0.0), "layer_norm_epsilon must be positive"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MultiHeadSelfAttention(**kwargs)


def test_heads_must_divide_width():
    with pytest.raises(ValueError, match="hidden_dim=16, num_heads=3"):
        MultiHeadSelfAttention(3).build((None, 5, 16))


def _np_masked_msa(x, p, key_valid):
    """np_msa with the keys where `key_valid` (B, T) is False left out of every softmax."""
    q = np.einsum("btd,dhk->bthk", x, p["query/kernel"]) + p["query/bias"]
    k = np.einsum("btd,dhk->bthk", x, p["key/kernel"]) + p["key/bias"]
    v = np.einsum("btd,dhk->bthk", x, p["value/kernel"]) + p["value/bias"]
    logits = np.einsum("bqhk,bshk->bhqs", q, k) / np.sqrt(q.shape[-1])
    logits = np.where(key_valid[:, None, None, :], logits, -np.inf)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    out = np.einsum("bhqs,bshk->bqhk", weights, v)
    return np.einsum("bqhk,hkd->bqd", out, p["out/kernel"]) + p["out/bias"], weights


def test_attention_mask_matches_numpy_and_ignores_masked_tokens():
    """A (B, S) mask on the last S tokens (the first always valid) as a masked softmax; the
    masked tokens' values change no other token's output."""
    x = _tokens(t=6)
    patch_valid = np.array([[True, True, False, True, False], [True] * 4 + [False]])
    key_valid = np.concatenate([np.ones((2, 1), bool), patch_valid], axis=1)
    layer = _randomize(MultiHeadSelfAttention(2), x)
    expected, weights = _np_masked_msa(x.astype("float64"), _params(layer), key_valid)
    scale = np.abs(expected).max()
    out, scores = layer(x, attention_mask=patch_valid, return_attention_scores=True)
    np.testing.assert_allclose(to_numpy(out), expected, rtol=1e-5, atol=1e-5 * scale)
    np.testing.assert_allclose(to_numpy(scores), weights, rtol=1e-5, atol=1e-6)
    fused = to_numpy(layer(x, attention_mask=patch_valid))
    np.testing.assert_allclose(fused, expected, rtol=1e-5, atol=1e-5 * scale)
    full = key_valid[:, None, None, :] & np.ones((2, 1, 6, 6), bool)  # the same, as (B, 1, T, T)
    np.testing.assert_allclose(to_numpy(layer(x, attention_mask=full)), fused, atol=1e-6)
    changed = x.copy()
    changed[~key_valid] = 100.0
    again = to_numpy(layer(changed, attention_mask=patch_valid))
    np.testing.assert_allclose(again[key_valid], fused[key_valid], atol=1e-5)


def test_attention_mask_shape_errors():
    layer = MultiHeadSelfAttention(2)
    with pytest.raises(ValueError, match="covers 7 tokens but the input has 5"):
        layer(_tokens(), attention_mask=np.ones((2, 7), bool))
    with pytest.raises(ValueError, match="attention_mask must be"):
        layer(_tokens(), attention_mask=np.ones((2, 5, 5), bool))
