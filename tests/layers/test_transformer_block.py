import functools
import warnings

import keras
import numpy as np
import pytest

from keras_vit.layers import TransformerBlock
from keras_vit.training.quantization import quantize
from tests.helpers import block_params, np_block, to_numpy
from tests.layer_harness import MIXED_POLICIES, run_layer_test


def _tokens(b=2, t=5, d=16):
    return np.random.rand(b, t, d).astype("float32")


def _randomized(block, x):
    block.build(x.shape)
    rng = np.random.default_rng(0)
    for w in block.weights:
        value = rng.normal(0, 0.3, size=tuple(w.shape)).astype("float32")
        w.assign(value + (1.0 if w.path.endswith("gamma") else 0.0))
    return block


D, M = 16, 24
# On JAX, keras.layers.MultiHeadAttention under keras.remat (jax.checkpoint) in float16 fails on
# CPU with XLA's "The precision 'F16_F16_F32' is not supported by dot_general on CPU" (the same
# MultiHeadAttention alone under keras.remat fails too: upstream, not this layer's code).
REMAT_POLICIES = ("mixed_bfloat16",) if keras.backend.backend() == "jax" else None
NUM_PARAMS = 2 * 2 * D + 4 * (D * D + D) + (D * M + M) + (M * D + D)


@pytest.mark.parametrize(
    "kwargs,num_weights,num_params",
    [
        ({}, 16, NUM_PARAMS),
        (
            dict(
                dropout_rate=0.1,
                attention_dropout_rate=0.1,
                drop_path_rate=0.1,
                layer_norm_epsilon=1e-5,
                approximate_gelu=False,
                layer_scale_init_value=0.5,
            ),
            18,
            NUM_PARAMS + 2 * D,
        ),
        (dict(remat=True), 16, NUM_PARAMS),
        # timm qk_norm: a LayerNorm over the head width (8) on queries and keys.
        (dict(qk_norm=True, activation="quick_gelu"), 20, NUM_PARAMS + 4 * (D // 2)),
    ],
)
def test_layer(kwargs, num_weights, num_params):
    policies = REMAT_POLICIES if kwargs.get("remat") and REMAT_POLICIES else MIXED_POLICIES
    run_layer_test(
        TransformerBlock,
        {"num_heads": 2, "mlp_dim": M, **kwargs},
        mixed_precision_policies=policies,
        input_shape=(2, 5, D),
        expected_output_shape=(2, 5, D),
        expected_num_trainable_weights=num_weights,
        expected_num_params=num_params,
    )


def test_official_weight_layouts():
    block = TransformerBlock(num_heads=4, mlp_dim=32)
    block.build((None, 5, 16))
    att = block.attention
    assert tuple(att.query_dense.kernel.shape) == (16, 4, 4)
    assert tuple(att.query_dense.bias.shape) == (4, 4)
    assert tuple(att.output_dense.kernel.shape) == (4, 4, 16)
    assert tuple(att.output_dense.bias.shape) == (16,)
    names = {w.path.split("/", 1)[1] for w in block.weights}
    assert "attention_norm/gamma" in names and "mlp_dense_1/kernel" in names


@pytest.mark.parametrize("approximate", [True, False])
def test_matches_numpy_equations(approximate):
    x = _tokens()
    block = _randomized(TransformerBlock(num_heads=2, mlp_dim=24, approximate_gelu=approximate), x)
    out, scores = block(x, return_attention_scores=True)
    expected, weights = np_block(x, block_params(block), approximate_gelu=approximate)
    np.testing.assert_allclose(to_numpy(out), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(to_numpy(scores), weights, rtol=1e-4, atol=1e-6)
    # The fused path (no scores requested) gives the same output.
    np.testing.assert_allclose(to_numpy(block(x)), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(qk_norm=True),
        dict(activation="quick_gelu", approximate_gelu=False),
        dict(qk_norm=True, activation="quick_gelu", layer_norm_epsilon=1e-5),
        dict(mlp_inner_norm=True, layer_norm_epsilon=1e-5),  # BEiT-3's MLP norm
    ],
)
def test_qk_norm_and_quick_gelu_match_numpy(kwargs):
    x = _tokens()
    block = _randomized(TransformerBlock(num_heads=2, mlp_dim=24, **kwargs), x)
    params = {k: v.astype("float64") for k, v in block_params(block).items()}
    expected, weights = np_block(
        x.astype("float64"),
        params,
        eps=kwargs.get("layer_norm_epsilon", 1e-6),
        approximate_gelu=kwargs.get("approximate_gelu", True),
        activation=kwargs.get("activation", "gelu"),
    )
    out, scores = block(x, return_attention_scores=True)
    scale = np.abs(expected).max()
    np.testing.assert_allclose(to_numpy(out), expected, rtol=1e-5, atol=1e-5 * scale)
    np.testing.assert_allclose(to_numpy(scores), weights, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(to_numpy(block(x)), expected, rtol=1e-5, atol=1e-5 * scale)


def test_post_norm_matches_numpy_and_the_fast_path_falls_back():
    """Residual post-norm (timm's ResPostBlock): x + LN(MSA(x)), then x + LN(MLP(x))."""
    from keras_vit.layers.attention import portable_path

    x = _tokens()
    block = _randomized(TransformerBlock(num_heads=2, mlp_dim=24, block_norm="post",
                                         approximate_gelu=False), x)  # fmt: skip
    params = {k: v.astype("float64") for k, v in block_params(block).items()}
    expected, weights = np_block(x.astype("float64"), params, approximate_gelu=False, post=True)
    out, scores = block(x, return_attention_scores=True)
    np.testing.assert_allclose(to_numpy(out), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(to_numpy(scores), weights, rtol=1e-5, atol=1e-6)
    with portable_path(False):  # PyTorch: the fast path falls back to the portable one
        np.testing.assert_allclose(to_numpy(block(x)), expected, rtol=1e-5, atol=1e-5)
    assert TransformerBlock.from_config(block.get_config()).block_norm == "post"
    for kwargs in (dict(block_norm="sandwich"), dict(block_norm="post", num_parallel=2),
                   dict(block_norm="post", layer_scale_init_value=0.1)):  # fmt: skip
        with pytest.raises(ValueError, match="block_norm"):
            TransformerBlock(num_heads=2, mlp_dim=24, **kwargs)


def test_activation_must_be_known():
    with pytest.raises(ValueError, match=r"activation must be one of \('gelu', 'quick_gelu'\)"):
        TransformerBlock(2, 24, activation="relu")


def test_gelu_switch_changes_output():
    x = _tokens()
    a = _randomized(TransformerBlock(2, 24, approximate_gelu=True), x)
    b = _randomized(TransformerBlock(2, 24, approximate_gelu=False), x)
    diff = np.abs(to_numpy(a(x)) - to_numpy(b(x))).max()
    assert 1e-6 < diff < 1e-1


def test_layer_scale():
    x = _tokens()
    block = TransformerBlock(num_heads=2, mlp_dim=24, layer_scale_init_value=0.0)
    np.testing.assert_allclose(to_numpy(block(x)), x, rtol=1e-6)  # zero scales: identity
    assert tuple(block.attention_scale.shape) == (16,)
    base = TransformerBlock(num_heads=2, mlp_dim=24)
    base.build(x.shape)
    assert block.count_params() == base.count_params() + 32


def test_dropout_only_in_training():
    x = _tokens()
    block = TransformerBlock(
        2, 24, dropout_rate=0.5, attention_dropout_rate=0.5, drop_path_rate=0.5
    )
    np.testing.assert_allclose(to_numpy(block(x)), to_numpy(block(x)), rtol=0)
    assert not np.allclose(to_numpy(block(x, training=True)), to_numpy(block(x)))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(num_heads=0, mlp_dim=8), "num_heads"),
        (dict(num_heads=2, mlp_dim=-1), "mlp_dim"),
        (dict(num_heads=2, mlp_dim=8, dropout_rate=-0.1), "dropout_rate"),
        (dict(num_heads=2, mlp_dim=8, attention_dropout_rate=1.5), "attention_dropout_rate"),
        (dict(num_heads=2, mlp_dim=8, drop_path_rate=1.0), "drop_path_rate"),
        (dict(num_heads=2, mlp_dim=8, layer_norm_epsilon=0), "layer_norm_epsilon"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TransformerBlock(**kwargs)


def test_heads_must_divide_width():
    with pytest.raises(ValueError, match="hidden_dim=16, num_heads=3"):
        TransformerBlock(num_heads=3, mlp_dim=8).build((None, 5, 16))


def _loss_and_grads(model, x):
    """Loss sum(model(x)^2) (training mode) and its gradients, on the active backend."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        trainable = [w.value for w in model.trainable_variables]
        non_trainable = [w.value for w in model.non_trainable_variables]

        def loss_fn(trainable):
            y, _ = model.stateless_call(trainable, non_trainable, x, training=True)
            return (y**2).sum()

        loss, grads = jax.value_and_grad(loss_fn)(trainable)
    elif backend == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x, training=True) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
    else:
        model.zero_grad()
        loss = (model(x, training=True) ** 2).sum()
        loss.backward()
        grads = [w.value.grad for w in model.trainable_variables]
    return to_numpy(loss), [to_numpy(g) for g in grads]


def _block_model(remat, **kwargs):
    inputs = keras.Input((5, 16))
    y = TransformerBlock(2, 24, remat=remat, name="b1", **kwargs)(inputs)
    y = TransformerBlock(2, 24, remat=remat, name="b2", **kwargs)(y)
    return keras.Model(inputs, y)


def test_remat_same_outputs_and_gradients():
    x = _tokens()
    plain = _block_model(False)
    remat = _block_model(True)
    remat.set_weights(plain.get_weights())
    np.testing.assert_allclose(to_numpy(remat(x)), to_numpy(plain(x)), rtol=1e-6, atol=1e-6)
    loss_plain, grads_plain = _loss_and_grads(plain, x)
    loss_remat, grads_remat = _loss_and_grads(remat, x)
    np.testing.assert_allclose(loss_remat, loss_plain, rtol=1e-6)
    assert len(grads_remat) == len(grads_plain) == len(plain.trainable_variables)
    for g_remat, g_plain in zip(grads_remat, grads_plain, strict=True):
        assert np.abs(g_plain).max() > 0
        np.testing.assert_allclose(g_remat, g_plain, rtol=1e-4, atol=1e-6)
    # Attention weights on request bypass remat and match.
    block = remat.get_layer("b1")
    _, scores = block(x, return_attention_scores=True)
    assert tuple(scores.shape) == (2, 2, 5, 5)


def test_remat_with_dropout():
    """JAX and PyTorch replay the dropout masks when recomputing; TF falls back with a warning."""
    x = _tokens()
    model = _block_model(True, dropout_rate=0.2, drop_path_rate=0.2)
    if keras.backend.backend() == "tensorflow":
        with pytest.warns(UserWarning, match="remat is off"):
            loss, grads = _loss_and_grads(model, x)
        assert np.isfinite(loss)
        return
    # The dropout seed generators' states are the model's non-trainable variables: restore
    # them (and, on PyTorch, the global generator unseeded dropout uses) so that both passes
    # draw the same masks.
    states = [to_numpy(v).copy() for v in model.non_trainable_variables]
    assert states
    if keras.backend.backend() == "torch":
        import torch

        torch_state = torch.get_rng_state()
    loss_remat, grads_remat = _loss_and_grads(model, x)
    for v, state in zip(model.non_trainable_variables, states, strict=True):
        v.assign(state)
    if keras.backend.backend() == "torch":
        torch.set_rng_state(torch_state)
    for layer in (model.get_layer("b1"), model.get_layer("b2")):
        layer.remat = False
    loss_plain, grads_plain = _loss_and_grads(model, x)
    np.testing.assert_allclose(loss_remat, loss_plain, rtol=1e-6)
    scale = max(np.abs(g).max() for g in grads_plain)
    for g_remat, g_plain in zip(grads_remat, grads_plain, strict=True):
        np.testing.assert_allclose(g_remat, g_plain, rtol=1e-4, atol=1e-6 * scale)


def test_remat_bad_value():
    assert TransformerBlock(2, 24, remat=True).get_config()["remat"] is True
    with pytest.raises(ValueError, match="remat must be a bool"):
        TransformerBlock(2, 24, remat="yes")


def test_remat_mixed_precision_with_dropout_tiny():
    keras.config.set_dtype_policy("mixed_bfloat16")
    inputs = keras.Input((3, 8))
    model = keras.Model(inputs, TransformerBlock(2, 8, dropout_rate=0.1, remat=True)(inputs))
    model.compile("adam", "mse")
    x = np.random.rand(2, 3, 8).astype("float32")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TensorFlow: remat off with dropout, warned
        history = model.fit(x, np.zeros((2, 3, 8), "float32"), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert all(w.dtype == "float32" for w in model.weights if w.trainable)


# --- the EVA-02 options: SwiGLU MLP (sub-LN), q/v-only biases, 2-D RoPE ---

EVA = dict(mlp="swiglu", mlp_inner_norm=True, key_bias=False)
EVA_PARAMS = NUM_PARAMS - D - (D * M + M + M * D + D) + (2 * (D * M + M) + M * D + D + 2 * M)


def test_layer_eva_options():
    run_layer_test(
        TransformerBlock,
        {"num_heads": 2, "mlp_dim": M, **EVA},
        input_shape=(2, 5, D),
        expected_output_shape=(2, 5, D),
        expected_num_trainable_weights=19,
        expected_num_params=EVA_PARAMS,
    )


def test_eva_options_bad_arguments():
    with pytest.raises(ValueError, match="mlp must be one of"):
        TransformerBlock(2, M, mlp="glu")
    with pytest.raises(ValueError, match="needs mlp='mlp', no relative_position_grid or mlp_in"):
        TransformerBlock(2, M, mlp_inner_norm=True, num_parallel=2)


def _linear(dense, linear, shape=None):
    kernel = linear.weight.detach().numpy().T
    dense.kernel.assign(kernel.reshape(shape) if shape else kernel)
    if linear.bias is not None:
        bias = linear.bias.detach().numpy()
        dense.bias.assign(bias.reshape(tuple(dense.bias.shape)))


def _norm(norm, ref):
    norm.gamma.assign(ref.weight.detach().numpy())
    norm.beta.assign(ref.bias.detach().numpy())


@pytest.mark.parametrize("remat", [False, True])
def test_eva_block_matches_timm(remat):
    """timm's EvaBlock (EVA-02: unfused q/k/v, k without bias, SwiGLU + sub-LN, RoPE)."""
    from tests.weights.references import import_timm, import_torch

    torch = import_torch()
    import_timm()
    from timm.layers.pos_embed_sincos import RotaryEmbeddingCat
    from timm.models.eva import EvaBlock

    from keras_vit.layers import RotaryEmbedding2D
    from keras_vit.layers.attention import portable_path

    width, heads, grid = 32, 2, (2, 3)
    norm_layer = functools.partial(torch.nn.LayerNorm, eps=1e-6)
    ref = EvaBlock(
        width,
        heads,
        qkv_fused=False,
        mlp_ratio=1.5,
        swiglu_mlp=True,
        scale_mlp=True,
        num_prefix_tokens=1,
        init_values=0.1,
        norm_layer=norm_layer,
    ).eval()
    rng = np.random.default_rng(5)
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.from_numpy(rng.normal(0.5 if p.ndim == 1 else 0, 0.3, size=p.shape)))
    block = TransformerBlock(heads, 48, layer_scale_init_value=0.1, remat=remat, **EVA)
    block.build((None, 7, width))
    head_shape = (width, heads, width // heads)
    attention = block.attention
    _norm(block.attention_norm, ref.norm1)
    _linear(attention.query_dense, ref.attn.q_proj, head_shape)
    _linear(attention.key_dense, ref.attn.k_proj, head_shape)
    _linear(attention.value_dense, ref.attn.v_proj, head_shape)
    _linear(attention.output_dense, ref.attn.proj, (heads, width // heads, width))
    block.attention_scale.assign(ref.gamma_1.detach().numpy())
    _norm(block.mlp_norm, ref.norm2)
    _linear(block.swiglu.gate_dense, ref.mlp.fc1_g)
    _linear(block.swiglu.up_dense, ref.mlp.fc1_x)
    _norm(block.swiglu.norm, ref.mlp.norm)
    _linear(block.swiglu.down_dense, ref.mlp.fc2)
    block.mlp_scale.assign(ref.gamma_2.detach().numpy())

    rope = RotaryEmbeddingCat(
        dim=width // heads, in_pixels=False, feat_shape=list(grid), ref_feat_shape=[16, 16]
    )
    x = np.random.default_rng(6).normal(size=(2, 7, width)).astype("float32")
    with torch.no_grad():
        want = ref(torch.from_numpy(x), rope=rope.get_embed()).numpy()
    embedding = RotaryEmbedding2D(width // heads, reference_grid_size=16)(
        np.zeros((1, *grid, 4), "float32")
    )
    got = to_numpy(block(x, rotary_embedding=embedding))
    np.testing.assert_allclose(got, want, atol=1e-5)
    with portable_path():
        np.testing.assert_allclose(to_numpy(block(x, rotary_embedding=embedding)), want, atol=1e-5)
    out, scores = block(x, rotary_embedding=embedding, return_attention_scores=True)
    np.testing.assert_allclose(to_numpy(out), want, atol=1e-5)
    assert tuple(scores.shape) == (2, heads, 7, 7)


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="the PyTorch fast path")
def test_key_bias_off_fast_path_equals_portable():
    from keras_vit.layers.attention import portable_path

    block = _randomized(TransformerBlock(2, M, key_bias=False), _tokens())
    x = _tokens()
    with portable_path(False):
        fast = to_numpy(block(x))
    with portable_path():
        portable = to_numpy(block(x))
    np.testing.assert_allclose(fast, portable, atol=1e-5)


def test_eva_block_with_rope_int8_and_keras_round_trip(tmp_path):
    """A functional model of RoPE + an EVA-02 block: quantized to int8, saved and reloaded."""
    from keras_vit.layers import RotaryEmbedding2D
    from tests.helpers import roundtrip_model

    grid = keras.Input((2, 3, D))
    tokens = keras.layers.Reshape((6, D))(grid)
    rope = RotaryEmbedding2D(D // 2, reference_grid_size=4)(grid)
    block = TransformerBlock(2, M, **EVA)
    model = keras.Model(grid, block(tokens, rotary_embedding=rope))
    x = np.random.default_rng(7).normal(size=(2, 2, 3, D)).astype("float32")
    rng = np.random.default_rng(8)
    for w in block.weights:
        offset = 1.0 if w.path.endswith("gamma") else 0.0
        w.assign(rng.normal(0, 0.3, size=tuple(w.shape)).astype("float32") + offset)
    before = to_numpy(model(x))
    quantize(model, "int8")  # Keras' model.quantize, one garbage collection
    assert block.swiglu.gate_dense.quantization_mode == "int8"
    quantized = to_numpy(model(x))
    assert np.abs(quantized - before).max() < 0.1 * np.abs(before).max()
    loaded = roundtrip_model(model, x, tmp_path)
    assert loaded.layers[-1].swiglu.down_dense.quantization_mode == "int8"
