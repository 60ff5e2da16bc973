"""ViTs with EVA-02's options (RoPE, SwiGLU with sub-LN, q/v-only biases, attention inner norm)
on `keras_vit.ViT`: against a NumPy forward pass written here, `.keras` round trip, int8
quantization, LoRA on the SwiGLU projections, attention maps, and the config's checks."""


import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.inspection.attention import attention_maps
from keras_vit.models.config import ViTConfig
from keras_vit.training.lora import enable_lora, get_lora_settings, merged_copy
from tests.helpers import np_layer_norm, np_patches, randomize_weights, to_numpy

# Width 32, 2 heads of 16 (RoPE: 4 bands per axis), a 2 x 3 grid, class + register token.
EVA = dict(
    image_size=(16, 24),
    num_classes=5,
    num_layers=2,
    pooling="gap",
    fc_norm=True,
    class_token=True,
    num_register_tokens=1,
    layer_scale_init_value=0.5,
    approximate_gelu=False,
    mlp="swiglu",
    mlp_inner_norm=True,
    key_bias=False,
    attention_inner_norm=True,
    rotary_embedding="eva02",
    rotary_reference_grid=(16, 16),
    rotary_temperature=100.0,
    rotary_grid_offset=0.5,
)


def _images(b=2, h=16, w=24, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (b, h, w, 3)).astype("float32")


@pytest.fixture(scope="module")
def model():
    built = keras_vit.ViT("mu/8", **EVA)
    randomize_weights(built, seed=1)
    return built


def _np_rotary(grid, head_dim, temperature, reference, offset):
    """EVA-02's table in NumPy: sin / cos of (row bands, column bands), each angle twice."""
    bands = temperature ** -(np.arange(head_dim // 4) / (head_dim // 4))
    rows = (np.arange(grid[0]) + offset) * reference[0] / grid[0]
    cols = (np.arange(grid[1]) + offset) * reference[1] / grid[1]
    r, c = np.meshgrid(rows, cols, indexing="ij")
    angles = np.concatenate([r.reshape(-1, 1) * bands, c.reshape(-1, 1) * bands], -1)
    angles = np.repeat(angles, 2, axis=-1)
    return np.sin(angles), np.cos(angles)


def _np_rotate(x, sin, cos):
    """Rotates the interleaved pairs of the last len(sin) tokens of (B, T, H, Dh)."""
    prefix = x.shape[1] - sin.shape[0]
    p = x[:, prefix:]
    turned = np.stack([-p[..., 1::2], p[..., 0::2]], -1).reshape(p.shape)
    rotated = p * cos[None, :, None] + turned * sin[None, :, None]
    return np.concatenate([x[:, :prefix], rotated], 1)


def _np_forward(model, images, return_attention=False):
    n = lambda v: to_numpy(v).astype("float64")  # noqa: E731
    eps = 1e-6
    images = np.asarray(images, "float64")
    enc = model.patch_encoder
    kernel = n(enc.kernel)
    ph, pw, _, d = kernel.shape
    grid = (images.shape[1] // ph, images.shape[2] // pw)
    x = np_patches(images, (ph, pw)) @ kernel.reshape(-1, d) + n(enc.bias)
    prefix = np.concatenate([n(enc.class_embedding), n(enc.register_embeddings)], 1)
    x = np.concatenate([np.broadcast_to(prefix, (len(x), 2, d)), x], 1)
    x = x + n(enc.position_embeddings)
    sin, cos = _np_rotary(grid, 16, 100.0, (16, 16), 0.5)
    maps = []
    for block in model.blocks:
        att, mlp = block.attention, block.swiglu
        h = np_layer_norm(x, n(block.attention_norm.gamma), n(block.attention_norm.beta), eps)
        q = np.einsum("btd,dhk->bthk", h, n(att.query_dense.kernel)) + n(att.query_dense.bias)
        k = np.einsum("btd,dhk->bthk", h, n(att.key_dense.kernel))  # no key bias
        v = np.einsum("btd,dhk->bthk", h, n(att.value_dense.kernel)) + n(att.value_dense.bias)
        q, k = _np_rotate(q, sin, cos), _np_rotate(k, sin, cos)
        logits = np.einsum("bqhd,bkhd->bhqk", q, k) / 4.0  # sqrt(16)
        weights = np.exp(logits - logits.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        maps.append(weights)
        out = np.einsum("bhqk,bkhd->bqhd", weights, v)
        flat = out.reshape(*out.shape[:2], -1)  # inner norm over the concatenated heads
        norm = att.output_norm
        flat = np_layer_norm(flat, n(norm.gamma).reshape(-1), n(norm.beta).reshape(-1), eps)
        out = np.einsum("bqhd,hdo->bqo", flat.reshape(out.shape), n(att.output_dense.kernel))
        x = x + n(block.attention_scale) * (out + n(att.output_dense.bias))
        h = np_layer_norm(x, n(block.mlp_norm.gamma), n(block.mlp_norm.beta), eps)
        gate = h @ n(mlp.gate_dense.kernel) + n(mlp.gate_dense.bias)
        hidden = gate / (1 + np.exp(-gate)) * (h @ n(mlp.up_dense.kernel) + n(mlp.up_dense.bias))
        hidden = np_layer_norm(hidden, n(mlp.norm.gamma), n(mlp.norm.beta), eps)
        y = hidden @ n(mlp.down_dense.kernel) + n(mlp.down_dense.bias)
        x = x + n(block.mlp_scale) * y
    if return_attention:
        return np.stack(maps, axis=1)
    pooled = x[:, 2:].mean(1)
    pooled = np_layer_norm(pooled, n(model.fc_norm.gamma), n(model.fc_norm.beta), eps)
    return pooled @ n(model.head.kernel) + n(model.head.bias)


def _close(got, expected, rtol=1e-5):
    scale = np.abs(expected).max()
    assert scale > 0.1  # not a comparison between zeros
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=rtol * scale)


def test_matches_numpy_forward_and_attention_maps(model):
    x = _images()
    _close(to_numpy(model(x)), _np_forward(model, x))
    _close(attention_maps(model, x), _np_forward(model, x, return_attention=True))
    assert model.rotary_embedding.name == "rotary_embedding"
    assert model.get_layer("encoderblock_0").attention.key_dense.bias is None


def test_keras_file_round_trip(model, tmp_path):
    path = str(tmp_path / "eva.keras")
    model.save(path)
    loaded = keras_vit.load_model(path)
    x = _images()
    np.testing.assert_array_equal(to_numpy(loaded(x)), to_numpy(model(x)))
    assert ViTConfig.from_model(loaded) == model.config == ViTConfig.from_variant("mu/8", **EVA)


def test_int8_quantization_covers_the_swiglu_projections():
    built = keras_vit.ViT("mu/8", **EVA)
    randomize_weights(built, seed=2)
    x = _images()
    before = to_numpy(built(x))
    keras_vit.quantize(built, "int8")  # Keras' model.quantize, one garbage collection
    mlp = built.blocks[0].swiglu
    modes = {mlp.gate_dense.quantization_mode, mlp.up_dense.quantization_mode,
             mlp.down_dense.quantization_mode}  # fmt: skip
    assert modes == {"int8"}
    after = to_numpy(built(x))
    assert np.isfinite(after).all()
    assert np.abs(after - before).max() < 0.1 * np.abs(before).max()


def test_lora_on_swiglu_projections_merges_exactly(model):
    built = keras_vit.ViT("mu/8", **EVA)
    built.set_weights(model.get_weights())
    targets = ("query", "value", "mlp_gate", "mlp_up", "mlp_down")
    enable_lora(built, rank=2, targets=targets)
    assert get_lora_settings(built)["targets"] == targets
    rng = np.random.default_rng(5)
    for w in built.weights:
        if "lora_kernel" in w.path:
            w.assign(rng.normal(0, 0.3, tuple(w.shape)).astype("float32"))
    trainable = {w.path for w in built.trainable_weights}
    assert "encoderblock_1/mlp/down_dense/lora_kernel_b" in trainable
    x = _images()
    out = to_numpy(built(x))
    assert np.abs(out - to_numpy(model(x))).max() > 1e-3  # the adapters act
    _close(to_numpy(merged_copy(built)(x)), out)
    with pytest.raises(ValueError, match=r"mlp='swiglu'\) has no LoRA target 'mlp_dense_1'"):
        enable_lora(keras_vit.ViT("mu/8", **EVA), rank=2, targets=("mlp_dense_1",))


def test_dynamic_size_fit_step():
    options = dict(EVA, dynamic_image_size=True, dropout_rate=0.1, drop_path_rate=0.1)
    built = keras_vit.ViT("mu/8", **options)
    built.compile(
        keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    history = built.fit(_images(b=4, h=24, w=16), np.arange(4) % 5, batch_size=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert built.predict(_images(h=32, w=8), verbose=0).shape == (2, 5)


def test_dinov3_rotary_option_builds_its_table():
    """rotary_embedding="dinov3": the layer's table for the input's grid; the config keeps it."""
    options = dict(image_size=(16, 24), num_layers=1, include_top=False, pooling="gap",
                   position_embedding=None, num_register_tokens=2, rotary_embedding="dinov3",
                   rotary_temperature=100.0, rotary_normalize_coords="max")  # fmt: skip
    built = keras_vit.ViT("mu/8", **options)
    rope = built.rotary_embedding
    assert (rope.kind, rope.normalize_coords, rope.temperature) == ("dinov3", "max", 100.0)
    expected = keras_vit.layers.dinov3_rotary_embedding_2d((2, 3), 16, 100.0, "max")
    np.testing.assert_allclose(to_numpy(rope(_images())), to_numpy(expected))
    config = ViTConfig.from_model(built)
    assert config == ViTConfig.from_dict(config.to_dict())
    assert config == ViTConfig.from_variant("mu/8", **options)


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(mlp="glu"), "mlp must be one of"),
        (dict(rotary_embedding="rope"), "rotary_embedding must be one of"),
        (dict(rotary_reference_grid=16), "Rotary settings need rotary_embedding"),
        (dict(rotary_embedding="eva02", num_heads=16), "head width .* divisible by 4"),
        (dict(rotary_embedding="eva02", rotary_temperature=0), "must be positive"),
        (dict(key_bias=1), "key_bias must be a bool"),
        (dict(rotary_embedding="dinov3", rotary_normalize_coords="mean"), "must be one of"),
        (dict(rotary_embedding="eva02", rotary_normalize_coords="min"), "needs rotary_embed"),
        (dict(rotary_embedding="dinov3", rotary_reference_grid=4), "takes no rotary_reference"),
        (dict(rotary_normalize_coords="max"), "Rotary settings need rotary_embedding"),
    ],
)
def test_config_checks_name_expected_and_received(options, message):
    with pytest.raises(ValueError, match=message):
        ViTConfig.from_variant("mu/8", image_size=16, **options)


def test_old_configs_load_with_the_defaults():
    fields = ViTConfig.from_variant("mu/8", image_size=16).to_dict()
    for name in ("mlp", "mlp_inner_norm", "key_bias", "attention_inner_norm", "rotary_embedding",
                 "rotary_temperature", "rotary_reference_grid", "rotary_grid_offset",
                 "rotary_normalize_coords"):  # fmt: skip
        del fields[name]
    config = ViTConfig.from_dict(fields)
    assert (config.mlp, config.key_bias, config.rotary_embedding) == ("mlp", True, None)
    model = keras_vit.models.encoder.build_model(config)
    assert model.rotary_embedding is None and model.blocks[0].mlp == "mlp"
