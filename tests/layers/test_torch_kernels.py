"""keras_vit/layers/_torch_kernels.py: the PyTorch fast path equals the portable keras.ops path.

Every comparison runs the same layer or model (same variables) twice, once on each path
(`portable_path(False)` / `portable_path()`), with the same random state, and compares outputs
and gradients: within 1e-6 in float32 (relative to the largest output, or gradient), on every
option of the block. On JAX and TensorFlow only the switch itself is tested (no fast path
there).
"""

import json
import os
import zipfile

import keras
import numpy as np
import pytest

from keras_vit.layers import MultiHeadSelfAttention, TransformerBlock
from keras_vit.layers import attention as attention_module
from keras_vit.layers.attention import portable_path
from keras_vit.training.quantization import quantize
from tests.helpers import to_numpy

torch_only = pytest.mark.skipif(
    keras.backend.backend() != "torch", reason="the fast path is PyTorch's"
)

TOL = 1e-6  # float32, relative to the largest magnitude of the compared array


def _close(a, b, tol=TOL, scale=None):
    """`a` equals `b` within `tol` times `scale` (default: the largest magnitude in `b`)."""
    a, b = np.asarray(a, "float64"), np.asarray(b, "float64")
    scale = max(np.abs(b).max() if scale is None else scale, 1e-30)
    np.testing.assert_allclose(a / scale, b / scale, rtol=0, atol=tol)


def _model(num_blocks=2, width=16, heads=2, mlp=24, tokens=5, **options):
    inputs = keras.Input((tokens, width), name="tokens")
    x = inputs
    for i in range(num_blocks):
        x = TransformerBlock(heads, mlp, name=f"block_{i}", **options)(x)
    return keras.Model(inputs, x, name="blocks")


def _randomize(model, seed=0):
    rng = np.random.default_rng(seed)
    for w in model.trainable_weights:
        w.assign(rng.normal(0, 0.3, tuple(w.shape)).astype(w.dtype))


def _random_state(model):
    """What the next random draws depend on: torch's generator and the seed generators."""
    import torch

    return torch.get_rng_state(), [to_numpy(v) for v in model.non_trainable_variables]


def _set_random_state(model, state):
    import torch

    torch.set_rng_state(state[0])
    for variable, value in zip(model.non_trainable_variables, state[1], strict=True):
        variable.assign(value)


def _run(model, x, training, **call_kwargs):
    """Outputs and gradients (of sum(out * r)) w.r.t. the trainable weights and the input."""
    import torch

    for variable in model.trainable_variables:  # LoRA's are not the module's parameters
        variable.value.grad = None
    xt = torch.tensor(x, requires_grad=True)
    out = model(xt, training=training, **call_kwargs)
    first = out[0] if isinstance(out, (tuple, list)) else out
    weights = torch.from_numpy(np.random.default_rng(7).normal(size=tuple(first.shape)))
    (first * weights.to(first.dtype)).float().sum().backward()
    grads = [to_numpy(w.value.grad) for w in model.trainable_variables if w.value.grad is not None]
    outputs = [to_numpy(o) for o in (out if isinstance(out, (tuple, list)) else [out])]
    return outputs, grads + [to_numpy(xt.grad)]


def _both_paths(model, x, training=False, **call_kwargs):
    state = _random_state(model)
    with portable_path(False):
        fast = _run(model, x, training, **call_kwargs)
    _set_random_state(model, state)
    with portable_path():
        portable = _run(model, x, training, **call_kwargs)
    return fast, portable


def _assert_same(fast, portable, tol=TOL):
    """Outputs within `tol` of their largest value, gradients of the largest gradient.

    The gradients' common scale: some are zero in exact arithmetic (a key bias shifts every
    attention logit of a query alike), and their float32 values are rounding noise.
    """
    for a, b in zip(fast[0], portable[0], strict=True):
        _close(a, b, tol)
    assert len(fast[1]) == len(portable[1]) > 0
    scale = max(np.abs(g).max() for g in portable[1])
    for a, b in zip(fast[1], portable[1], strict=True):
        _close(a, b, tol, scale)


def _tokens(batch=2, tokens=5, width=16, seed=1):
    return np.random.default_rng(seed).normal(size=(batch, tokens, width)).astype("float32")


OPTIONS = {
    "default": {},
    "qk_norm": dict(qk_norm=True),
    "layer_scale": dict(layer_scale_init_value=0.5),
    "exact_gelu": dict(approximate_gelu=False),
    "quick_gelu": dict(activation="quick_gelu"),
    "epsilon": dict(layer_norm_epsilon=1e-5),
    "remat": dict(remat=True),
    "zero_rates": dict(dropout_rate=0.0, attention_dropout_rate=0.0, drop_path_rate=0.0),
    "mlp_inner_norm": dict(mlp_inner_norm=True),  # BEiT-3's norm before mlp_dense_2
    "all": dict(qk_norm=True, layer_scale_init_value=0.1, remat=True, activation="quick_gelu"),
    # RMSNorm blocks (AIMv2) and RMS QK-norms fall back to the portable path.
    "rmsnorm_qk_norm": dict(norm="rmsnorm", qk_norm=True, layer_norm_epsilon=1e-5),
}


@torch_only
@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("name", list(OPTIONS))
def test_block_fast_path_equals_portable(name, training):
    model = _model(**OPTIONS[name])
    _randomize(model)
    _assert_same(*_both_paths(model, _tokens(), training=training))


@torch_only
@pytest.mark.parametrize(
    "options",
    [
        dict(dropout_rate=0.3),
        dict(drop_path_rate=0.4),
        dict(attention_dropout_rate=0.3),  # the attention takes its own (portable) call
        dict(dropout_rate=0.2, drop_path_rate=0.3, attention_dropout_rate=0.2, remat=True),
    ],
)
def test_dropout_and_drop_path_draw_the_same_masks(options):
    """Training with dropout: the same draws in the same order, so the same outputs."""
    model = _model(**options)
    _randomize(model)
    fast, portable = _both_paths(model, _tokens(batch=4), training=True)
    _assert_same(fast, portable)
    # The masks were active: outputs differ from the same model in inference.
    with portable_path():
        inference = _run(model, _tokens(batch=4), False)
    assert np.abs(fast[0][0] - inference[0][0]).max() > 1e-3


@torch_only
def test_fast_path_taken_and_left(monkeypatch):
    """Taken by a block's call; not for attention scores, where the attention layer computes."""
    from keras_vit.layers import _torch_kernels

    calls = []
    original = _torch_kernels.transformer_block

    def counting(block, inputs, training, *extra):
        calls.append(block.name)
        return original(block, inputs, training, *extra)

    monkeypatch.setattr(_torch_kernels, "transformer_block", counting)
    block = TransformerBlock(2, 24)
    x = _tokens()
    with portable_path(False):
        plain = to_numpy(block(x))
        assert calls == [block.name]
        out, scores = block(x, return_attention_scores=True)
        assert calls == [block.name]
    with portable_path():
        block(x)
    assert calls == [block.name]
    _close(to_numpy(out), plain)
    assert tuple(scores.shape) == (2, 2, 5, 5)


@torch_only
def test_differential_attention_leaves_the_fast_path(monkeypatch):
    """Differential attention: the block's guard and `attention_is_plain` send it to keras.ops."""
    from keras_vit.layers import _torch_kernels

    def refuse(*args, **kwargs):
        raise AssertionError("the fast path ran a differential-attention block")

    monkeypatch.setattr(_torch_kernels, "transformer_block", refuse)
    monkeypatch.setattr(_torch_kernels, "self_attention", refuse)
    block = TransformerBlock(2, 24, attention_type="differential", block_index=1)
    x = _tokens(width=16)
    with portable_path(False):
        fast = to_numpy(block(x))
    assert not _torch_kernels.attention_is_plain(block.attention)
    with portable_path():
        _close(fast, to_numpy(block(x)))


@torch_only
def test_attention_scores_equal_fast_path_outputs():
    block = TransformerBlock(2, 24, qk_norm=True, layer_scale_init_value=0.3)
    x = _tokens()
    block.build(x.shape)
    _randomize(block)
    with portable_path(False):
        fast = to_numpy(block(x))
        with_scores = [to_numpy(t) for t in block(x, return_attention_scores=True)]
    with portable_path():
        reference = [to_numpy(t) for t in block(x, return_attention_scores=True)]
    _close(fast, reference[0])
    _close(with_scores[0], reference[0])
    _close(with_scores[1], reference[1])


@torch_only
@pytest.mark.parametrize("qk_norm", [False, True])
@pytest.mark.parametrize("training", [False, True])
def test_attention_layer_fast_path_equals_portable(qk_norm, training):
    inputs = keras.Input((5, 16))
    model = keras.Model(inputs, MultiHeadSelfAttention(4, qk_norm=qk_norm)(inputs))
    _randomize(model)
    _assert_same(*_both_paths(model, _tokens(), training=training))


@torch_only
@pytest.mark.parametrize("targets", [("query", "value"), ("mlp_dense_1",), ("all",)])
def test_lora_layers_take_their_own_call(targets):
    """LoRA-enabled dense layers run their Keras call inside the fast path: same function."""
    model = _model()
    _randomize(model)
    for block in model.layers[1:]:
        a = block.attention
        layers = {"query": a.query_dense, "key": a.key_dense, "value": a.value_dense,
                  "out": a.output_dense, "mlp_dense_1": block.mlp_dense_1,
                  "mlp_dense_2": block.mlp_dense_2}
        chosen = layers.values() if targets == ("all",) else [layers[t] for t in targets]
        for layer in chosen:
            layer.enable_lora(2)
            layer.lora_kernel_b.assign(np.full(tuple(layer.lora_kernel_b.shape), 0.1, "float32"))
    for training in (False, True):
        _assert_same(*_both_paths(model, _tokens(), training=training))


@torch_only
def test_int8_quantized_layers_take_their_own_call():
    model = _model()
    _randomize(model)
    quantize(model, "int8")
    x = _tokens()
    with portable_path(False):
        fast = to_numpy(model(x))
    with portable_path():
        portable = to_numpy(model(x))
    _close(fast, portable)


@torch_only
@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision(policy):
    """Same casts as the portable path (LayerNorm in float32, the rest in the compute dtype)."""
    keras.config.set_dtype_policy(policy)
    model = _model(qk_norm=True, layer_scale_init_value=0.5)
    _randomize(model)
    fast, portable = _both_paths(model, _tokens(), training=True)
    assert fast[0][0].dtype == portable[0][0].dtype == keras.config.dtype_policy().compute_dtype
    # One product-and-add (addmm) against a product then an add, each rounded to 8 or 11 bits.
    _assert_same(fast, portable, tol=3e-2 if policy == "mixed_bfloat16" else 4e-3)


@torch_only
def test_map_head_model():
    """A whole ViT with a MAP head and every block option, fast against portable."""
    import keras_vit

    model = keras_vit.ViT(
        "mu/8", image_size=16, num_classes=3, pooling="map", qk_norm=True,
        layer_scale_init_value=0.1,
    )
    _randomize(model)
    x = np.random.default_rng(2).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    for training in (False, True):
        _assert_same(*_both_paths(model, x, training=training))


def test_switch_restores_and_is_off_elsewhere():
    before = attention_module.torch_fast_path()
    with portable_path():
        assert not attention_module.torch_fast_path()
        with portable_path(False):
            assert attention_module.torch_fast_path() == (keras.backend.backend() == "torch")
        assert not attention_module.torch_fast_path()
    assert attention_module.torch_fast_path() == before
    if keras.backend.backend() != "torch":
        assert not before


def test_saved_file_does_not_depend_on_the_path(tmp_path):
    """The fast path adds no variable or config: the same `.keras` contents either way."""
    contents = []
    for portable in (False, True):
        keras.utils.set_random_seed(3)
        with portable_path(portable):
            model = _model(qk_norm=True, layer_scale_init_value=0.5)
            model(_tokens())
            path = os.path.join(tmp_path, f"model_{portable}.keras")
            model.save(path)
        with zipfile.ZipFile(path) as archive:
            config = json.loads(archive.read("config.json"))
        contents.append((config, [w.path for w in model.weights], model.get_weights()))
    assert contents[0][0] == contents[1][0]
    assert contents[0][1] == contents[1][1]
    for a, b in zip(contents[0][2], contents[1][2], strict=True):
        np.testing.assert_array_equal(a, b)


@torch_only
@pytest.mark.parametrize("training", [False, True])
def test_attention_mask_fast_path_equals_portable(training):
    """NaFlex padding masks: F.scaled_dot_product_attention's boolean attn_mask computes the
    portable masked attention (outputs and gradients)."""
    tokens = keras.Input((6, 16))
    valid = keras.Input((5,), dtype="bool")
    x = TransformerBlock(2, 24, dropout_rate=0.1, drop_path_rate=0.1)(
        tokens, attention_mask=valid
    )
    model = keras.Model([tokens, valid], x)
    _randomize(model)
    mask = np.array([[True, True, False, True, False], [True] * 4 + [False]])
    wrapped = keras.Model(tokens, model([tokens, keras.ops.convert_to_tensor(mask)]))
    _assert_same(*_both_paths(wrapped, _tokens(tokens=6), training=training))


# --- the model's graph walk (`run_graph`): each layer's `call` without Keras' `__call__` ----

GRAPHS = {
    "plain": dict(pooling="token"),
    "map_qk_norm": dict(pooling="map", qk_norm=True, layer_scale_init_value=0.1),
    "distilled": dict(distillation_token=True, classifier_activation="softmax"),
    "gap_fc_norm_pre_logits": dict(
        pooling="gap", fc_norm=True, class_token=True, representation_size=8, pre_norm=True
    ),
    "relpos_shared_tokens": dict(
        position_embedding=None, relative_position_bias="shared", pooling=None,
        include_top=False,
    ),
    "rotary_swiglu": dict(
        rotary_embedding="eva02", mlp="swiglu", pooling="gap", class_token=True,
        num_register_tokens=1,
    ),
    "dropout_remat": dict(dropout_rate=0.2, drop_path_rate=0.3, remat=True),
}


def _vit(options, seed=0):
    import keras_vit

    model = keras_vit.ViT("mu/8", image_size=16, num_classes=3, num_layers=2, **options)
    _randomize(model, seed)
    return model


def _images(seed=2, size=16):
    return np.random.default_rng(seed).uniform(-1, 1, (2, size, size, 3)).astype("float32")


def _lean_and_keras(model, x, training, monkeypatch):
    """`_run` with the lean graph walk, then (same random state) with Keras' own layer calls;
    both on the fast path of the blocks. Also checks that the lean walk was taken."""
    from keras_vit.layers import _torch_kernels

    walks = []
    original = _torch_kernels.run_graph

    def counting(*args):
        walks.append(args[0].name)
        return original(*args)

    state = _random_state(model)
    with portable_path(False), monkeypatch.context() as patch:
        patch.setattr(_torch_kernels, "run_graph", counting)
        lean = _run(model, x, training)
    assert walks == [model.name]
    _set_random_state(model, state)
    with portable_path(False), monkeypatch.context() as patch:
        patch.setattr(_torch_kernels, "run_graph", lambda *args: None)
        keras_calls = _run(model, x, training)
    return lean, keras_calls


def _assert_identical(a, b):
    """The same computation: bitwise equal outputs and gradients."""
    for x, y in zip(a[0] + a[1], b[0] + b[1], strict=True):
        np.testing.assert_array_equal(x, y)
    assert len(a[1]) == len(b[1]) > 0


# (graph, training): each graph once, the ones with training-only behaviour in training.
WALKS = [("plain", False), ("plain", True), ("map_qk_norm", True), ("distilled", False),
         ("gap_fc_norm_pre_logits", False), ("relpos_shared_tokens", False),
         ("rotary_swiglu", True), ("dropout_remat", True)]


@torch_only
@pytest.mark.parametrize(("name", "training"), WALKS)
def test_graph_walk_equals_keras_layer_calls(name, training, monkeypatch):
    model = _vit(GRAPHS[name])
    _assert_identical(*_lean_and_keras(model, _images(), training, monkeypatch))


@torch_only
def test_graph_walk_mixed_precision(monkeypatch):
    """The same casts and autocast scopes (float32 head under a mixed policy)."""
    keras.config.set_dtype_policy("mixed_bfloat16")
    model = _vit(dict(pooling="gap", class_token=True, layer_scale_init_value=0.5))
    lean, keras_calls = _lean_and_keras(model, _images(), True, monkeypatch)
    assert lean[0][0].dtype == np.float32  # the head's
    _assert_identical(lean, keras_calls)


@torch_only
def test_graph_walk_lora_quantized_and_portable(monkeypatch):
    """A LoRA head, then an int8 head and MLP layer (their Keras calls, `quantized_call`);
    and the whole walk against the portable path."""
    model = _vit(dict(pooling="map"))
    model.head.enable_lora(2)
    model.head.lora_kernel_b.assign(np.full(tuple(model.head.lora_kernel_b.shape), 0.1))
    _assert_identical(*_lean_and_keras(model, _images(), True, monkeypatch))
    _assert_same(*_both_paths(model, _images(), training=True))
    model = _vit(dict(pooling="map"))
    model.head.quantize("int8")
    model.blocks[0].mlp_dense_1.quantize("int8")
    x = _images()
    with portable_path(False):
        lean = to_numpy(model(x))
        with monkeypatch.context() as patch:
            from keras_vit.layers import _torch_kernels

            patch.setattr(_torch_kernels, "run_graph", lambda *args: None)
            np.testing.assert_array_equal(lean, to_numpy(model(x)))
    with portable_path():
        _close(lean, to_numpy(model(x)))


@torch_only
def test_graph_walk_leaves_hooks_and_predict_equal(monkeypatch):
    """A PyTorch forward hook on a layer is honoured (that layer takes its Keras call);
    `predict_on_batch` and `model(x)` agree with Keras' layer calls."""
    model = _vit(GRAPHS["plain"])
    x = _images()
    with portable_path(False):
        reference = to_numpy(model.predict_on_batch(x))
        seen = []
        handle = model.blocks[1].register_forward_hook(lambda *args: seen.append(1))
        np.testing.assert_array_equal(to_numpy(model(x, training=False)), reference)
        handle.remove()
        assert seen == [1]
        from keras_vit.layers import _torch_kernels

        with monkeypatch.context() as patch:
            patch.setattr(_torch_kernels, "run_graph", lambda *args: None)
            np.testing.assert_array_equal(to_numpy(model.predict_on_batch(x)), reference)


def _naflex_batch():
    from keras_vit.data import naflex_batch

    rng = np.random.default_rng(3)
    images = [rng.uniform(-1, 1, (h, w, 3)).astype("float32") for h, w in ((16, 40), (32, 12))]
    return naflex_batch(images, 4, 12)  # 10 and 12 valid patches of 12: one image padded


def _run_dict(model, batch, training):
    """`_run` for a NaFlex dict batch: outputs, and gradients w.r.t. the weights and patches.
    `model(dict of tensors)` gets from `Layer.__call__` a mask of one None per input."""
    import torch

    for variable in model.trainable_variables:
        variable.value.grad = None
    inputs = {key: torch.tensor(value) for key, value in batch.items()}
    inputs["patches"].requires_grad_(True)
    out = model(inputs, training=training)
    weights = torch.from_numpy(np.random.default_rng(7).normal(size=tuple(out.shape)))
    (out * weights.to(out.dtype)).float().sum().backward()
    grads = [to_numpy(w.value.grad) for w in model.trainable_variables if w.value.grad is not None]
    return [to_numpy(out)], grads + [to_numpy(inputs["patches"].grad)]


@torch_only
@pytest.mark.parametrize("training", [False, True])
def test_graph_walk_takes_naflex_dict_batches(training, monkeypatch):
    """A NaFlex model's dict batch (its mask of Nones from `Layer.__call__`, NumPy leaves from
    `predict_on_batch`) takes the lean walk: outputs and gradients bitwise equal to Keras'
    own layer calls."""
    import keras_vit
    from keras_vit.layers import _torch_kernels

    model = keras_vit.ViT(
        "mu/4", image_size=16, num_classes=3, num_layers=2, naflex=True, pooling="gap",
        dropout_rate=0.1,
    )  # fmt: skip
    _randomize(model)
    batch = _naflex_batch()
    original, walks = _torch_kernels.run_graph, []

    def recording(*args):
        outputs = original(*args)
        walks.append(outputs is not None)
        return outputs

    state = _random_state(model)
    with portable_path(False), monkeypatch.context() as patch:
        patch.setattr(_torch_kernels, "run_graph", recording)
        lean = _run_dict(model, batch, training)
        predicted = to_numpy(model.predict_on_batch(batch))  # NumPy leaves
    assert walks == [True, True]
    _set_random_state(model, state)
    with portable_path(False), monkeypatch.context() as patch:
        patch.setattr(_torch_kernels, "run_graph", lambda *args: None)
        keras_calls = _run_dict(model, batch, training)
        np.testing.assert_array_equal(to_numpy(model.predict_on_batch(batch)), predicted)
    _assert_identical(lean, keras_calls)


@torch_only
def test_graph_walk_steps_aside_on_a_keras_without_its_internals(monkeypatch):
    """Another Keras release without one of the internals the walk reads: Keras' own call."""
    from keras_vit.layers import _torch_kernels

    model = _vit(GRAPHS["plain"])
    x = keras.ops.convert_to_tensor(_images())
    assert _torch_kernels.keras_has_internals(model)
    original, walks = _torch_kernels.run_graph, []

    def recording(*args):
        outputs = original(*args)
        walks.append(outputs is not None)
        return outputs

    monkeypatch.setattr(_torch_kernels, "run_graph", recording)
    with portable_path(False):
        reference = to_numpy(model(x))
        monkeypatch.setattr(_torch_kernels, "_LAYER_INTERNALS", ("_a_keras_internal_gone",))
        assert not _torch_kernels.keras_has_internals(model)
        np.testing.assert_array_equal(to_numpy(model(x)), reference)
    assert walks == [True, False]  # the lean walk, then Keras' own call


@torch_only
@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_patch_projection_equals_ops_conv(policy):
    """`PatchEncoder.project` by F.conv2d (through the layer's call: its autocast scope under
    mixed precision): the same numbers as keras.ops.conv, and gradients."""
    import torch

    from keras_vit.layers import PatchEncoder

    keras.config.set_dtype_policy(policy)
    encoder = PatchEncoder(16, 4)
    encoder.build((None, 8, 12, 3))
    _randomize(encoder)
    images = np.random.default_rng(3).normal(size=(2, 8, 12, 3)).astype("float32")
    results = []
    for portable in (False, True):
        for variable in encoder.trainable_variables:
            variable.value.grad = None
        x = torch.tensor(images, requires_grad=True)
        with portable_path(portable):
            out = encoder(x)
        (out.float() ** 2).sum().backward()
        grads = [to_numpy(encoder.kernel.value.grad), to_numpy(encoder.bias.value.grad)]
        results.append([to_numpy(out.float()), to_numpy(x.grad)] + grads)
    assert results[0][0].shape == (2, 7, 16)
    for fast, reference in zip(*results, strict=True):
        _close(fast, reference, 0 if policy == "float32" else 1e-2)


@torch_only
def test_patch_encoder_dropout_fast_path_equals_portable():
    """Embedding dropout: skipped in inference, the same draws in training."""
    model = _vit(dict(dropout_rate=0.3, pooling="gap", class_token=True))
    for training in (False, True):
        _assert_same(*_both_paths(model, _images(), training=training))
