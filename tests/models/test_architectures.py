"""The architecture options of timm's and Hugging Face's ViT families, on keras_vit.ViT.

Every option set is checked against timm's forward pass written in NumPy
(`tests.helpers.np_vit_forward`), round-trips through `.keras` and `ViTConfig.from_model`.
"""

import dataclasses
import os

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.models import legacy
from keras_vit.models.config import ViTConfig
from keras_vit.models.encoder import VisionTransformer
from tests.helpers import np_vit_forward, randomize_weights, to_numpy

TINY = dict(image_size=(16, 24), num_classes=5, num_layers=1)
HYBRID_STEM = dict(resnet_units=(1, 1), resnet_width=8, resnet_groups=4)
DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")

# One tiny model per family of options (all built from "mu/8": width 32, 2 heads, MLP 64).
FEATURES = {
    # DeiT distilled with registers and timm's no_embed_class: [cls, dist, reg, reg, patches].
    "distilled_registers_no_embed_class": dict(
        num_register_tokens=2, distillation_token=True, prefix_position_embedding=False
    ),
    # CLIP: norm_pre, QuickGELU, LayerNorm eps 1e-5 (and a pre-logits layer).
    "clip": dict(
        pre_norm=True, activation="quick_gelu", layer_norm_epsilon=1e-5, representation_size=8
    ),
    # SigLIP: MAP head, no class token; with qk-norm and exact GELU.
    "map_qk_norm": dict(pooling="map", qk_norm=True, approximate_gelu=False),
    # timm GAP models: fc_norm on the pooled vector (no encoder_norm), with LayerScale; and
    # BEiT's q/v-only attention biases.
    "gap_fc_norm": dict(
        pooling="gap",
        fc_norm=True,
        num_register_tokens=1,
        layer_scale_init_value=0.5,
        key_bias=False,
    ),
    # A distilled DeiT's pre-logits, (cls + dist) / 2, with registers in the position embedding.
    "distilled_pre_logits_registers": dict(
        distillation_token=True, num_register_tokens=3, include_top=False
    ),
    # MAP with a class token and registers left out of the pooling, fc_norm after it.
    "map_fc_norm_prefix": dict(
        pooling="map", class_token=True, num_register_tokens=2, fc_norm=True, include_top=False
    ),
    # BEiT: no position embedding, a relative position bias table per block, q/v-only biases,
    # LayerScale, average of the patch tokens and fc_norm; and one table shared by the blocks.
    "beit": dict(
        position_embedding=None,
        relative_position_bias="block",
        key_bias=False,
        layer_scale_init_value=0.1,
        pooling="gap",
        class_token=True,
        fc_norm=True,
    ),
    "beit_shared_tokens": dict(
        position_embedding=None,
        relative_position_bias="shared",
        pooling=None,
        include_top=False,
    ),
    # timm's vit_relpos: RelPosMlp per block, no class token, no position embedding; and a
    # shared one with a class token (zero bias rows for it).
    "relpos_mlp": dict(
        position_embedding=None,
        relative_position_bias="mlp",
        relative_position_mlp_dim=16,
        pooling="gap",
        class_token=False,
        fc_norm=True,
        layer_scale_init_value=0.3,
    ),
    "relpos_mlp_shared_token": dict(
        position_embedding=None, relative_position_bias="mlp_shared", pooling="token"
    ),
    # timm's *_18x2_*: two parallel attention and MLP branches per block, LayerScale.
    "parallel": dict(num_parallel=2, layer_scale_init_value=0.2, approximate_gelu=False),
    # Tokens without any final norm (timm fc_norm model, global_pool='').
    "tokens_fc_norm": dict(pooling=None, include_top=False, fc_norm=True),
    # Everything together, two blocks, any image size.
    "everything_dynamic": dict(
        num_register_tokens=2,
        distillation_token=True,
        prefix_position_embedding=False,
        pre_norm=True,
        qk_norm=True,
        activation="quick_gelu",
        dynamic_image_size=True,
        num_layers=2,
    ),
}


def _images(b=2, h=16, w=24, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (b, h, w, 3)).astype("float32")


def _build(options, **extra):
    kwargs = dict(TINY, **options, **extra)
    model = keras_vit.ViT("mu/8", **kwargs)
    randomize_weights(model, seed=1)
    return model, kwargs


@pytest.fixture(scope="module", params=sorted(FEATURES))
def built(request):
    model, kwargs = _build(FEATURES[request.param])
    return request.param, model, kwargs


def _close(got, expected):
    scale = np.abs(expected).max()
    assert scale > 0.1  # not a comparison between zeros
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * scale)


def test_matches_numpy_forward(built):
    _, model, kwargs = built
    x = _images()
    _close(to_numpy(model(x)), np_vit_forward(model, x, **kwargs))


def test_config_round_trip_and_keras_file(built, tmp_path):
    name, model, kwargs = built
    config = ViTConfig.from_variant("mu/8", **kwargs)
    assert ViTConfig.from_model(model) == config == model.config
    read = config
    if not config.include_top:  # no head: the class count is not in the layer graph
        read = dataclasses.replace(config, num_classes=1000)
    assert legacy.read_config(keras.Model(model.inputs, model.outputs, name=model.name)) == read
    path = str(tmp_path / f"{name}.keras")
    model.save(path)
    loaded = keras_vit.load_model(path)
    x = _images()
    np.testing.assert_array_equal(to_numpy(loaded(x)), to_numpy(model(x)))
    assert ViTConfig.from_model(loaded) == config


def test_weight_paths_for_converters():
    """The variable paths a timm / HF converter maps (every option at once)."""
    model, _ = _build(
        dict(num_register_tokens=2, distillation_token=True, pre_norm=True, qk_norm=True)
    )
    paths = {w.path: tuple(w.shape) for w in model.weights}
    expected = {
        "patch_encoder/class_embedding": (1, 1, 32),
        "patch_encoder/distillation_embedding": (1, 1, 32),
        "patch_encoder/register_embeddings": (1, 2, 32),
        "patch_encoder/position_embeddings": (1, 4 + 6, 32),
        "pre_norm/gamma": (32,),
        "encoderblock_0/attention/query/kernel": (32, 2, 16),
        "encoderblock_0/attention/query_norm/gamma": (16,),
        "encoderblock_0/attention/key_norm/beta": (16,),
        "encoderblock_0/attention/attention_output/kernel": (2, 16, 32),
        "head/kernel": (32, 5),
        "head_dist/kernel": (32, 5),
    }
    assert {k: paths.get(k) for k in expected} == expected
    gap, _ = _build(dict(pooling="map", fc_norm=True))
    names = {w.path for w in gap.weights}
    assert {"pooling/latent", "pooling/kv/kernel", "fc_norm/gamma"} <= names
    assert not any(name.startswith("encoder_norm") for name in names)


def test_rmsnorm_everywhere_and_keras_file(tmp_path):
    """norm='rmsnorm' makes every norm an RMSNormalization (patch norm, QK, inner, MAP, ...)."""
    options = dict(
        norm="rmsnorm",
        patch_norm=True,
        pre_norm=True,
        qk_norm=True,
        attention_inner_norm=True,
        mlp="swiglu",
        mlp_inner_norm=True,
        pooling="map",
        fc_norm=True,
    )
    model, _ = _build(options)
    norms = [w.path for w in model.weights if "norm" in w.path.split("/")[-2]]
    assert len(norms) == 10 and all(path.endswith("/scale") for path in norms)
    assert "patch_encoder/patch_norm/scale" in norms and "pooling/norm/scale" in norms
    assert not any("gamma" in w.path or "beta" in w.path for w in model.weights)
    x = _images()
    # The patch norm comes before the position embedding: patch tokens of equal pixels agree
    # up to their positions only when the norm sees the projection alone.
    encoder = model.patch_encoder
    tokens = to_numpy(encoder(x))
    projected = to_numpy(encoder.embedding_norm(encoder.project(x)))
    positions = to_numpy(encoder.patch_position_embedding())
    np.testing.assert_allclose(tokens, projected + positions, rtol=1e-5, atol=1e-6)
    path = str(tmp_path / "rms.keras")
    model.save(path)
    loaded = keras_vit.load_model(path)
    np.testing.assert_array_equal(to_numpy(loaded(x)), to_numpy(model(x)))
    assert loaded.config == model.config and loaded.config.norm == "rmsnorm"


def test_distilled_head_averages_both_classifiers():
    model, kwargs = _build(dict(distillation_token=True, classifier_activation="softmax"))
    x = _images()
    logits = np_vit_forward(model, x, **kwargs)
    expected = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    _close(to_numpy(model(x)), expected)
    assert ViTConfig.from_model(model).classifier_activation == "softmax"


def test_fit_step_and_int8_quantization():
    options = dict(FEATURES["everything_dynamic"], num_layers=1)
    model, _ = _build(options, dropout_rate=0.1, attention_dropout_rate=0.1, drop_path_rate=0.1)
    model.compile(
        keras.optimizers.Adam(1e-3),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    x, y = _images(b=4), np.arange(4) % 5
    history = model.fit(x, y, batch_size=2, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    map_model, _ = _build(dict(pooling="map", qk_norm=True, pre_norm=True))
    before = to_numpy(map_model(x))
    keras_vit.quantize(map_model, "int8")  # Keras' model.quantize, one garbage collection
    attention = map_model.get_layer("encoderblock_0").attention
    assert attention.query_dense.quantization_mode == "int8"
    assert map_model.get_layer("pooling").kv.quantization_mode == "int8"
    after = to_numpy(map_model(x))
    assert after.shape == before.shape and np.isfinite(after).all()
    assert np.abs(after - before).max() < 0.1 * np.abs(before).max()


def test_keras_file_of_main_before_the_attention_layer_loads_identically():
    """A .keras file saved by main at 602138d (Keras' MultiHeadAttention inside the blocks).

    Made with `tests/data/README.md`'s script: ViT("mu/8", image_size=16, num_layers=1,
    num_classes=3, representation_size=8, attention_dropout_rate=0.1,
    layer_scale_init_value=0.5), random weights, under JAX.
    """
    model = keras_vit.load_model(os.path.join(DATA, "vit_main_602138d.keras"))
    with np.load(os.path.join(DATA, "vit_main_602138d.npz")) as data:
        images, logits, tokens = data["images"], data["logits"], data["tokens"]
    np.testing.assert_allclose(to_numpy(model(images)), logits, rtol=1e-6, atol=1e-6)
    features = keras.Model(model.input, model.get_layer("encoder_norm").output)
    np.testing.assert_allclose(to_numpy(features(images)), tokens, rtol=1e-6, atol=1e-6)
    attention = model.get_layer("encoderblock_0").attention
    assert isinstance(attention, keras_vit.MultiHeadSelfAttention)


def test_committed_all_options_file_loads_on_this_backend():
    """A .keras file with every option (MAP head too) saved under JAX: the same outputs here."""
    model = keras_vit.load_model(os.path.join(DATA, "vit_all_options.keras"))
    with np.load(os.path.join(DATA, "vit_all_options.npz")) as data:
        for key in ("small", "large"):
            images, expected = data[f"images_{key}"], data[f"outputs_{key}"]
            np.testing.assert_allclose(to_numpy(model(images)), expected, rtol=1e-5, atol=1e-5)
    config = ViTConfig.from_model(model)
    assert config.dynamic_image_size and config.pooling == "map" and config.qk_norm


@pytest.mark.parametrize("name", ["vit_main_602138d", "vit_all_options"])
def test_committed_plain_functional_files_load_as_the_model_class(name):
    """Files of earlier versions (plain functional models) come back as `VisionTransformer`s.

    Outputs of the file as Keras loads it (the functional graph) and of the model class agree
    within 1e-6 on this backend, and the upgraded model saves and loads as the class.
    """
    path = os.path.join(DATA, f"{name}.keras")
    plain = keras.saving.load_model(path, compile=False)
    assert type(plain).__name__ == "Functional"
    model = keras_vit.load_model(path)
    assert isinstance(model, VisionTransformer) and model.name == plain.name
    assert model.config == legacy.read_config(plain)
    assert [w.path for w in model.weights] == [w.path for w in plain.weights]
    with np.load(os.path.join(DATA, f"{name}.npz")) as data:
        batches = [data[key] for key in data.files if key.startswith("images")]
    for images in batches:
        np.testing.assert_allclose(
            to_numpy(model(images)), to_numpy(plain(images)), rtol=1e-6, atol=1e-6
        )


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(distillation_token=True, pooling="gap"), "distillation_token=True"),
        (dict(distillation_token=True, class_token=False), "class_token=False"),
        (dict(distillation_token=True, representation_size=8), "representation_size"),
        (dict(distillation_token=True, fc_norm=True), "fc_norm=True"),
        (dict(num_register_tokens=-1), "num_register_tokens"),
        (dict(activation="relu"), "activation must be one of"),
        (dict(qk_norm=1), "qk_norm must be a bool"),
        (dict(key_bias=0), "key_bias must be a bool"),
        (dict(relative_position_bias="table"), "relative_position_bias must be one of"),
        (dict(relative_position_mlp_dim=8), "relative_position_mlp_dim needs"),
        (dict(num_parallel=0), "num_parallel"),
        (dict(num_parallel=2, relative_position_bias="mlp"), "block_kind='parallel' takes no"),
        (dict(relative_position_bias="block", pooling="gap"), "class_token=False"),
        (dict(relative_position_bias="shared", num_register_tokens=1), "num_register_tokens=1"),
        (dict(relative_position_bias="block", dynamic_image_size=True), "dynamic_image_size"),
        (dict(dynamic_image_size="yes"), "dynamic_image_size must be a bool"),
        (dict(pooling="map", class_token=False, include_top=True), None),
    ],
)
def test_argument_checks(kwargs, match):
    if match is None:
        assert keras_vit.ViT("mu/8", **dict(TINY, **kwargs)).output_shape == (None, 5)
        return
    with pytest.raises(ValueError, match=match):
        keras_vit.ViT("mu/8", **dict(TINY, **kwargs))


def test_map_pooling_defaults_to_no_class_token():
    assert not ViTConfig.from_variant("mu/8", pooling="map").class_token
    assert ViTConfig.from_variant("mu/8", pooling=None, include_top=False).class_token


def test_dynamic_with_backbone_is_refused():
    cnn = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Conv2D(8, 3, strides=4)])
    with pytest.raises(ValueError, match="dynamic_image_size is not supported with a backbone"):
        keras_vit.ViT("mu/1", backbone=cnn, dynamic_image_size=True, image_size=32)
