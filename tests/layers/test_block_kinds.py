"""keras_vit/layers/block_kinds.py and the block classes it registers: chosen by value, each
checking its own arguments, earlier versions' `TransformerBlock(block_norm=..., num_parallel=...)`
and `.keras` files still loading, and each class's PyTorch adapter equal to the portable path
(outputs and gradients within 1e-6)."""

import os

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.layers import (
    BLOCK_KINDS,
    EncoderBlock,
    ParallelBlock,
    ParallelScalingBlock,
    PostNormBlock,
    SandwichNormBlock,
    TransformerBlock,
    _legacy_layout,
)
from keras_vit.layers.attention import portable_path
from keras_vit.layers.block_kinds import encoder_blocks, register_block_kind
from keras_vit.models.blocks import make_block
from keras_vit.models.config import ViTConfig
from tests.helpers import roundtrip_layer, to_numpy
from tests.layers.test_torch_kernels import (
    _assert_same,
    _both_paths,
    _randomize,
    _tokens,
    torch_only,
)

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")


def test_registry_by_value():
    """Each kind a ViTConfig chooses registered itself (`@register_block_kind`); the sandwich
    block Gemma 4's tower wires itself is a layer, not a kind a config can choose."""
    assert BLOCK_KINDS == {
        "pre": TransformerBlock,
        "post": PostNormBlock,
        "parallel": ParallelBlock,
        "parallel_scaling": ParallelScalingBlock,
    }
    assert SandwichNormBlock not in BLOCK_KINDS.values()
    assert set(encoder_blocks()) == set(BLOCK_KINDS.values())
    with pytest.raises(ValueError, match="Block kind 'pre' is already TransformerBlock"):
        register_block_kind("pre")(PostNormBlock)
    for cls in (TransformerBlock, PostNormBlock, ParallelBlock):
        assert issubclass(cls, EncoderBlock)
    assert not issubclass(PostNormBlock, TransformerBlock)
    assert not issubclass(ParallelBlock, TransformerBlock)


@pytest.mark.parametrize(
    "options,kind",
    [
        ({}, "pre"),
        (dict(block_norm="post"), "post"),
        (dict(num_parallel=2), "parallel"),
        (dict(block_type="parallel_scaling"), "parallel_scaling"),
    ],
)
def test_make_block_picks_the_class_of_the_kind(options, kind):
    config = ViTConfig.from_variant("mu/8", image_size=16, **options)
    assert config.block_kind == kind
    block = make_block(config, 0, 0.0, "encoderblock_0", None)
    assert type(block) is BLOCK_KINDS[kind]


def _old_config(**changes):
    """A `TransformerBlock` layer config as earlier versions wrote it (every argument)."""
    config = TransformerBlock(num_heads=2, mlp_dim=16, name="encoderblock_0").get_config()
    config.update(changes)
    return config


def test_old_transformer_block_configs_make_the_new_classes():
    post = TransformerBlock.from_config(_old_config(block_norm="post", qk_norm=True))
    assert type(post) is PostNormBlock and post.qk_norm and post.block_norm == "post"
    assert post.name == "encoderblock_0"
    parallel = TransformerBlock.from_config(_old_config(num_parallel=3, layer_scale_init_value=0.5))
    assert type(parallel) is ParallelBlock and parallel.num_parallel == 3
    assert parallel.layer_scale_init_value == 0.5
    # Through Keras' deserialization (a saved layer config) and the old constructor call.
    serialized = keras.saving.serialize_keras_object(TransformerBlock(2, 16))
    serialized["config"].update(block_norm="post")
    assert type(keras.saving.deserialize_keras_object(serialized)) is PostNormBlock
    assert type(TransformerBlock(2, 16, 0.0, 0.0, 0.0, 1e-6, True, None, block_norm="post")) is (
        PostNormBlock
    )
    # A pre-norm config stays a TransformerBlock, with the same config as before.
    assert TransformerBlock.from_config(_old_config()).get_config() == _old_config()


def test_each_class_takes_only_its_own_arguments():
    with pytest.raises(ValueError, match="layer_scale_init_value"):
        PostNormBlock(num_heads=2, mlp_dim=16, layer_scale_init_value=0.1)
    for name, value in (("mlp", "swiglu"), ("relative_position_grid", (2, 2)),
                        ("mlp_inner_norm", True), ("attention_inner_norm", True)):  # fmt: skip
        with pytest.raises(ValueError, match=name):
            ParallelBlock(num_heads=2, mlp_dim=16, **{name: value})
    with pytest.raises(ValueError, match=r"num_parallel must be a positive integer.*0"):
        ParallelBlock(num_heads=2, mlp_dim=16, num_parallel=0)
    with pytest.raises(ValueError, match=r"ParallelBlock.*takes no attention_only_layer_scale"):
        TransformerBlock(2, 16, num_parallel=2, layer_scale_init_value=0.1,
                         attention_only_layer_scale=True)  # fmt: skip
    with pytest.raises(ValueError, match="attention_type='differential' takes no parallel"):
        TransformerBlock(2, 16, num_parallel=2, attention_type="differential")
    with pytest.raises(ValueError, match=r"num_parallel=1, block_norm='pre'"):

        class Custom(TransformerBlock):
            pass

        Custom(2, 16, block_norm="post")


def test_new_classes_round_trip_with_their_own_configs(tmp_path):
    x = _tokens(width=16)
    post = PostNormBlock(num_heads=2, mlp_dim=24, qk_norm=True, mlp_inner_norm=True)
    parallel = ParallelBlock(num_heads=2, mlp_dim=24, num_parallel=2, layer_scale_init_value=0.3)
    for block in (post, parallel):
        block.build(x.shape)
        for w in block.weights:
            w.assign(np.random.default_rng(1).normal(0, 0.3, tuple(w.shape)).astype("float32"))
        roundtrip_layer(block, x, tmp_path)
        config = block.get_config()
        assert type(block).from_config(config).get_config() == config
        assert type(TransformerBlock.from_config(config)) is type(block)  # as before the split
    assert "layer_scale_init_value" not in post.get_config()
    assert (
        "mlp" not in parallel.get_config() and "relative_position_grid" not in parallel.get_config()
    )


def test_legacy_group_names():
    legacy = _legacy_layout._legacy_path
    assert legacy("layers/post_norm_block_3/attention") == "layers/transformer_block_3/attention"
    assert legacy("layers/parallel_block") == "layers/transformer_block"
    assert legacy("layers/parallel_scaling_block") == "layers/parallel_scaling_block"
    assert legacy("layers/transformer_block_1/mlp_norm") == "layers/transformer_block_1/mlp_norm"


@pytest.mark.parametrize("name", ["vit_post_norm_d5404a7", "vit_parallel_d5404a7"])
def test_keras_files_saved_before_the_split_load_identically(name, tmp_path):
    """ViTs saved by main at d5404a7 (`TransformerBlock(block_norm="post" / num_parallel=3)`,
    made by tests/data/make_block_kinds_fixture.py under JAX): same outputs, new classes, and
    the loaded model saves and loads again (under the new group names)."""
    path = os.path.join(DATA, f"{name}.keras")
    model = keras_vit.load_model(path)
    kind = PostNormBlock if "post" in name else ParallelBlock
    assert all(type(block) is kind for block in model.blocks)
    with np.load(os.path.join(DATA, f"{name}.npz")) as data:
        images, logits = data["images"], data["logits"]
    np.testing.assert_allclose(to_numpy(model(images)), logits, rtol=1e-5, atol=1e-5)
    again = keras.saving.load_model(path, compile=False)  # Keras' own loader too
    np.testing.assert_allclose(to_numpy(again(images)), logits, rtol=1e-5, atol=1e-5)
    model.save(tmp_path / "again.keras")
    reloaded = keras_vit.load_model(tmp_path / "again.keras")
    np.testing.assert_allclose(to_numpy(reloaded(images)), logits, rtol=1e-5, atol=1e-5)
    assert [w.path for w in reloaded.weights] == [w.path for w in model.weights]


# --- the PyTorch adapters ------------------------------------------------------------------------


def _kind_model(cls, num_blocks=2, width=16, heads=2, mlp=24, tokens=5, **options):
    inputs = keras.Input((tokens, width), name="tokens")
    x = inputs
    for i in range(num_blocks):
        x = cls(heads, mlp, name=f"block_{i}", **options)(x)
    return keras.Model(inputs, x, name="blocks")


KIND_OPTIONS = {
    "post_default": (PostNormBlock, {}),
    "post_options": (
        PostNormBlock,
        dict(qk_norm=True, activation="quick_gelu", mlp_inner_norm=True, key_bias=False),
    ),
    "post_exact_gelu_remat": (PostNormBlock, dict(approximate_gelu=False, remat=True)),
    "post_relative_position": (PostNormBlock, dict(relative_position_grid=(2, 2))),
    "parallel_default": (ParallelBlock, dict(num_parallel=2)),
    "parallel_options": (
        ParallelBlock,
        dict(num_parallel=3, qk_norm=True, layer_scale_init_value=0.5, approximate_gelu=False),
    ),
    "parallel_remat_quick_gelu": (
        ParallelBlock,
        dict(num_parallel=2, remat=True, activation="quick_gelu", key_bias=False),
    ),
    "post_dropout": (PostNormBlock, dict(dropout_rate=0.2, drop_path_rate=0.3)),
    "parallel_dropout": (
        ParallelBlock,
        dict(num_parallel=2, dropout_rate=0.2, drop_path_rate=0.3, layer_scale_init_value=0.4),
    ),
}


@torch_only
@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("name", list(KIND_OPTIONS))
def test_kind_adapter_equals_portable(name, training):
    cls, options = KIND_OPTIONS[name]
    model = _kind_model(cls, **options)
    _randomize(model)
    _assert_same(*_both_paths(model, _tokens(batch=4), training=training))


@torch_only
@pytest.mark.parametrize("cls,adapter", [(TransformerBlock, "transformer_block"),
                                         (PostNormBlock, "post_norm_block"),
                                         (ParallelBlock, "parallel_block")])  # fmt: skip
def test_each_class_takes_its_own_adapter(cls, adapter, monkeypatch):
    from keras_vit.layers import _torch_kernels

    calls = []
    original = getattr(_torch_kernels, adapter)

    def counting(block, *args):
        calls.append(block.name)
        return original(block, *args)

    monkeypatch.setattr(_torch_kernels, adapter, counting)
    block = cls(2, 24)
    x = _tokens()
    with portable_path(False):
        fast = to_numpy(block(x))
    assert calls == [block.name]
    with portable_path():
        np.testing.assert_allclose(fast, to_numpy(block(x)), rtol=1e-6, atol=1e-6)
    assert calls == [block.name]
    # RMSNorm blocks keep the portable path.
    calls.clear()
    with portable_path(False):
        cls(2, 24, norm="rmsnorm")(x)
    assert calls == []
