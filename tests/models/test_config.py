"""Tests for keras_vit/models/config.py: the one ViTConfig behind every builder."""

import dataclasses
import inspect
import warnings

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.models import legacy, mpp, vit
from keras_vit.models.config import HYBRID_KWARGS, ViTConfig
from keras_vit.models.encoder import VisionTransformer, build_model
from tests.helpers import backend_independent, randomize_weights, to_numpy

TINY = dict(image_size=32, num_classes=5)
TINY_STEM = dict(resnet_units=(1, 1), resnet_width=8, resnet_groups=4)


def test_from_variant_takes_the_table_and_overrides_win():
    config = ViTConfig.from_variant("B/16")
    assert (config.num_layers, config.hidden_dim, config.mlp_dim, config.num_heads) == (
        12,
        768,
        3072,
        12,
    )
    assert (config.patch_size, config.image_size) == ((16, 16), (224, 224))
    assert config.num_classes == 1000
    assert config.name == "vit_b16" and config.class_token and not config.is_hybrid
    custom = ViTConfig.from_variant(
        "B/16", num_layers=6, patch_size=(8, 4), image_size=(32, 48), name="custom"
    )
    assert (custom.num_layers, custom.hidden_dim, custom.patch_size) == (6, 768, (8, 4))
    assert (custom.image_size, custom.name, custom.grid_size) == ((32, 48), "custom", (4, 12))
    # None keeps the table (what ViT's signature defaults mean); gap drops the class token.
    config = ViTConfig.from_variant("S/16", num_layers=None, image_size=None, pooling="gap")
    assert (config.num_layers, config.image_size, config.class_token) == (12, (224, 224), False)
    with pytest.raises(TypeError, match=r"Unknown ViT arguments \['depth'\]"):
        ViTConfig.from_variant("B/16", depth=3)


def test_hybrid_config():
    config = ViTConfig.from_variant("R50+B/16")
    assert config.is_hybrid and config.resnet_units == (3, 4, 9)
    assert (config.resnet_width, config.resnet_groups, config.patch_size) == (64, 32, (1, 1))
    assert config.grid_size == (14, 14) and config.name == "vit_r50_b16"
    tiny = ViTConfig.from_variant("mu/1", **{**TINY_STEM, "resnet_units": [1, 1]}, **TINY)
    assert tiny.resnet_units == (1, 1) and tiny.grid_size == (4, 4)
    # A backbone replaces the code's ResNet stem; its grid shows once it runs.
    backbone = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Conv2D(4, 3, strides=4)])
    config = ViTConfig.from_variant("R50+B/16", backbone=backbone, image_size=32)
    assert config.resnet_units is None and config.backbone is backbone and config.is_hybrid
    assert config.grid_size is None
    assert ViTConfig.field_names("hybrid") == HYBRID_KWARGS
    # The stem's numerics default to the official ones; timm's round-trip through a model.
    assert (config.resnet_conv_epsilon, config.resnet_conv_epsilon_mode) == (None, None)
    official = ViTConfig.from_variant("mu/1", **TINY_STEM, **TINY)
    assert (official.resnet_conv_epsilon, official.resnet_conv_epsilon_mode) == (1e-5, "std")
    assert official.resnet_norm_epsilon == 1e-6
    timm_like = dict(
        resnet_conv_epsilon=1e-8, resnet_conv_epsilon_mode="variance", resnet_norm_epsilon=1e-5
    )
    config = ViTConfig.from_variant("mu/1", **TINY_STEM, **TINY, **timm_like)
    model = build_model(config)
    assert model.get_layer("block2_unit1_conv2").epsilon_mode == "variance"
    assert model.get_layer("block1_unit1_gn3").epsilon == 1e-5
    assert ViTConfig.from_model(model) == config
    assert legacy.read_config(_as_functional(model)) == config


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(num_heads=3), r"num_heads must divide hidden_dim\. .*hidden_dim=32, num_heads=3"),
        (dict(image_size=30), r"height must be divisible.*image_size=\(30, 30\), patch_size=\(8"),
        (dict(pooling="max"), r"pooling must be one of \(.*'token_gap', None\).*'max'"),
        (dict(pooling=None), "pooling=None.*Received: pooling=None, include_top=True"),
        (dict(class_token=False), "pooling='token' needs a class token"),
        (dict(class_token=False, pooling="token_gap"), "pooling='token_gap' needs a class token"),
        (dict(num_layers=0), "num_layers must be a positive integer. Received: num_layers=0"),
        (dict(dropout_rate=1.5), r"dropout_rate must be a number in \[0, 1\). .*=1\.5"),
        (dict(representation_size=-1), "representation_size=-1"),
        (dict(resnet_width=8), "Hybrid arguments need a hybrid variant code"),
        (dict(resnet_norm_epsilon=1e-5), "Hybrid arguments need a hybrid variant code"),
        (dict(**TINY_STEM, resnet_conv_epsilon=0), "resnet_conv_epsilon must be a positive"),
        (dict(**TINY_STEM, resnet_conv_epsilon_mode="var"), "resnet_conv_epsilon_mode must be"),
        (dict(resnet_units=(1, 0)), r"resnet_units must be .*Received: resnet_units=\(1, 0\)"),
        (dict(resnet_units=(1,), resnet_width=12, resnet_groups=8), "resnet_width=12"),
        (dict(resnet_units=(1, 1), image_size=(40, 32)), r"total stride.*\(40, 32\)"),
        (dict(backbone="resnet50"), "backbone must be a Keras model or layer"),
        (dict(norm="batchnorm"), r"norm must be one of \('layernorm', 'rmsnorm'\)\. .*'batchnorm'"),
        (dict(patch_norm=1), "patch_norm must be a bool. Received: patch_norm=1"),
        (dict(patch_norm=True, naflex=True, pooling="gap"), "patch_norm is not implemented for Na"),
        (dict(map_prefix_tokens=True), "map_prefix_tokens=True need pooling='map'"),
        (dict(pooling="map", map_num_heads=3), "map_num_heads must divide hidden_dim"),
        (dict(final_norm=0), "final_norm must be a bool"),
        (dict(block_norm="mid"), r"block_norm must be one of \('pre', 'post'\)\. .*'mid'"),
        (dict(block_kind="post", layer_scale_init_value=0.1), "layer_scale_init_value=0.1"),
    ],
)
def test_validation_errors_name_expected_and_received(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ViTConfig.from_variant("mu/8", **{**TINY, **kwargs})


def test_frozen_and_replace_validates_again():
    config = ViTConfig.from_variant("mu/8", **TINY)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.num_layers = 3
    deeper = dataclasses.replace(config, num_layers=3)
    assert (deeper.num_layers, config.num_layers) == (3, 2)
    with pytest.raises(ValueError, match="num_heads must divide hidden_dim"):
        dataclasses.replace(config, num_heads=5)
    assert hash(config) == hash(ViTConfig.from_variant("mu/8", **TINY))


def test_to_kwargs_and_field_groups():
    config = ViTConfig.from_variant("mu/8", **TINY)
    assert ViTConfig(**config.to_kwargs()) == config
    groups = ("size", "input", "head", "encoder", "hybrid", "name")
    assert sum(len(ViTConfig.field_names(g)) for g in groups) == len(ViTConfig.field_names())
    assert set(config.to_kwargs("size")) == {
        "patch_size",
        "num_layers",
        "hidden_dim",
        "mlp_dim",
        "num_heads",
    }
    # MPP's encoder arguments are the size and encoder groups (the 14 keys it always took, and
    # the 10 architecture options of timm's families: registers, distillation token, prefix
    # position rows, pre-norm, qk-norm, activation, key bias, relative position bias and MLP,
    # parallel branches;
    # NaFlex's 4 position-table resize options; the 7 of EVA / EVA-02: mlp, mlp_inner_norm,
    # attention_inner_norm, rotary_embedding and its 3 settings; the 2 of AIMv2: norm,
    # patch_norm; DINOv3's rotary_normalize_coords; Perception Encoder's final_norm;
    # attention_type: differential attention; Sapiens2's num_key_value_heads and
    # attention_only_layer_scale; block_kind, which replaced block_norm and block_type in
    # issue 58).
    assert set(mpp.ENCODER_KEYS) == set(ViTConfig.field_names("size", "encoder"))
    assert len(mpp.ENCODER_KEYS) == 44  # + patch_dropout_rate (issue 44), - 1 (issue 58)
    with pytest.raises(ValueError, match="Unknown field groups"):
        ViTConfig.field_names("sizes")


def test_vit_signature_is_the_config():
    """ViT's keyword arguments and the config's fields are one list (plus variant and weights)."""
    params = set(inspect.signature(vit.ViT).parameters) - {"variant", "weights", "hybrid_kwargs"}
    assert params == set(ViTConfig.field_names()) - set(HYBRID_KWARGS)
    signature = inspect.signature(vit.ViT).parameters
    fields = {f.name: f.default for f in dataclasses.fields(ViTConfig)}
    for name in params:
        # None in ViT's signature means "the variant table's value" (sizes) or the field default.
        keeps = name in ViTConfig.field_names("size") + ("image_size", "num_classes", "name")
        keeps = keeps or name in ("block_kind", "num_parallel")  # None: implied (issue 58)
        assert signature[name].default == (None if keeps else fields[name]), name


def test_every_option_documented_once():
    """Each field is in exactly one entry of config_docs.OPTIONS, which both ViTConfig's and
    ViT's docstrings show (generated, not copied); ViT's own entries document the rest."""
    from keras_vit.models import config_docs

    names = config_docs.documented_names()
    assert sorted(names) == sorted(ViTConfig.field_names())  # once each, nothing else
    for name in ViTConfig.field_names():
        assert f"        {name}" in ViTConfig.__doc__ or f", {name}" in ViTConfig.__doc__, name
    args = vit.ViT.__doc__.split("    Args:\n")[1].split("\n\n    Returns:")[0]
    args = "\n".join(line[8:] for line in args.splitlines()).replace("**hybrid", "hybrid")
    # ViT's top-level entries are its signature; the hybrid fields are under **hybrid_kwargs.
    assert sorted(config_docs.documented_names(args)) == sorted(
        inspect.signature(vit.ViT).parameters
    )
    hybrid = args.split("hybrid_kwargs:")[1].split("\n", 1)[1]
    hybrid = "\n".join(line[4:] for line in hybrid.splitlines())
    assert sorted(config_docs.documented_names(hybrid)) == sorted(HYBRID_KWARGS)


def test_named_builders_show_vit_signature():
    params = inspect.signature(vit.ViTB16).parameters
    assert list(params) == list(inspect.signature(vit.ViT).parameters)[1:]


def _same_architecture(a, b):
    assert [layer.name for layer in a.layers] == [layer.name for layer in b.layers]
    assert [tuple(w.shape) for w in a.weights] == [tuple(w.shape) for w in b.weights]
    for la, lb in zip(a.layers, b.layers, strict=True):
        if not isinstance(la, keras.layers.InputLayer):
            config_a, config_b = la.get_config(), lb.get_config()
            assert config_a == config_b, la.name


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(),
        dict(pooling="gap", representation_size=12, classifier_activation="softmax"),
        dict(
            image_size=(16, 32),
            num_channels=1,
            position_embedding="sincos2d",
            layer_scale_init_value=0.1,
            dropout_rate=0.1,
            attention_dropout_rate=0.2,
            drop_path_rate=0.3,
            approximate_gelu=False,
            layer_norm_epsilon=1e-5,
            remat=True,
        ),
        # Without a head the class count is not in the model: the default comes back.
        dict(include_top=False, pooling=None, class_token=False, num_classes=1000),
        dict(patch_size=1, **TINY_STEM),
        dict(block_kind="post", pooling="gap", class_token=False, fc_norm=True),
    ],
    ids=["default", "gap_head", "options", "tokens", "resnet_stem", "post_norm"],
)
def test_round_trip_model_to_config(kwargs, tmp_path):
    config = ViTConfig.from_variant("mu/8", **{**TINY, **kwargs})
    model = build_model(config)
    assert ViTConfig.from_model(model) == config == model.config
    # The reader of earlier versions' plain functional models reads the same from the graph.
    assert legacy.read_config(_as_functional(model)) == config
    # The same through a .keras file, and the rebuilt model has the same layers and weights.
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, VisionTransformer)
    assert ViTConfig.from_model(loaded) == config
    _same_architecture(build_model(ViTConfig.from_model(loaded)), model)


def _as_functional(model):
    """The plain functional model of `model`'s graph: what earlier versions' builders made."""
    return keras.Model(model.inputs, model.outputs, name=model.name)


def test_round_trip_of_a_backbone_hybrid_and_of_vit():
    inputs = keras.Input((32, 32, 3))
    features = keras.layers.Conv2D(8, 3, strides=4, padding="same")(inputs)
    backbone = keras.Model(inputs, features, name="cnn")
    model = keras_vit.ViT("mu/1", backbone=backbone, **TINY)
    config = model.config
    assert config.backbone is backbone and config.grid_size is None
    assert legacy.read_config(_as_functional(model)) == config
    assert model.stem is backbone
    assert config == ViTConfig.from_variant("mu/1", backbone=backbone, **TINY)
    # ViT(...) builds exactly what its config describes.
    model = keras_vit.ViT("mu/8", representation_size=8, **TINY)
    randomize_weights(model)
    rebuilt = build_model(ViTConfig.from_model(model))
    _same_architecture(rebuilt, model)
    rebuilt.set_weights(model.get_weights())
    x = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    np.testing.assert_array_equal(to_numpy(rebuilt(x)), to_numpy(model(x)))


def test_config_from_model_errors():
    plain = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    with pytest.raises(ValueError, match="PatchEncoder named 'patch_encoder'"):
        legacy.read_config(plain)
    with pytest.raises(ValueError, match="needs a keras.Model"):
        legacy.read_config("model.keras")
    with pytest.raises(ValueError, match="needs a model built by keras_vit"):
        ViTConfig.from_model(plain)
    # A plain functional model that is no whole ViT (here its blocks' feature maps) stays.
    features = keras_vit.feature_extractor(keras_vit.ViT("mu/8", **TINY), [0, 1])
    assert legacy.upgrade(features) is features


def test_std_conv_is_one_registered_class_everywhere():
    from keras_vit.layers.std_conv import StdConv2D

    assert keras_vit.StdConv2D is keras_vit.layers.StdConv2D is StdConv2D
    assert keras.saving.get_registered_name(StdConv2D) == "keras_vit>StdConv2D"


def test_block_type_and_attention_type_checks():
    tiny = dict(patch_size=8, num_layers=1, hidden_dim=16, mlp_dim=32, num_heads=2)
    with pytest.raises(ValueError, match="block_type must be one of"):
        ViTConfig(**tiny, block_type="parallel")  # earlier versions' name, still checked
    with pytest.raises(ValueError, match="takes no parallel branches.*num_parallel=2"):
        ViTConfig(**tiny, block_type="parallel_scaling", num_parallel=2)
    with pytest.raises(ValueError, match="takes no parallel branches.*num_parallel=2"):
        ViTConfig(**tiny, block_kind="parallel_scaling", num_parallel=2)
    with pytest.raises(ValueError, match="2 \\* num_heads to divide hidden_dim"):
        ViTConfig(**{**tiny, "hidden_dim": 6}, attention_type="differential")
    with pytest.raises(ValueError, match="attention_type='differential'.*rotary_embedding"):
        ViTConfig(**tiny, attention_type="differential", rotary_embedding="eva02")


# Issue 58: the block kind is one field, `block_kind`, chosen by value from BLOCK_KINDS;
# earlier versions' block_type / block_norm (and num_parallel > 1 alone) map onto it.
MU = dict(image_size=32, num_layers=1)


@pytest.mark.parametrize("kind", sorted(keras_vit.layers.BLOCK_KINDS))
def test_block_kind_chooses_the_block_class_by_value(kind):
    model = keras_vit.ViT("mu/8", block_kind=kind, **MU)
    assert type(model.blocks[0]) is keras_vit.layers.BLOCK_KINDS[kind]
    config = model.config
    assert config.block_kind == kind and config.num_parallel == (2 if kind == "parallel" else 1)
    written = config.to_dict()  # what get_config (and a .keras file) carries
    assert written["block_kind"] == kind and ("num_parallel" in written) == (kind == "parallel")
    assert not {"block_type", "block_norm"} & set(written)
    assert ViTConfig.from_dict(written) == config == VisionTransformer.from_config(
        model.get_config()
    ).config


LEGACY = [
    (dict(block_norm="post"), dict(block_kind="post")),
    (dict(block_type="parallel_scaling"), dict(block_kind="parallel_scaling")),
    (dict(num_parallel=3), dict(block_kind="parallel", num_parallel=3)),
    (dict(block_norm="pre", block_type="standard", num_parallel=1), dict(block_kind="pre")),
    (dict(block_norm="pre", num_parallel=2), dict(block_kind="parallel")),
]


@pytest.mark.parametrize("old, new", LEGACY, ids=["post", "scaling", "parallel", "pre", "both"])
def test_old_keywords_build_the_same_model(old, new):
    """ViT(block_norm=..., block_type=..., num_parallel=...) still works (block_type and
    block_norm with a DeprecationWarning): the same config, layers and outputs as block_kind."""
    warns = {"block_type", "block_norm"} & set(old)
    with pytest.warns(DeprecationWarning, match="block_kind") if warns else _no_warning():
        model = keras_vit.ViT("mu/8", **MU, **old)
    expected = keras_vit.ViT("mu/8", **MU, **new)
    assert model.config == expected.config
    _same_architecture(model, expected)
    randomize_weights(expected)
    model.set_weights(expected.get_weights())
    x = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    np.testing.assert_array_equal(to_numpy(model(x)), to_numpy(expected(x)))


def _no_warning():
    import contextlib

    @contextlib.contextmanager
    def strict():
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            yield

    return strict()


@backend_independent  # configs only: no layer, variable or op is made
def test_old_config_dicts_read_as_the_same_kind():
    """The config dicts earlier versions wrote (in every .keras file: block_type, block_norm,
    num_parallel, no block_kind) read as the same kind, without a warning; the deprecated
    attributes still read."""
    base = ViTConfig.from_variant("mu/8", **MU).to_dict()
    del base["block_kind"]
    for old, kind, count in (
        (dict(block_type="standard", block_norm="pre", num_parallel=1), "pre", 1),
        (dict(block_type="standard", block_norm="post", num_parallel=1), "post", 1),
        (dict(block_type="standard", block_norm="pre", num_parallel=3), "parallel", 3),
        (dict(block_type="parallel_scaling", block_norm="pre", num_parallel=1),
         "parallel_scaling", 1),
        (dict(num_parallel=2), "parallel", 2),  # before block_norm / block_type existed
    ):  # fmt: skip
        with _no_warning():
            config = ViTConfig.from_dict({**base, **old})
        assert (config.block_kind, config.num_parallel) == (kind, count)
        assert ViTConfig.from_dict(config.to_dict()) == config
        with pytest.warns(DeprecationWarning, match="read block_kind"):
            assert config.block_norm == ("post" if kind == "post" else "pre")
        with pytest.warns(DeprecationWarning, match="read block_kind"):
            assert config.block_type == old.get("block_type", "standard")


@backend_independent  # argument checks that refuse before any model is made
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(block_kind="sandwich"),
         r"block_kind must be one of \(.*'parallel'.*'parallel_scaling'.*'post'.*'pre'.*\)\. "
         r"Received: block_kind='sandwich'"),
        (dict(block_kind="post", num_parallel=2),
         r"block_kind='post' takes no parallel branches.*num_parallel=2"),
        (dict(block_kind="pre", num_parallel=3), r"block_kind='pre' takes no parallel branch"),
        (dict(block_kind="parallel", num_parallel=0), "num_parallel must be a positive integer"),
        (dict(block_kind="post", block_type="parallel_scaling"),
         r"block_kind='post' contradicts block_type='parallel_scaling'"),
        (dict(block_kind="parallel_scaling", block_norm="post"),
         r"block_kind='parallel_scaling' contradicts block_norm='post'"),
        (dict(block_kind="pre", block_norm="post"), r"block_kind='pre' contradicts block_norm"),
        (dict(block_type="parallel_scaling", block_norm="post"), "name two block kinds"),
        (dict(block_norm="post", num_parallel=2), r"block_kind='post' takes no parallel"),
        (dict(block_kind="parallel", attention_type="differential"), "block_kind='parallel'"),
        (dict(block_kind="parallel", mlp="swiglu"), r"block_kind='parallel' .*needs mlp='mlp'"),
    ],
)  # fmt: skip
def test_block_kind_refusals(kwargs, match):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(ValueError, match=match):
            ViTConfig.from_variant("mu/8", **MU, **kwargs)


def test_a_new_parallel_file_round_trips(tmp_path):
    """A .keras file written now carries block_kind (and num_parallel, which applies) and
    loads with the same outputs."""
    model = keras_vit.ViT("mu/8", block_kind="parallel", num_parallel=3, **MU)
    randomize_weights(model)
    config = model.get_config()["config"]
    assert (config["block_kind"], config["num_parallel"]) == ("parallel", 3)
    path = str(tmp_path / "parallel.keras")
    model.save(path)
    loaded = keras_vit.load_model(path)
    assert loaded.config == model.config and type(loaded.blocks[0]).__name__ == "ParallelBlock"
    x = np.random.default_rng(1).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    np.testing.assert_allclose(to_numpy(loaded(x)), to_numpy(model(x)), atol=1e-6)
