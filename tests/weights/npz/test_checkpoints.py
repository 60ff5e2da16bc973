"""Tests of keras_vit/weights/npz/checkpoints.py: official .npz load/save, against a NumPy ViT.

Every checkpoint here is made by the test in the official layout (names and shapes
of google-research/vision_transformer, see REFERENCE.md) for tiny configurations.
The reference forward pass below reads those arrays directly and implements the
official model in float64 NumPy (tanh GELU, LayerNorm 1e-6, the official
position-embedding resize with scipy, the BiT ResNetV2 stem); it shares no code
with the library apart from the transformer-block equations in tests/helpers.py.
"""

import logging
import math
import re

import keras
import numpy as np
import pytest
import scipy.ndimage

import keras_vit
from keras_vit.models.vit import ViT
from keras_vit.weights.npz.checkpoints import load_npz, official_variables, read_npz, save_npz
from tests.helpers import np_block, np_layer_norm, randomize_weights, to_numpy

HIDDEN, LAYERS, HEADS, MLP, PATCH = 32, 2, 2, 64, 8
NUM_CLASSES, REPRESENTATION = 10, 24
# Tiny hybrid: root width 16, GroupNorm with 8 groups, stages (1, 1): total stride 8.
HYBRID = dict(resnet_units=(1, 1), resnet_width=16, resnet_groups=8)
TOLERANCE = 1e-5
LOGGER = "keras_vit.weights.npz.checkpoints"
_errors = []  # relative errors seen, printed at the end of the module (pytest -s)


# --- random checkpoints in the official layout ---------------------------------------------------


def official_arrays(
    *,
    image_size=32,
    classifier="token",
    representation_size=None,
    num_classes=NUM_CLASSES,
    hybrid=None,
    gn_4d=False,
    seed=0,
):
    """A random checkpoint dict with every official name and shape (REFERENCE.md)."""
    rng = np.random.default_rng(seed)

    def normal(*shape, scale=0.2, mean=0.0):
        return (mean + scale * rng.normal(size=shape)).astype("float32")

    arrays = {}
    channels, patch = 3, PATCH
    if hybrid:
        width = hybrid["resnet_width"]

        def gn(name, c):
            shape = (1, 1, 1, c) if gn_4d else (c,)
            arrays[f"{name}/scale"] = normal(*shape, scale=0.1, mean=1.0)
            arrays[f"{name}/bias"] = normal(*shape, scale=0.1)

        arrays["conv_root/kernel"] = normal(7, 7, 3, width)
        gn("gn_root", width)
        channels = width
        for s, units in enumerate(hybrid["resnet_units"], start=1):
            f = width * 2 ** (s - 1)
            for u in range(1, units + 1):
                scope = f"block{s}/unit{u}"
                if u == 1:
                    arrays[f"{scope}/conv_proj/kernel"] = normal(1, 1, channels, 4 * f)
                    gn(f"{scope}/gn_proj", 4 * f)
                arrays[f"{scope}/conv1/kernel"] = normal(1, 1, channels, f)
                gn(f"{scope}/gn1", f)
                arrays[f"{scope}/conv2/kernel"] = normal(3, 3, f, f)
                gn(f"{scope}/gn2", f)
                arrays[f"{scope}/conv3/kernel"] = normal(1, 1, f, 4 * f)
                gn(f"{scope}/gn3", 4 * f)
                channels = 4 * f
        patch = 1
        stride = 4 * 2 ** (len(hybrid["resnet_units"]) - 1)
        grid = image_size // stride
    else:
        grid = image_size // PATCH
    arrays["embedding/kernel"] = normal(patch, patch, channels, HIDDEN, scale=0.05)
    arrays["embedding/bias"] = normal(HIDDEN)
    prefix = 1 if classifier == "token" else 0
    if prefix:
        arrays["cls"] = normal(1, 1, HIDDEN)
    arrays["Transformer/posembed_input/pos_embedding"] = normal(1, prefix + grid * grid, HIDDEN)
    head_dim = HEADS and HIDDEN // HEADS
    for i in range(LAYERS):
        b = f"Transformer/encoderblock_{i}"
        mha = f"{b}/MultiHeadDotProductAttention_1"
        arrays[f"{b}/LayerNorm_0/scale"] = normal(HIDDEN, scale=0.1, mean=1.0)
        arrays[f"{b}/LayerNorm_0/bias"] = normal(HIDDEN, scale=0.1)
        for proj in ("query", "key", "value"):
            arrays[f"{mha}/{proj}/kernel"] = normal(HIDDEN, HEADS, head_dim)
            arrays[f"{mha}/{proj}/bias"] = normal(HEADS, head_dim)
        arrays[f"{mha}/out/kernel"] = normal(HEADS, head_dim, HIDDEN)
        arrays[f"{mha}/out/bias"] = normal(HIDDEN)
        arrays[f"{b}/LayerNorm_2/scale"] = normal(HIDDEN, scale=0.1, mean=1.0)
        arrays[f"{b}/LayerNorm_2/bias"] = normal(HIDDEN, scale=0.1)
        arrays[f"{b}/MlpBlock_3/Dense_0/kernel"] = normal(HIDDEN, MLP)
        arrays[f"{b}/MlpBlock_3/Dense_0/bias"] = normal(MLP)
        arrays[f"{b}/MlpBlock_3/Dense_1/kernel"] = normal(MLP, HIDDEN)
        arrays[f"{b}/MlpBlock_3/Dense_1/bias"] = normal(HIDDEN)
    arrays["Transformer/encoder_norm/scale"] = normal(HIDDEN, scale=0.1, mean=1.0)
    arrays["Transformer/encoder_norm/bias"] = normal(HIDDEN, scale=0.1)
    width = HIDDEN
    if representation_size:
        arrays["pre_logits/kernel"] = normal(HIDDEN, representation_size)
        arrays["pre_logits/bias"] = normal(representation_size)
        width = representation_size
    arrays["head/kernel"] = normal(width, num_classes)
    arrays["head/bias"] = normal(num_classes)
    return arrays


def write(tmp_path, arrays, name="ckpt.npz"):
    path = tmp_path / name
    np.savez(path, **arrays)
    return str(path)


# --- the official model in plain NumPy (float64) -------------------------------------------------


def np_official_resize(posemb, classifier, new_grid):
    """vit_jax checkpoint.load_pretrained's resize, per axis for non-square targets."""
    posemb = posemb.astype("float64")
    if classifier == "token":
        tok, grid = posemb[:, :1], posemb[0, 1:]
    else:
        tok, grid = posemb[:, :0], posemb[0]
    old = int(np.sqrt(len(grid)))
    if (old, old) == tuple(new_grid):
        return posemb
    grid = grid.reshape(old, old, -1)
    grid = scipy.ndimage.zoom(grid, (new_grid[0] / old, new_grid[1] / old, 1), order=1)
    return np.concatenate([tok, grid.reshape(1, new_grid[0] * new_grid[1], -1)], axis=1)


def _same_pad(x, k, s, value=0.0):
    """TF/Flax 'SAME' padding of the spatial axes of (B, H, W, C)."""
    pads = []
    for n in x.shape[1:3]:
        total = max((math.ceil(n / s) - 1) * s + k - n, 0)
        pads.append((total // 2, total - total // 2))
    return np.pad(x, ((0, 0), pads[0], pads[1], (0, 0)), constant_values=value)


def np_conv(x, kernel, stride=1, padding="SAME"):
    k = kernel.shape[0]
    if padding == "SAME":
        x = _same_pad(x, k, stride)
    windows = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(1, 2))
    windows = windows[:, ::stride, ::stride]  # (B, Ho, Wo, C, k, k)
    return np.einsum("bhwcij,ijco->bhwo", windows, kernel)


def np_std_conv(x, kernel, stride=1):
    w = kernel.astype("float64")
    w = w - w.mean(axis=(0, 1, 2))
    w = w / (w.std(axis=(0, 1, 2)) + 1e-5)
    return np_conv(x, w, stride)


def np_group_norm(x, scale, bias, groups, eps=1e-6):
    b, h, w, c = x.shape
    g = x.reshape(b, h, w, groups, c // groups)
    mean = g.mean(axis=(1, 2, 4), keepdims=True)
    var = g.var(axis=(1, 2, 4), keepdims=True)
    g = (g - mean) / np.sqrt(var + eps)
    return g.reshape(b, h, w, c) * scale.reshape(-1) + bias.reshape(-1)


def np_max_pool_same(x, k=3, s=2):
    x = _same_pad(x, k, s, value=-np.inf)
    windows = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(1, 2))
    return windows[:, ::s, ::s].max(axis=(-1, -2))


def np_resnet(a, x, hybrid):
    groups = hybrid["resnet_groups"]

    def gn(name, y):
        return np_group_norm(y, a[f"{name}/scale"], a[f"{name}/bias"], groups)

    x = np_std_conv(x, a["conv_root/kernel"], 2)
    x = np.maximum(gn("gn_root", x), 0)
    x = np_max_pool_same(x)
    for s, units in enumerate(hybrid["resnet_units"], start=1):
        for u in range(1, units + 1):
            p = f"block{s}/unit{u}"
            stride = 2 if (s > 1 and u == 1) else 1
            residual = x
            if f"{p}/conv_proj/kernel" in a:
                residual = gn(f"{p}/gn_proj", np_std_conv(x, a[f"{p}/conv_proj/kernel"], stride))
            y = np.maximum(gn(f"{p}/gn1", np_std_conv(x, a[f"{p}/conv1/kernel"])), 0)
            y = np.maximum(gn(f"{p}/gn2", np_std_conv(y, a[f"{p}/conv2/kernel"], stride)), 0)
            y = gn(f"{p}/gn3", np_std_conv(y, a[f"{p}/conv3/kernel"]))
            x = np.maximum(residual + y, 0)
    return x


def np_official_vit(arrays, images, classifier, hybrid=None, include_head=True):
    """The official VisionTransformer forward pass straight from the checkpoint arrays."""
    a = {k: v.astype("float64") for k, v in arrays.items()}
    x = images.astype("float64")
    if hybrid:
        x = np_resnet(a, x, hybrid)
    kernel = a["embedding/kernel"]
    p = kernel.shape[0]
    b, h, w, c = x.shape
    gh, gw = h // p, w // p
    # Conv2D VALID with stride p written out over the patch grid.
    x = x.reshape(b, gh, p, gw, p, c)
    x = np.einsum("bipjqc,pqcd->bijd", x, kernel) + a["embedding/bias"]
    x = x.reshape(b, gh * gw, -1)
    if classifier == "token":
        x = np.concatenate([np.broadcast_to(a["cls"], (b, 1, x.shape[-1])), x], axis=1)
    x = x + np_official_resize(a["Transformer/posembed_input/pos_embedding"], classifier, (gh, gw))
    for i in range(LAYERS):
        s = f"Transformer/encoderblock_{i}/"
        m = s + "MultiHeadDotProductAttention_1/"
        params = {
            "ln0/scale": a[s + "LayerNorm_0/scale"],
            "ln0/bias": a[s + "LayerNorm_0/bias"],
            "ln2/scale": a[s + "LayerNorm_2/scale"],
            "ln2/bias": a[s + "LayerNorm_2/bias"],
            "mlp0/kernel": a[s + "MlpBlock_3/Dense_0/kernel"],
            "mlp0/bias": a[s + "MlpBlock_3/Dense_0/bias"],
            "mlp1/kernel": a[s + "MlpBlock_3/Dense_1/kernel"],
            "mlp1/bias": a[s + "MlpBlock_3/Dense_1/bias"],
        }
        for proj in ("query", "key", "value", "out"):
            params[f"{proj}/kernel"] = a[m + f"{proj}/kernel"]
            params[f"{proj}/bias"] = a[m + f"{proj}/bias"]
        x, _ = np_block(x, params, eps=1e-6, approximate_gelu=True)
    x = np_layer_norm(x, a["Transformer/encoder_norm/scale"], a["Transformer/encoder_norm/bias"])
    x = x[:, 0] if classifier == "token" else x.mean(axis=1)
    if not include_head:
        return x
    if "pre_logits/kernel" in a:
        x = np.tanh(x @ a["pre_logits/kernel"] + a["pre_logits/bias"])
    return x @ a["head/kernel"] + a["head/bias"]


def relative_error(got, want):
    got = np.asarray(got, "float64")
    return float(np.abs(got - want).max() / np.abs(want).max())


def check_close(got, want):
    err = relative_error(got, want)
    _errors.append(err)
    assert err <= TOLERANCE, f"relative error {err:.3g} > {TOLERANCE}"
    return err


def images_for(image_size, seed=1):
    h, w = (image_size, image_size) if isinstance(image_size, int) else image_size
    return np.random.default_rng(seed).uniform(-1, 1, (2, h, w, 3)).astype("float32")


def weights_of(model):
    return [to_numpy(w).copy() for w in model.weights]


def assert_weights_equal(model, before):
    for w, old in zip(model.weights, before, strict=True):
        np.testing.assert_array_equal(to_numpy(w), old, err_msg=w.path)


@pytest.fixture(scope="module", autouse=True)
def _report_errors():
    yield
    if _errors:
        print(
            f"\n[test_checkpoints] largest relative error: {max(_errors):.3g} "
            f"({len(_errors)} checks)"
        )


# --- loading matches the official model ----------------------------------------------------------


def _matrix():
    """pooling x (head | pre_logits) x (32, 48, 32x48): a covering subset runs by default."""
    quick = {("token", None, 32), ("token", REPRESENTATION, 48), ("gap", None, (32, 48))}
    quick.add(("gap", REPRESENTATION, 32))
    for pooling in ("token", "gap"):
        for rep in (None, REPRESENTATION):
            for size in (32, 48, (32, 48)):
                marks = () if (pooling, rep, size) in quick else (pytest.mark.slow,)
                name = "x".join(map(str, size)) if isinstance(size, tuple) else str(size)
                ids = f"{pooling}-{'pre_logits' if rep else 'head'}-{name}"
                yield pytest.param(pooling, rep, size, marks=marks, id=ids)


@pytest.mark.parametrize("pooling, representation_size, image_size", list(_matrix()))
def test_load_matches_numpy_official_model(tmp_path, pooling, representation_size, image_size):
    arrays = official_arrays(classifier=pooling, representation_size=representation_size)
    path = write(tmp_path, arrays)
    model = ViT(
        "mu/8",
        image_size=image_size,
        num_classes=NUM_CLASSES,
        pooling=pooling,
        representation_size=representation_size,
    )
    load_npz(model, path)
    x = images_for(image_size)
    check_close(to_numpy(model(x)), np_official_vit(arrays, x, pooling))


@pytest.mark.parametrize(
    "image_size",
    [32, pytest.param(48, marks=pytest.mark.slow), (32, 48)],
    ids=["32", "48", "32x48"],
)
def test_hybrid_matches_numpy_official_model(tmp_path, image_size):
    arrays = official_arrays(hybrid=HYBRID, gn_4d=image_size == 48)
    path = write(tmp_path, arrays)
    model = ViT("mu/1", image_size=image_size, num_classes=NUM_CLASSES, weights=path, **HYBRID)
    x = images_for(image_size)
    check_close(to_numpy(model(x)), np_official_vit(arrays, x, "token", hybrid=HYBRID))


def test_hybrid_accepts_4d_group_norm_parameters(tmp_path):
    flat = official_arrays(hybrid=HYBRID)
    four_d = official_arrays(hybrid=HYBRID, gn_4d=True)
    assert four_d["gn_root/scale"].shape == (1, 1, 1, 16)
    assert four_d["block2/unit1/gn_proj/bias"].shape == (1, 1, 1, 128)
    a = ViT("mu/1", image_size=32, num_classes=NUM_CLASSES, weights=write(tmp_path, flat), **HYBRID)
    b = ViT(
        "mu/1",
        image_size=32,
        num_classes=NUM_CLASSES,
        weights=write(tmp_path, four_d, "4d.npz"),
        **HYBRID,
    )
    np.testing.assert_array_equal(to_numpy(a.get_layer("gn_root").gamma), flat["gn_root/scale"])
    np.testing.assert_array_equal(
        to_numpy(b.get_layer("block1_unit1_gn2").beta), four_d["block1/unit1/gn2/bias"].reshape(-1)
    )


def test_builder_weights_argument_equals_load_npz(tmp_path):
    path = write(tmp_path, official_arrays())
    a = ViT("mu/8", image_size=48, num_classes=NUM_CLASSES, weights=path)
    b = load_npz(ViT("mu/8", image_size=48, num_classes=NUM_CLASSES), path)
    for wa, wb in zip(a.weights, b.weights, strict=True):
        np.testing.assert_array_equal(to_numpy(wa), to_numpy(wb))


def test_position_embedding_resize_matches_official(tmp_path):
    arrays = official_arrays()
    path = write(tmp_path, arrays)
    for size, grid in ((48, (6, 6)), ((32, 48), (4, 6)), (16, (2, 2))):
        model = load_npz(ViT("mu/8", image_size=size, num_classes=NUM_CLASSES), path)
        got = to_numpy(model.get_layer("patch_encoder").position_embeddings)
        want = np_official_resize(arrays["Transformer/posembed_input/pos_embedding"], "token", grid)
        assert got.shape == (1, 1 + grid[0] * grid[1], HIDDEN)
        check_close(got, want)
        np.testing.assert_array_equal(
            got[:, 0], arrays["Transformer/posembed_input/pos_embedding"][:, 0]
        )


# --- head and pre-logits -------------------------------------------------------------------------


def test_new_class_count_keeps_zero_head_and_logs(tmp_path, caplog):
    arrays = official_arrays(representation_size=REPRESENTATION)
    path = write(tmp_path, arrays)
    model = ViT("mu/8", image_size=48, num_classes=5)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        load_npz(model, path)
    assert not to_numpy(model.get_layer("head").kernel).any()
    assert not to_numpy(model.get_layer("head").bias).any()
    messages = [r.getMessage() for r in caplog.records]
    assert sum("kept the model's own head (32, 5)" in m for m in messages) == 1
    assert sum("dropped pre_logits (32, 24)" in m for m in messages) == 1
    # Everything up to the pooled features is the official model.
    features = keras.Model(model.input, model.get_layer("pooling").output)
    x = images_for(48)
    want = np_official_vit(arrays, x, "token", include_head=False)
    check_close(to_numpy(features(x)), want)


def test_same_class_count_loads_head(tmp_path, caplog):
    arrays = official_arrays()
    model = ViT("mu/8", image_size=32, num_classes=NUM_CLASSES)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        load_npz(model, write(tmp_path, arrays))
    np.testing.assert_array_equal(to_numpy(model.get_layer("head").kernel), arrays["head/kernel"])
    assert not any("head" in r.getMessage() for r in caplog.records)


def test_include_top_false_drops_head_and_pre_logits(tmp_path):
    arrays = official_arrays(representation_size=REPRESENTATION)
    model = ViT("mu/8", image_size=32, include_top=False, pooling="token")
    load_npz(model, write(tmp_path, arrays))
    x = images_for(32)
    check_close(to_numpy(model(x)), np_official_vit(arrays, x, "token", include_head=False))


def test_model_with_pre_logits_needs_them_in_the_file(tmp_path):
    path = write(tmp_path, official_arrays())
    model = ViT("mu/8", image_size=32, num_classes=NUM_CLASSES, representation_size=REPRESENTATION)
    with pytest.raises(
        ValueError, match="pre_logits/kernel: expected \\(32, 24\\), not in the file"
    ):
        load_npz(model, path)


# --- class token vs gap --------------------------------------------------------------------------


def test_gap_checkpoint_into_token_model(tmp_path):
    arrays = official_arrays(classifier="gap")
    path = write(tmp_path, arrays)
    model = ViT("mu/8", image_size=48, num_classes=NUM_CLASSES)
    before = weights_of(model)
    with pytest.raises(ValueError, match=r"missing +cls: expected \(1, 1, 32\).*pooling='gap'"):
        load_npz(model, path)
    assert_weights_equal(model, before)
    old_row = to_numpy(model.get_layer("patch_encoder").position_embeddings)[:, :1].copy()
    load_npz(model, path, strict=False)
    got = to_numpy(model.get_layer("patch_encoder").position_embeddings)
    np.testing.assert_array_equal(got[:, :1], old_row)  # the model's class row is kept
    want = np_official_resize(arrays["Transformer/posembed_input/pos_embedding"], "gap", (6, 6))
    check_close(got[:, 1:], want)


def test_token_checkpoint_into_model_without_class_token(tmp_path):
    arrays = official_arrays(classifier="token")
    path = write(tmp_path, arrays)
    model = ViT("mu/8", image_size=32, num_classes=NUM_CLASSES, pooling="gap")
    with pytest.raises(ValueError, match=r"unexpected cls: found \(1, 1, 32\).*class_token=True"):
        load_npz(model, path)
    load_npz(model, path, strict=False)
    got = to_numpy(model.get_layer("patch_encoder").position_embeddings)
    np.testing.assert_array_equal(got, arrays["Transformer/posembed_input/pos_embedding"][:, 1:])
    # A gap model that keeps the class token loads the whole token checkpoint.
    with_token = ViT(
        "mu/8", image_size=32, num_classes=NUM_CLASSES, pooling="gap", class_token=True
    )
    load_npz(with_token, path)


@pytest.mark.parametrize(
    "options,rows",
    [
        (dict(num_register_tokens=2, distillation_token=True), 4),  # cls, dist, 2 registers
        (dict(num_register_tokens=2, prefix_position_embedding=False), 0),  # timm no_embed_class
    ],
)
def test_token_checkpoint_into_models_with_more_prefix_tokens(tmp_path, caplog, options, rows):
    """The file's class row goes to the class token's row; the model keeps its other rows."""
    arrays = official_arrays(classifier="token")
    model = ViT("mu/8", image_size=48, num_classes=NUM_CLASSES, **options)
    table = to_numpy(model.get_layer("patch_encoder").position_embeddings).copy()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        load_npz(model, write(tmp_path, arrays))
    got = to_numpy(model.get_layer("patch_encoder").position_embeddings)
    posemb = arrays["Transformer/posembed_input/pos_embedding"]
    assert got.shape == (1, rows + 36, HIDDEN)
    if rows:
        np.testing.assert_array_equal(got[:, 0], posemb[:, 0])
        np.testing.assert_array_equal(got[:, 1:rows], table[:, 1:rows])
    check_close(got[:, rows:], np_official_resize(posemb, "token", (6, 6))[:, 1:])
    encoder = model.get_layer("patch_encoder")
    np.testing.assert_array_equal(to_numpy(encoder.class_embedding), arrays["cls"])
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "register_embeddings" in messages  # left as they are, and said so
    with pytest.raises(ValueError, match="no name in the official checkpoint layout"):
        save_npz(model, str(tmp_path / "out.npz"))


# --- save ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(variant="mu/8", pooling="token", representation_size=REPRESENTATION),
        dict(variant="mu/8", pooling="gap"),
        dict(variant="mu/1", **HYBRID),
    ],
    ids=["token_pre_logits", "gap", "hybrid"],
)
def test_save_writes_official_layout_and_round_trips(tmp_path, kwargs):
    kwargs = dict(kwargs)
    variant = kwargs.pop("variant")
    model = ViT(variant, image_size=32, num_classes=NUM_CLASSES, **kwargs)
    randomize_weights(model, seed=3)
    path = save_npz(model, str(tmp_path / "saved.npz"))
    assert path.endswith("saved.npz")
    saved = dict(np.load(path))
    official = official_arrays(
        classifier=kwargs.get("pooling", "token"),
        representation_size=kwargs.get("representation_size"),
        hybrid=HYBRID if "resnet_units" in kwargs else None,
    )
    assert {k: v.shape for k, v in saved.items()} == {k: v.shape for k, v in official.items()}
    assert all(v.dtype == np.float32 for v in saved.values())

    clone = ViT(variant, image_size=32, num_classes=NUM_CLASSES, **kwargs)
    load_npz(clone, path)
    for a, b in zip(model.weights, clone.weights, strict=True):
        np.testing.assert_array_equal(to_numpy(a), to_numpy(b), err_msg=a.path)
    x = images_for(32)
    np.testing.assert_array_equal(to_numpy(model(x)), to_numpy(clone(x)))
    # What we write is what the official model computes.
    check_close(
        to_numpy(model(x)),
        np_official_vit(
            saved,
            x,
            kwargs.get("pooling", "token"),
            hybrid=HYBRID if "resnet_units" in kwargs else None,
        ),
    )


def test_save_refuses_weights_without_official_name(tmp_path):
    model = ViT("mu/8", image_size=32, num_classes=NUM_CLASSES, layer_scale_init_value=0.1)
    with pytest.raises(ValueError, match="attention_scale"):
        save_npz(model, str(tmp_path / "ls.npz"))
    path = save_npz(model, str(tmp_path / "ls.npz"), strict=False)
    assert set(np.load(path).files) == set(official_arrays())


def test_non_square_checkpoint_needs_source_grid(tmp_path):
    model = ViT("mu/8", image_size=(32, 48), num_classes=NUM_CLASSES)
    randomize_weights(model)
    path = save_npz(model, str(tmp_path / "rect.npz"))
    square = ViT("mu/8", image_size=48, num_classes=NUM_CLASSES)
    before = weights_of(square)
    with pytest.raises(ValueError, match="pos_embedding: expected \\(1, 37, 32\\).*source_grid"):
        load_npz(square, path)
    assert_weights_equal(square, before)
    load_npz(square, path, source_grid=(4, 6))
    posemb = to_numpy(model.get_layer("patch_encoder").position_embeddings).astype("float64")
    grid = scipy.ndimage.zoom(posemb[0, 1:].reshape(4, 6, -1), (6 / 4, 6 / 6, 1), order=1)
    got = to_numpy(square.get_layer("patch_encoder").position_embeddings)
    check_close(got[0, 1:], grid.reshape(36, -1))
    # Same model grid: loads without source_grid.
    load_npz(ViT("mu/8", image_size=(32, 48), num_classes=NUM_CLASSES), path)


# --- error paths ---------------------------------------------------------------------------------


def test_strict_errors_list_every_problem_and_change_nothing(tmp_path):
    arrays = official_arrays()
    del arrays["Transformer/encoderblock_1/LayerNorm_2/scale"]
    del arrays["embedding/bias"]
    arrays["Transformer/encoderblock_9/LayerNorm_0/scale"] = np.ones(HIDDEN, "float32")
    arrays["extra/thing"] = np.ones((3, 4), "float32")
    arrays["Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel"] = np.ones((32, 65), "float32")
    arrays["Transformer/encoder_norm/bias"] = np.ones((1, 32), "float32")
    path = write(tmp_path, arrays)
    model = ViT("mu/8", image_size=32, num_classes=NUM_CLASSES)
    randomize_weights(model, seed=5)
    before = weights_of(model)
    with pytest.raises(ValueError) as info:
        load_npz(model, path)
    message = str(info.value)
    for line in (
        "missing    Transformer/encoderblock_1/LayerNorm_2/scale: expected (32,), not in the file",
        "missing    embedding/bias: expected (32,), not in the file",
        "unexpected Transformer/encoderblock_9/LayerNorm_0/scale: found (32,)",
        "unexpected extra/thing: found (3, 4)",
        "shape      Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel: expected (32, 64), "
        "found (32, 65)",
        "shape      Transformer/encoder_norm/bias: expected (32,), found (1, 32)",
    ):
        assert line in message, message
    assert "6 problem(s)" in message
    assert_weights_equal(model, before)


@pytest.mark.parametrize(
    "name, bad",
    [
        ("Transformer/encoder_norm/scale", np.array(["x"] * HIDDEN)),
        ("Transformer/encoderblock_1/MlpBlock_3/Dense_0/kernel", np.ones((HIDDEN, MLP), bool)),
        ("embedding/kernel", np.ones((PATCH, PATCH, 3, HIDDEN), "complex128")),
        ("head/kernel", np.ones((HIDDEN, NUM_CLASSES), bool)),
        ("Transformer/posembed_input/pos_embedding", np.ones((1, 17, HIDDEN), bool)),
    ],
    ids=["str", "bool", "complex", "head_bool", "posemb_bool"],
)
def test_non_numeric_arrays_fail_before_any_assignment(tmp_path, name, bad):
    """Strings, bools and complex numbers are errors naming the file and the array, strict or
    not, and the model keeps every weight (they used to fail half-way through the commit)."""
    arrays = official_arrays()
    arrays[name] = bad
    path = write(tmp_path, arrays)
    model = ViT("mu/8", image_size=32, num_classes=NUM_CLASSES)
    randomize_weights(model, seed=5)
    before = weights_of(model)
    for strict in (True, False):
        with pytest.raises(ValueError) as info:
            load_npz(model, path, strict=strict)
        message = str(info.value)
        assert repr(str(path)) in message and f"dtype      {name}: holds" in message, message
        assert "1 problem(s)" in message
        assert_weights_equal(model, before)


def test_non_strict_partial_load(tmp_path, caplog):
    arrays = official_arrays()
    del arrays["Transformer/encoderblock_1/LayerNorm_2/scale"]
    arrays["extra/thing"] = np.ones((3,), "float32")
    arrays["Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel"] = np.ones((32, 65), "float32")
    model = ViT("mu/8", image_size=32, num_classes=NUM_CLASSES)
    randomize_weights(model, seed=5)
    kept_scale = to_numpy(model.get_layer("encoderblock_1").mlp_norm.gamma).copy()
    kept_kernel = to_numpy(model.get_layer("encoderblock_0").mlp_dense_1.kernel).copy()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        load_npz(model, write(tmp_path, arrays), strict=False)
    assert "skipped 3 array(s)" in caplog.text
    np.testing.assert_array_equal(
        to_numpy(model.get_layer("encoderblock_1").mlp_norm.gamma), kept_scale
    )
    np.testing.assert_array_equal(
        to_numpy(model.get_layer("encoderblock_0").mlp_dense_1.kernel), kept_kernel
    )
    np.testing.assert_array_equal(
        to_numpy(model.get_layer("encoderblock_1").mlp_norm.beta),
        arrays["Transformer/encoderblock_1/LayerNorm_2/bias"],
    )


def test_nothing_matching_is_an_error(tmp_path):
    path = write(tmp_path, {"foo/bar": np.ones(3, "float32")})
    with pytest.raises(ValueError, match="No array of"):
        load_npz(ViT("mu/8", image_size=32, num_classes=NUM_CLASSES), path, strict=False)


def test_missing_file_and_bad_weights_argument(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_npz(ViT("mu/8", image_size=32), str(tmp_path / "nope.npz"))
    with pytest.raises(FileNotFoundError):
        ViT("mu/8", image_size=32, weights=str(tmp_path / "nope.npz"))
    with pytest.raises(ValueError, match=r"\.npz"):
        ViT("mu/8", image_size=32, weights=str(tmp_path / "weights.bin"))


def _truncated(tmp_path):
    write(tmp_path, official_arrays())
    data = (tmp_path / "ckpt.npz").read_bytes()
    path = tmp_path / "truncated.npz"
    path.write_bytes(data[: len(data) // 2])
    return path


def _corrupt_member(tmp_path):
    write(tmp_path, official_arrays())
    data = bytearray((tmp_path / "ckpt.npz").read_bytes())
    data[len(data) // 3] ^= 0xFF  # inside an array: the archive opens, a member's CRC fails
    path = tmp_path / "corrupt.npz"
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize(
    "make",
    [
        _truncated,
        _corrupt_member,
        lambda tmp_path: tmp_path / "page.npz",  # an HTML error page saved as the file
        lambda tmp_path: tmp_path / "empty.npz",
    ],
    ids=["truncated", "corrupt_member", "text", "empty"],
)
def test_unreadable_file_is_a_clear_error_and_changes_nothing(tmp_path, make):
    (tmp_path / "page.npz").write_text("<html>403 Forbidden</html>")
    (tmp_path / "empty.npz").write_bytes(b"")
    path = str(make(tmp_path))
    model = ViT("mu/8", image_size=32, num_classes=NUM_CLASSES)
    before = weights_of(model)
    for read in (read_npz, lambda p: load_npz(model, p)):
        with pytest.raises(ValueError) as info:
            read(path)
        message = str(info.value)
        assert repr(path) in message and "is not a valid .npz checkpoint" in message
        assert "Download the file again" in message
    assert_weights_equal(model, before)


def test_folder_and_missing_file_name_the_path(tmp_path):
    model = ViT("mu/8", image_size=32, num_classes=NUM_CLASSES)
    with pytest.raises(IsADirectoryError, match=re.escape(repr(str(tmp_path)))):
        load_npz(model, tmp_path)
    missing = str(tmp_path / "nope.npz")
    with pytest.raises(FileNotFoundError, match=re.escape(repr(missing))):
        read_npz(missing)


def test_top_level_names_are_the_weights_modules_own():
    from keras_vit.weights.npz import checkpoints as npz
    from keras_vit.weights.presets import catalogue as presets

    assert keras_vit.load_npz is npz.load_npz and keras_vit.list_presets is presets.list_presets


@pytest.mark.parametrize("prefix", ["opt/target/", "params/"])
def test_training_prefixes_are_stripped(tmp_path, prefix):
    arrays = official_arrays()
    nested = {prefix + k: v for k, v in arrays.items()}
    nested["opt/state/step"] = np.array(7)  # optimizer state next to the parameters
    path = write(tmp_path, nested)
    assert read_npz(path).keys() == arrays.keys()
    model = ViT("mu/8", image_size=32, num_classes=NUM_CLASSES, weights=path)
    x = images_for(32)
    check_close(to_numpy(model(x)), np_official_vit(arrays, x, "token"))


def test_name_table_covers_every_official_array():
    model = ViT(
        "mu/1", image_size=32, num_classes=NUM_CLASSES, representation_size=REPRESENTATION, **HYBRID
    )
    table, unmapped = official_variables(model)
    official = official_arrays(representation_size=REPRESENTATION, hybrid=HYBRID)
    assert set(table) == set(official)
    assert not unmapped


def test_failed_hybrid_load_changes_nothing(tmp_path):
    arrays = official_arrays(hybrid=HYBRID)
    arrays["block1/unit1/conv2/kernel"] = np.ones((3, 3, 16, 17), "float32")
    model = ViT("mu/1", image_size=32, num_classes=NUM_CLASSES, **HYBRID)
    before = weights_of(model)
    with pytest.raises(
        ValueError,
        match=r"block1/unit1/conv2/kernel: expected \(3, 3, 16, 16\), found \(3, 3, 16, 17\)",
    ):
        load_npz(model, write(tmp_path, arrays))
    assert_weights_equal(model, before)


# --- keras-vit convert ---------------------------------------------------------------------------


def _convert(argv):
    from keras_vit.cli import main

    return main(["convert", *argv])


def test_convert_command(tmp_path, capsys):
    arrays = official_arrays(representation_size=REPRESENTATION)
    ckpt = write(tmp_path, arrays)
    out = str(tmp_path / "model.keras")
    assert _convert([ckpt, out, "--model", "mu/8", "--image-size", "48"]) == 0
    model = keras.saving.load_model(out)
    assert model.input_shape == (None, 48, 48, 3)
    assert model.output_shape == (None, NUM_CLASSES)  # head and pre_logits from the file
    x = images_for(48)
    check_close(to_numpy(model(x)), np_official_vit(arrays, x, "token"))

    out2 = str(tmp_path / "finetune.keras")
    argv = [ckpt, out2, "--model", "mu/8", "--image-size", "32x48", "--num-classes", "3"]
    assert _convert(argv + ["--representation-size", "0"]) == 0
    model = keras.saving.load_model(out2)
    assert model.output_shape == (None, 3)
    assert model.get_layer("patch_encoder").grid_size == (4, 6)
    assert not to_numpy(model.get_layer("head").kernel).any()
    assert "pre_logits" not in [layer.name for layer in model.layers]

    assert _convert([ckpt, str(tmp_path / "bad.keras"), "--model", "mu/4"]) == 2
    assert "embedding/kernel" in capsys.readouterr().err


def test_model_argument_must_be_a_keras_model(tmp_path):
    path = write(tmp_path, official_arrays())
    with pytest.raises(ValueError, match="model must be a keras.Model"):
        load_npz(keras.layers.Dense(3), path)
    with pytest.raises(ValueError, match="model must be a keras.Model"):
        save_npz(keras.layers.Dense(3), str(tmp_path / "x.npz"))


def test_convert_prints_the_loader_log(tmp_path, capsys):
    ckpt = write(tmp_path, official_arrays())
    out = str(tmp_path / "m.keras")
    assert _convert([ckpt, out, "--model", "mu/8", "--image-size", "48", "--num-classes", "3"]) == 0
    captured = capsys.readouterr()
    assert "kept the model's own head (32, 3)" in captured.err
    assert "resized the position embedding from grid (4, 4) to (6, 6)" in captured.err
    assert "Wrote" in captured.out
