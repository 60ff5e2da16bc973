"""Tests for hybrid ViTs: the BiT ResNet stem (keras_vit/layers/resnet.py) and the builders.

StdConv2D has its own tests in tests/layers/test_std_conv.py.
"""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import StdConv2D, ViT
from keras_vit.distribution.abstract import abstract
from keras_vit.layers.resnet import residual_unit, resnet_stem
from keras_vit.models import variants
from tests import helpers
from tests.helpers import randomize_weights, roundtrip_model, to_numpy

# A tiny hybrid: "mu" transformer (2 layers, width 32) on a 2-stage ResNet, one unit per
# stage, root width 8 and 4 GroupNorm groups. Stem stride 4 * 2 = 8, so 32 px -> 4x4 grid.
TINY = dict(resnet_units=(1, 1), resnet_width=8, resnet_groups=4, image_size=32, num_classes=5)


def _images(b=2, h=32, w=32, c=3, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (b, h, w, c)).astype("float32")


# --- plain NumPy reference ----------------------------------------------------------------------


def np_max_pool_same(x, k=3, s=2):
    b, h, wd, c = x.shape
    top, bottom, oh = helpers.same_pads(h, k, s)
    left, right, ow = helpers.same_pads(wd, k, s)
    xp = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=-np.inf)
    out = np.full((b, oh, ow, c), -np.inf)
    for i in range(k):
        for j in range(k):
            out = np.maximum(out, xp[:, i : i + s * oh : s, j : j + s * ow : s, :])
    return out


def np_group_norm(x, gamma, beta, groups, eps=1e-6):
    b, h, w, c = x.shape
    g = x.reshape(b, h, w, groups, c // groups)
    mean = g.mean(axis=(1, 2, 4), keepdims=True)
    var = g.var(axis=(1, 2, 4), keepdims=True)
    return ((g - mean) / np.sqrt(var + eps)).reshape(b, h, w, c) * gamma + beta


def _w(model, name):
    layer = model.get_layer(name)
    if isinstance(layer, StdConv2D):
        return to_numpy(layer.kernel).astype(np.float64)
    return to_numpy(layer.gamma).astype(np.float64), to_numpy(layer.beta).astype(np.float64)


def np_std_conv(model, name, x, stride=1):
    return helpers.np_conv_same(x, helpers.np_standardize(_w(model, name)), stride)


def np_gn(model, name, x, groups):
    return np_group_norm(x, *_w(model, name), groups)


def np_unit(model, prefix, x, strides, groups):
    relu = lambda v: np.maximum(v, 0)  # noqa: E731
    names = {layer.name for layer in model.layers}
    residual = x
    if f"{prefix}_conv_proj" in names:
        residual = np_std_conv(model, f"{prefix}_conv_proj", x, strides)
        residual = np_gn(model, f"{prefix}_gn_proj", residual, groups)
    y = relu(np_gn(model, f"{prefix}_gn1", np_std_conv(model, f"{prefix}_conv1", x), groups))
    y = np_std_conv(model, f"{prefix}_conv2", y, strides)
    y = relu(np_gn(model, f"{prefix}_gn2", y, groups))
    y = np_gn(model, f"{prefix}_gn3", np_std_conv(model, f"{prefix}_conv3", y), groups)
    return relu(residual + y)


# --- ResNet stem --------------------------------------------------------------------------------


@pytest.mark.parametrize("in_channels,filters,strides", [(8, 4, 2), (16, 4, 1)])
def test_residual_unit_matches_numpy(in_channels, filters, strides):
    inputs = keras.Input((8, 8, in_channels))
    model = keras.Model(inputs, residual_unit(inputs, filters, strides, "block2_unit1", groups=2))
    names = {layer.name for layer in model.layers}
    # Projection exactly when the channels or the stride change.
    assert ("block2_unit1_conv_proj" in names) == (in_channels != 4 * filters or strides != 1)
    # gn3 starts at zero scale (official init): the unit starts as ReLU(projection(x)).
    assert not np.any(to_numpy(model.get_layer("block2_unit1_gn3").gamma))
    randomize_weights(model, seed=3, scale=0.5)
    x = _images(2, 8, 8, in_channels)
    expected = np_unit(model, "block2_unit1", x.astype(np.float64), strides, groups=2)
    assert model.output_shape == (None, 8 // strides, 8 // strides, 4 * filters)
    np.testing.assert_allclose(to_numpy(model(x)), expected, rtol=1e-4, atol=1e-4)


def test_resnet_stem_matches_numpy():
    inputs = keras.Input((32, 32, 3))
    model = keras.Model(inputs, resnet_stem(inputs, (1, 1), resnet_width=8, resnet_groups=4))
    randomize_weights(model, seed=5, scale=0.5)
    x = _images(2, 32, 32, 3)
    y = np_std_conv(model, "conv_root", x.astype(np.float64), stride=2)
    y = np.maximum(np_gn(model, "gn_root", y, 4), 0)
    y = np_max_pool_same(y)
    y = np_unit(model, "block1_unit1", y, 1, 4)
    y = np_unit(model, "block2_unit1", y, 2, 4)
    assert model.output_shape == (None, 4, 4, 64)
    np.testing.assert_allclose(to_numpy(model(x)), y, rtol=1e-4, atol=1e-4)


def test_stem_layer_names_match_official_checkpoint():
    model = ViT("mu/1", **{**TINY, "resnet_units": (2, 1)})
    names = {layer.name for layer in model.layers}
    expected = {"conv_root", "gn_root", "block1_unit1_conv_proj", "block1_unit1_gn_proj",
                "block2_unit1_conv_proj", "block2_unit1_gn_proj"}
    for s, units in ((1, 2), (2, 1)):
        for u in range(1, units + 1):
            for i in (1, 2, 3):
                expected |= {f"block{s}_unit{u}_conv{i}", f"block{s}_unit{u}_gn{i}"}
    expected |= {"patch_encoder", "encoderblock_0", "encoderblock_1", "encoder_norm", "head"}
    assert expected <= names
    assert "block1_unit2_conv_proj" not in names
    convs = [layer for layer in model.layers if isinstance(layer, StdConv2D)]
    assert all([w.name for w in layer.weights] == ["kernel"] for layer in convs)
    assert model.get_layer("block2_unit1_conv2").strides == (2, 2)
    assert model.get_layer("block2_unit1_conv1").strides == (1, 1)
    assert model.get_layer("block1_unit1_conv2").strides == (1, 1)
    gn = model.get_layer("gn_root")
    assert (gn.groups, gn.epsilon) == (4, 1e-6)


# --- tiny hybrid --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "resnet_units,patch_size,image_size",
    [((1, 1), 1, 32), ((1,), 2, (32, 48)), ((), 2, 16), ((1, 1, 1), 1, 32)],
)
def test_grid_is_image_size_over_total_stride(resnet_units, patch_size, image_size):
    model = ViT(
        f"mu/{patch_size}",
        resnet_units=resnet_units,
        resnet_width=8,
        resnet_groups=4,
        image_size=image_size,
        include_top=False,
        pooling=None,
    )
    h, w = (image_size, image_size) if isinstance(image_size, int) else image_size
    total = variants.resnet_stride(resnet_units) * patch_size
    encoder = model.get_layer("patch_encoder")
    assert encoder.grid_size == (h // total, w // total)
    assert encoder.patch_size == (patch_size, patch_size)
    assert model.output_shape == (None, 1 + (h // total) * (w // total), 32)


def test_official_codes_route_to_hybrid():
    for code, units in (("R50+B/16", (3, 4, 9)), ("R+Ti/16", ()), ("R26+B/32", (2, 2, 2, 2))):
        assert variants.parse_variant(code)["resnet_units"] == units
    # R+Ti/16: root only (stride 4) and an 8x8 patch on the feature map: total stride 32.
    model = keras_vit.ViTRTi16(image_size=64, num_layers=1, resnet_width=8, resnet_groups=4)
    assert model.name == "vit_r_ti16"
    assert model.get_layer("patch_encoder").grid_size == (2, 2)
    assert "block1_unit1_conv1" not in [layer.name for layer in model.layers]
    # Explicit resnet_units win over the code's.
    model = ViT("R50+B/16", num_layers=1, hidden_dim=32, mlp_dim=32, num_heads=2, **TINY)
    assert model.name == "vit_r50_b16"
    assert "block3_unit1_conv1" not in [layer.name for layer in model.layers]
    for name in ("ViTR50B16", "ViTR26S32", "ViTR26B32", "ViTRTi16", "ViTR50L32"):
        assert "Sec. 3.1" in getattr(keras_vit, name).__doc__


def test_tiny_hybrid_fit_step():
    model = ViT("mu/1", **TINY)
    # The official init zeroes the head and the gn3 scales, which stops gradients below them
    # in the first step; random weights let one step reach every weight.
    randomize_weights(model, seed=6)
    model.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(True))
    x, y = _images(4), np.array([0, 1, 2, 3])
    before = {w.path: to_numpy(w).copy() for w in model.trainable_weights}
    history = model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    unchanged = [
        w.path for w in model.trainable_weights if np.array_equal(before[w.path], to_numpy(w))
    ]
    # The key bias adds a per-query constant to the attention logits: softmax ignores it.
    assert all(path.endswith("attention/key/bias") for path in unchanged), unchanged
    assert "block1_unit1_conv1/kernel" in before and "conv_root/kernel" in before


def test_tiny_hybrid_keras_roundtrip(tmp_path):
    model = ViT("mu/1", representation_size=12, **TINY)
    randomize_weights(model, seed=2)
    loaded = roundtrip_model(model, _images(), tmp_path)
    assert isinstance(loaded.get_layer("block2_unit1_conv2"), StdConv2D)


def test_vit_builds_hybrids_from_a_plain_code_and_a_stem():
    model = keras_vit.ViT("mu/1", include_top=False, **TINY)
    assert model.output_shape == (None, 32) and model.config.is_hybrid
    assert keras_vit.ViT("mu/8", image_size=32).stem is None


# --- user backbone ------------------------------------------------------------------------------


def _small_cnn(image_size=32, name="small_cnn"):
    inputs = keras.Input((image_size, image_size, 3))
    x = keras.layers.Conv2D(8, 3, strides=2, padding="same", activation="relu")(inputs)
    x = keras.layers.Conv2D(16, 3, strides=2, padding="same", activation="relu")(x)
    return keras.Model(inputs, x, name=name)


def test_hybrid_on_user_backbone(tmp_path):
    backbone = _small_cnn()
    model = ViT("mu/1", backbone=backbone, image_size=32, num_classes=5)
    # 32 px / stride 4 -> 8x8 feature map -> 64 tokens (+ class token).
    encoder = model.get_layer("patch_encoder")
    assert encoder.grid_size == (8, 8) and encoder.num_channels == 16
    assert model.output_shape == (None, 5)
    assert model.count_params() == backbone.count_params() + ViT(
        "mu/1", image_size=8, num_channels=16, num_classes=5
    ).count_params()
    randomize_weights(model, seed=4)
    roundtrip_model(model, _images(), tmp_path)
    # The variant's patch size applies to the feature map.
    tokens = ViT("mu/2", backbone=_small_cnn(), image_size=32, include_top=False, pooling=None)
    assert tokens.output_shape == (None, 1 + 16, 32)


@pytest.mark.slow
def test_hybrid_on_keras_applications_backbone():
    backbone = keras.applications.MobileNetV2(
        include_top=False, weights=None, input_shape=(64, 64, 3), alpha=0.35
    )
    model = ViT("mu/1", backbone=backbone, image_size=64, num_classes=3)
    assert model.get_layer("patch_encoder").grid_size == (2, 2)
    assert tuple(model(_images(1, 64, 64, 3)).shape) == (1, 3)
    # include_top=True with pooling gives a rank-2 output: a clear error, not a crash later.
    # What keras.applications' pooling="avg" builds, on the same backbone (no second build).
    pooled = keras.Model(backbone.input, keras.layers.GlobalAveragePooling2D()(backbone.output))
    with pytest.raises(ValueError, match="rank-4 feature map"):
        ViT("mu/1", backbone=pooled, image_size=64)


# --- errors -------------------------------------------------------------------------------------


def test_image_size_not_divisible_by_total_stride():
    with pytest.raises(ValueError, match=r"total stride .*16.*Received: image_size=\(200, 200\)"):
        ViT("R50+B/16", image_size=200)
    with pytest.raises(ValueError, match=r"total stride.*Received: image_size=\(36, 32\)"):
        ViT("mu/1", **{**TINY, "image_size": (36, 32)})


def test_backbone_output_not_rank_4():
    inputs = keras.Input((32, 32, 3))
    x = keras.layers.Conv2D(8, 3, strides=2)(inputs)
    backbone = keras.Model(inputs, keras.layers.GlobalAveragePooling2D()(x))
    expected = r"rank-4 feature map.*Received: backbone output shape=\(None, 8\)"
    with pytest.raises(ValueError, match=expected):
        ViT("mu/1", backbone=backbone, image_size=32)


def test_backbone_bad_inputs():
    with pytest.raises(ValueError, match="backbone's input shape does not match"):
        ViT("mu/1", backbone=_small_cnn(64), image_size=32)
    with pytest.raises(ValueError, match="backbone must be a Keras model"):
        ViT("mu/1", backbone="resnet50", image_size=32)
    with pytest.raises(ValueError, match="either a backbone or resnet_units"):
        ViT("mu/1", backbone=_small_cnn(), resnet_units=(1,), image_size=32)
    with pytest.raises(ValueError, match=r"feature-map height must be divisible.*\(8, 8\)"):
        ViT("mu/3", backbone=_small_cnn(), image_size=32)


def test_unknown_stage_codes_and_bad_resnet_arguments():
    with pytest.raises(ValueError, match=r"Unknown ResNet stem 'R34'.*Expected one of"):
        ViT("R34+B/16")
    with pytest.raises(ValueError, match="Unknown model size"):
        ViT("R50+X/16")
    with pytest.raises(ValueError, match=r"resnet_units must be a sequence of positive.*\(3, 0\)"):
        ViT("mu/1", **{**TINY, "resnet_units": (3, 0)})
    with pytest.raises(ValueError, match="resnet_units must be a sequence"):
        ViT("mu/1", **{**TINY, "resnet_units": 3})
    with pytest.raises(ValueError, match=r"resnet_groups.*must divide resnet_width.*=12.*=8"):
        ViT("mu/1", **{**TINY, "resnet_width": 12, "resnet_groups": 8})
    with pytest.raises(ValueError, match="Hybrid arguments need a hybrid variant code"):
        ViT("mu/8", resnet_width=8, image_size=32)
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['resnet_depth'\]"):
        ViT("R50+B/16", resnet_depth=50)


# --- full size ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "builder,expected,grid",
    [
        (keras_vit.ViTR50B16, 98_659_112, (14, 14)),
        (keras_vit.ViTR26S32, 36_431_912, (7, 7)),
        (keras_vit.ViTR50L32, 328_994_856, (7, 7)),
    ],
)
def test_official_parameter_counts(builder, expected, grid):
    # Variables with shapes and no values (keras_vit.distribution.abstract; the same build code,
    # tests/models/test_vit.py compares such a model's variables with a built one's).
    model = abstract(builder)
    assert model.count_params() == expected
    assert model.get_layer("patch_encoder").grid_size == grid
    if builder is keras_vit.ViTR50B16:
        # The official embedding kernel (1, 1, 1024, 768) and root kernel (7, 7, 3, 64).
        assert tuple(model.get_layer("patch_encoder").kernel.shape) == (1, 1, 1024, 768)
        assert tuple(model.get_layer("conv_root").kernel.shape) == (7, 7, 3, 64)
        convs = sum(isinstance(layer, StdConv2D) for layer in model.layers)
        assert convs == 1 + 3 * (3 + 4 + 9) + 3  # root, 3 convs per unit, 3 projections
