"""Every layout rule per block kind and family (keras_vit/layers/sharding.py, distribution/
parallel.py): the roles of tiny models' variables, read by walking their layers (no devices).
Models are built abstractly (no memory) where a `ViTConfig` describes them.

On TensorFlow and PyTorch only the refusal naming JAX is checked: Keras shards variables on
JAX only, and the layouts are the same computation on every backend.
"""

import keras
import pytest

import keras_vit
from keras_vit import distribution as kd
from keras_vit.distribution.abstract import abstract
from keras_vit.distribution.parallel import walk_variables
from keras_vit.layers.sharding import role_of

JAX_ONLY = pytest.mark.skipif(keras.backend.backend() != "jax", reason="keras.distribution")
TINY = dict(image_size=16, num_classes=4, num_layers=1)

# name: (ViT options or a builder, {path: expected axes under fsdp_tp on (2, 2)})
CASES = {
    # (min_shard_bytes=0: FSDP takes the biases and norms too)
    "pre": ({}, {
        "encoderblock_0/attention/query/kernel": ("batch", "model", None),
        "encoderblock_0/attention/query/bias": ("model", "batch"),
        "encoderblock_0/attention/attention_output/kernel": ("model", None, "batch"),
        "encoderblock_0/attention/attention_output/bias": ("batch",),
        "encoderblock_0/attention_norm/gamma": ("batch",),
        "encoderblock_0/mlp_dense_1/kernel": ("batch", "model"),
        "encoderblock_0/mlp_dense_1/bias": ("model",),
        "encoderblock_0/mlp_dense_2/kernel": ("model", "batch"),
        "patch_encoder/kernel": ("batch", None, None, "model"),
        "patch_encoder/position_embeddings": (None, None, "model"),
        "head/kernel": ("batch", "model"),  # an unclaimed projection: its 4 outputs split
    }),
    "post": (dict(block_kind="post"), {
        "encoderblock_0/mlp_dense_2/kernel": ("model", "batch"),
    }),
    "parallel": (dict(num_parallel=2, layer_scale_init_value=0.1), {
        "encoderblock_0/attention_1/query/kernel": ("batch", "model", None),
        "encoderblock_0/mlp_dense_1_1/kernel": ("batch", "model"),
        "encoderblock_0/mlp_dense_2_1/kernel": ("model", "batch"),
    }),
    "parallel_scaling": (dict(block_kind="parallel_scaling"), {
        "encoderblock_0/in_proj/kernel": ("batch", "model"),
        "encoderblock_0/attention_out/kernel": ("model", "batch"),
        "encoderblock_0/mlp_out/kernel": ("model", "batch"),
    }),
    "parallel_scaling_differential": (
        dict(block_kind="parallel_scaling", attention_type="differential"),
        {"encoderblock_0/in_proj/kernel": ("batch", "model")},
    ),
    "differential": (dict(attention_type="differential"), {
        "encoderblock_0/attention/query/kernel": ("batch", "model", None),
        "encoderblock_0/attention/value/kernel": ("batch", "model", None),
        "encoderblock_0/attention/attention_output/kernel": ("model", None, "batch"),
    }),
    "swiglu": (dict(mlp="swiglu", mlp_inner_norm=True, norm="rmsnorm"), {
        "encoderblock_0/mlp/gate_dense/kernel": ("batch", "model"),
        "encoderblock_0/mlp/up_dense/kernel": ("batch", "model"),
        "encoderblock_0/mlp/down_dense/kernel": ("model", "batch"),
    }),
    "gqa_one_kv_head": (dict(num_key_value_heads=1), {
        "encoderblock_0/attention/query/kernel": ("batch", "model", None),
        "encoderblock_0/attention/key/kernel": ("batch", None, None),  # whole on `model`
    }),
    "relative_position_tables": (
        dict(position_embedding=None, relative_position_bias="block", key_bias=False),
        {"encoderblock_0/relative_position_bias/relative_position_bias_table": ("batch", "model")},
    ),
    "registers_map_head": (dict(pooling="map", num_register_tokens=2, class_token=False), {
        "pooling/q/kernel": ("batch", "model"),
        "pooling/kv/kernel": ("batch", "model"),
        "pooling/proj/kernel": ("model", "batch"),
        "pooling/mlp_fc2/kernel": ("model", "batch"),
    }),
    "naflex": (dict(naflex=True), {
        "patch_encoder/kernel": ("batch", None, None, "model"),
        "encoderblock_0/mlp_dense_1/kernel": ("batch", "model"),
    }),
    "hybrid_stem": (dict(image_size=64, resnet_units=(1, 1), resnet_width=8, resnet_groups=4), {
        "encoderblock_0/attention/query/kernel": ("batch", "model", None),
    }),
}


def _check(model, expected, min_shard_bytes=0):
    layouts = kd.variable_layouts(model, "fsdp_tp", (2, 2), min_shard_bytes=min_shard_bytes)
    for path, axes in expected.items():
        assert layouts[path][0] == axes, (path, layouts[path])
    # Every projection inside a keras_vit layer has a declared role (never the generic rule).
    for chain, variable in walk_variables(model):
        role, source = role_of(chain, variable.name)
        owners = [type(layer).__module__ for layer in chain[1:-1]]
        ours = any(module.startswith("keras_vit.layers") for module in owners)
        if ours and variable.name == "kernel":
            assert source != "generic", (variable.path, role, source)
    return layouts


@JAX_ONLY
@pytest.mark.parametrize("name", sorted(CASES))
def test_block_kinds_and_families(name):
    options, expected = CASES[name]
    model = kd.abstract_model("mu/8", **{**TINY, **options})
    # min_shard_bytes=0: every variable must shard (or the walk raises), norms included.
    layouts = _check(model, expected)
    assert all(any(a is not None for a in axes) for axes, _, _ in layouts.values())


@JAX_ONLY
def test_mae_decoder_lora_and_gemma4():
    from keras_vit.families.gemma4.config import Gemma4Config
    from keras_vit.families.gemma4.model import Gemma4VisionTower
    from keras_vit.models.mae import build_mae_model

    mae = abstract(lambda: build_mae_model(
        "mu/8", image_size=16, num_layers=1, decoder_hidden_dim=16, decoder_num_layers=1,
        decoder_num_heads=2, decoder_mlp_dim=32,
    ))  # fmt: skip
    name = mae.name
    layouts = _check(mae, {
        f"{name}/decoder_pos_embed": (None, None, "model"),
        "decoder_embed/kernel": ("batch", "model"),
        "decoder_pred/kernel": ("batch", "model"),
    })  # fmt: skip
    decoder = [p for p in layouts if p.startswith("decoder_block_0/attention/query/kernel")]
    assert decoder and layouts[decoder[0]][0] == ("batch", "model", None)

    def lora():
        model = keras_vit.ViT("mu/8", **TINY)
        return keras_vit.enable_lora(model, rank=2, targets=("query", "mlp_dense_2"))

    model = abstract(lora)
    layouts = _check(model, {
        "encoderblock_0/attention/query/kernel": ("batch", "model", None),
        "encoderblock_0/attention/query/lora_kernel_a": ("batch", None, None),
        "encoderblock_0/mlp_dense_2/lora_kernel_b": (None, "batch"),
    })  # fmt: skip
    assert layouts["encoderblock_0/mlp_dense_2/lora_kernel_a"][1] == "row"

    def gemma4():
        tower = Gemma4VisionTower(Gemma4Config(
            image_size=24, patch_size=4, hidden_dim=32, num_layers=1, num_heads=2, head_dim=16,
            mlp_dim=64, position_table_size=12, pooling_kernel_size=3, clip=True, num_classes=4,
        ))  # fmt: skip
        tower.build((None, 24, 24, 3))
        return tower

    tower = abstract(gemma4)
    layouts = _check(tower, {})
    roles = {path: (role, source) for path, (_, role, source) in layouts.items()}
    prefix = tower.name  # a subclassed model's variables are under its name
    assert roles[f"{prefix}/block_0/attention/query/kernel"] == ("column", "NormedSelfAttention")
    assert roles[f"{prefix}/block_0/mlp/down_dense/kernel"] == ("row", "GatedMLP")
    assert roles[f"{prefix}/patch_embedding/kernel"] == ("width", "TablePatchEmbedding")


@JAX_ONLY
def test_layout_map_of_exact_paths():
    mesh = keras.distribution.DeviceMesh((1, 1), ["batch", "model"], devices=["cpu:0"])
    layout_map = kd.layout_map(mesh, "fsdp_tp", "mu/8", min_shard_bytes=0)
    layout = layout_map["encoderblock_0/attention/query/kernel"]
    assert tuple(layout.axes) == (None, None, None)  # a mesh of one device shards nothing
    # Keys are escaped exact paths: a similar path matches nothing.
    assert layout_map["xencoderblock_0/attention/query/kernel"] is None
    with pytest.raises(ValueError, match=r"axes \('batch', 'model'\)"):
        kd.layout_map(
            keras.distribution.DeviceMesh((1,), ["data"], devices=["cpu:0"]), "fsdp", "mu/8"
        )


@pytest.mark.skipif(keras.backend.backend() == "jax", reason="the refusal off JAX")
def test_other_backends_are_refused_naming_jax():
    with pytest.raises(ValueError, match="JAX only.*KERAS_BACKEND=jax"):
        kd.model_parallel("fsdp")
    with pytest.raises(ValueError, match="JAX only"):
        kd.memory_plan("mu/8", (1, 1), strategy="fsdp", batch_size=2)


@pytest.mark.slow  # four XLA compiles of the training step (depths 1 and 2, two batches)
@JAX_ONLY
def test_memory_plan_of_a_tiny_model_on_one_device():
    """The plan's state entries are the variables' bytes (a mesh of one device splits nothing);
    its activations come from two compiled steps (depths 1 and 2) and grow with the batch."""
    import math

    model = kd.abstract_model("mu/8", image_size=16, num_classes=4, num_layers=3)
    nbytes = sum(math.prod(v.shape) * 4 for v in model.weights)
    config = keras_vit.ViTConfig.from_variant("mu/8", image_size=16, num_classes=4, num_layers=3)
    small = kd.memory_plan(config, (1, 1), strategy="fsdp", batch_size=2)
    large = kd.memory_plan(config, (1, 1), strategy="fsdp", optimizer="sgd", batch_size=8)
    assert small["params"] == small["gradients"] == nbytes
    assert small["optimizer"] == 2 * nbytes and large["optimizer"] == 0  # AdamW's two moments
    assert 0 < small["activations"] < large["activations"]
    assert small["total"] == sum(small[k] for k in ("params", "gradients", "optimizer",
                                                    "activations"))  # fmt: skip
    with pytest.raises(ValueError, match="batch_size 3 does not split.*multiple of 2"):
        kd.memory_plan(config, (2, 1), strategy="fsdp", batch_size=3)
    with pytest.raises(ValueError, match="optimizer must be one of"):
        kd.memory_plan(config, (1, 1), strategy="fsdp", optimizer="adafactor", batch_size=2)
