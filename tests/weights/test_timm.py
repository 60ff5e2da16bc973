"""Tests for keras_vit/weights/timm.py: timm checkpoints into keras_vit models.

Two references: a NumPy forward of timm's ViT (`tests.weights.timm_cases.np_timm_forward`, run on
random state dicts with timm's own names and shapes from `data/timm_keys.json`), always; and
timm itself, when it can be imported (its torchvision dependency does not import beside the CPU
build of PyTorch 2.13 the project installs: see README), on the same tiny models.
"""

import importlib.util
import logging
import re

import keras
import numpy as np
import pytest

from keras_vit import from_timm
from keras_vit.weights import loading as L
from keras_vit.weights import timm as T
from keras_vit.weights.state_dict import write_safetensors
from tests.helpers import to_numpy
from tests.weights.timm_cases import CASES, np_timm_forward, random_state_dict

RTOL = 1e-5


def _images(size, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (2, size, size, 3)).astype("float32")


def _run(model, images):
    """The model's outputs (predict: one compiled graph, faster than eager ops on JAX)."""
    return model.predict(images, verbose=0)


def _assert_close(actual, expected, rtol=RTOL):
    scale = np.abs(expected).max()
    error = np.abs(np.asarray(actual, "float64") - expected).max() / scale
    assert error <= rtol, f"max relative error {error:.2e} > {rtol:.0e}"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Every case's random timm-layout state dict, saved as .safetensors (and one .pth)."""
    folder = tmp_path_factory.mktemp("timm")
    paths = {}
    for case in CASES:
        arrays = random_state_dict(case, seed=len(case))
        paths[case] = (arrays, write_safetensors(arrays, folder / f"{case}.safetensors"))
    return paths


@pytest.fixture(scope="module")
def models(checkpoints):
    """Every case loaded from its .safetensors file (built once per module)."""
    return {case: from_timm(CASES[case][0], path, **CASES[case][2])
            for case, (_, path) in checkpoints.items()}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_matches_the_numpy_timm_forward(case, checkpoints, models):
    _, _, ours, arch = CASES[case]
    arrays, _ = checkpoints[case]
    images = _images(ours["image_size"])
    _assert_close(_run(models[case], images), np_timm_forward(arrays, arch, images))


def test_pth_and_dict_checkpoints(checkpoints, tmp_path):
    torch = pytest.importorskip("torch")
    name, _, ours, arch = CASES["vit_gap"]
    arrays, _ = checkpoints["vit_gap"]
    tensors = {k: torch.from_numpy(v) for k, v in arrays.items()}
    torch.save({"state_dict": tensors, "epoch": 3}, tmp_path / "ckpt.pth")
    images = _images(ours["image_size"])
    expected = np_timm_forward(arrays, arch, images)
    for source in (str(tmp_path / "ckpt.pth"), tensors):
        _assert_close(_run(from_timm(name, source, **ours), images), expected)


def test_other_image_size_resamples_like_timm(checkpoints):
    from keras_vit.weights.interpolate import resample_position_embedding

    name, _, ours, arch = CASES["vit"]
    arrays, path = checkpoints["vit"]
    model = from_timm(name, path, **{**ours, "image_size": 64})  # 3x3 grid -> 4x4
    expected_posemb = resample_position_embedding(arrays["pos_embed"], (4, 4), 1, antialias=True)
    posemb = model.get_layer("patch_encoder").position_embeddings
    np.testing.assert_allclose(to_numpy(posemb), expected_posemb, rtol=1e-6, atol=1e-7)
    images = _images(64)
    resampled = {**arrays, "pos_embed": expected_posemb}
    _assert_close(_run(model, images), np_timm_forward(resampled, arch, images))


def test_new_class_count_gives_zero_head_and_keeps_features(checkpoints, caplog):
    name, _, ours, arch = CASES["vit"]
    arrays, path = checkpoints["vit"]
    with caplog.at_level(logging.INFO, logger="keras_vit.timm"):
        model = from_timm(name, path, **{**ours, "num_classes": 7})
    assert "dropped the checkpoint's head.weight (5, 32)" in caplog.text
    head = model.get_layer("head")
    assert head.units == 7 and not np.any(to_numpy(head.kernel))
    features = from_timm(name, path, **ours, include_top=False)
    images = _images(48)
    _assert_close(_run(features, images), np_timm_forward(arrays, arch, images, features=True))


def test_backbone_checkpoint_with_a_new_head(checkpoints, models):
    name, _, ours, arch = CASES["dinov2"]
    arrays, path = checkpoints["dinov2"]
    model = from_timm(name, path, **{**ours, "num_classes": 4})
    assert model.output_shape == (None, 4)
    assert not np.any(to_numpy(model.get_layer("head").kernel))
    assert models["dinov2"].output_shape == (None, 32)  # no head in the checkpoint: features


def test_without_checkpoint_is_the_architecture_at_random():
    tiny_stem = dict(resnet_units=(1,), resnet_width=8, resnet_groups=4)
    model = from_timm("vit_small_r26_s32_384", num_layers=1, **tiny_stem)
    assert model.input_shape == (None, 384, 384, 3) and model.output_shape == (None, 1000)
    assert model.get_layer("conv_root").epsilon_mode == "variance"
    assert model.get_layer("gn_root").epsilon == 1e-5
    dinov2 = from_timm("timm/vit_small_patch14_dinov2.lvd142m", num_layers=1)
    assert dinov2.output_shape == (None, 384) and dinov2.input_shape[1:3] == (518, 518)


def test_one_error_lists_every_problem_and_the_model_stays(checkpoints, models):
    name, _, ours, _ = CASES["vit"]
    arrays, _ = checkpoints["vit"]
    model = models["vit"]
    before = [to_numpy(w).copy() for w in model.weights]
    bad = dict(arrays)
    del bad["blocks.1.norm2.bias"]  # missing
    bad["blocks.0.mlp.fc1.weight"] = bad["blocks.0.mlp.fc1.weight"][:, :16]  # mis-shaped
    bad["blocks.0.attn.q_norm.weight"] = np.ones(16, "float32")  # unexpected
    with pytest.raises(ValueError) as info:
        T.load_timm_weights(model, name, bad)
    message = str(info.value)
    assert "3 problem(s)" in message
    assert "missing    blocks.1.norm2.bias: expected (32,), not in the checkpoint" in message
    assert "unexpected blocks.0.attn.q_norm.weight: found (16,)" in message
    assert "shape      blocks.0.mlp.fc1.weight: expected (128, 32), found (128, 16)" in message
    for old, new in zip(before, model.weights, strict=True):
        np.testing.assert_array_equal(old, to_numpy(new))
    with pytest.raises(ValueError, match="3 problem"):
        from_timm(name, bad, **ours)


def test_names_and_tags():
    spec = T.parse_timm_name("hf-hub:timm/deit_base_patch16_384.fb_in1k")
    assert (spec.name, spec.tag, spec.family.name, spec.image_size) == (
        "deit_base_patch16_384", "fb_in1k", "deit", 384
    )  # fmt: skip
    miil = T.parse_timm_name("vit_base_patch16_224_miil")
    assert not miil.qkv_bias and miil.num_classes == 11221
    with pytest.raises(ValueError, match=r"(?s)Unknown timm model name 'resnet50'.*vit: e\.g\."):
        T.parse_timm_name("resnet50.a1_in1k")
    with pytest.raises(ValueError, match="SwiGLU MLP"):
        from_timm("vit_giant_patch14_dinov2.lvd142m")
    with pytest.raises(ValueError, match="rotary position embeddings"):
        from_timm("vit_base_patch16_rope_224")


# Families whose architecture needs a ViT argument: each works once keras_vit has it.
WAITING = {
    "deit_tiny_distilled_patch16_224": "distillation_token",
    "deit3_small_patch16_224": "prefix_position_embedding",
    "vit_medium_patch16_reg4_gap_256": "num_register_tokens",
    "vit_small_patch14_reg4_dinov2": "num_register_tokens",
    "vit_base_patch16_clip_224": "pre_norm",
    "vit_base_patch16_clip_quickgelu_224": "activation",
    "vit_base_patch16_siglip_224": "pooling='map'",
}


@pytest.mark.parametrize("name", list(WAITING))
def test_families_waiting_for_a_feature(name):
    spec = T.parse_timm_name(name)
    fields, poolings = L.available_features()
    feature = WAITING[name]
    has = "map" in poolings if feature == "pooling='map'" else feature in fields
    missing = L.missing_features(spec.arguments)
    assert (feature in missing) != has  # the family's arguments ask for the feature
    if not missing:  # every feature it needs has landed: the family builds
        model = from_timm(name, image_size=32, patch_size=16, **T_SMALL)
        assert isinstance(model, keras.Model)
    else:
        with pytest.raises(ValueError, match=rf"needs .*{re.escape(missing[0])}.*not available"):
            from_timm(name)


T_SMALL = dict(num_layers=1, hidden_dim=32, num_heads=2, mlp_dim=64)


def test_missing_feature_is_named(monkeypatch):
    fields, poolings = L.available_features()

    def without(*names, pools=poolings):
        monkeypatch.setattr(L, "available_features", lambda: (fields - set(names), pools))

    without("layer_scale_init_value")
    with pytest.raises(ValueError, match=r"'vit_small_patch14_dinov2' .*needs layer_scale_init"):
        from_timm("vit_small_patch14_dinov2")
    without(pools=("token", "gap", None))
    with pytest.raises(ValueError, match=r"needs pooling='map'"):
        from_timm("vit_so400m_patch14_siglip_384")
    without("dynamic_image_size")
    with pytest.raises(ValueError, match="needs dynamic_image_size"):
        from_timm("vit_tiny_patch16_224", dynamic_image_size=True)


# --- timm itself, where it imports ------------------------------------------------------------


def _timm_importable():
    if importlib.util.find_spec("timm") is None:
        return False
    try:
        import timm  # noqa: F401  (needs a torchvision that loads beside this torch)
    except Exception:  # noqa: BLE001  (torchvision's "operator torchvision::nms does not exist")
        return False
    return True


needs_timm = pytest.mark.skipif(
    not _timm_importable(),
    reason="timm does not import here (torchvision needs a PyTorch build it was compiled for)",
)


@pytest.fixture(scope="module")
def timm_models():
    from tests.weights.timm_cases import perturb, timm_model

    return {case: perturb(timm_model(case), seed=len(case)) for case in CASES}


@needs_timm
@pytest.mark.parametrize("case", list(CASES))
def test_matches_timm(case, timm_models, tmp_path):
    import torch

    name, _, ours, _ = CASES[case]
    model = timm_models[case]
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    images = _images(ours["image_size"])
    with torch.no_grad():
        expected = model(torch.from_numpy(images).permute(0, 3, 1, 2)).numpy()
    torch.save(model.state_dict(), tmp_path / "w.pth")
    for source in (write_safetensors(state, tmp_path / "w.safetensors"), tmp_path / "w.pth"):
        _assert_close(_run(from_timm(name, source, **ours), images), expected)


@needs_timm
def test_keys_file_is_timms(timm_models):
    import json

    from tests.weights.timm_cases import KEYS_FILE

    with open(KEYS_FILE) as f:
        recorded = json.load(f)
    for case, model in timm_models.items():
        shapes = {k: list(v.shape) for k, v in model.state_dict().items()}
        assert recorded[case] == shapes, f"{case}: rerun python -m tests.weights.timm_cases"


@needs_timm
def test_resampled_like_timm(timm_models):
    import timm
    import torch

    name, overrides, ours, _ = CASES["vit"]
    bigger = timm.create_model(name.partition(".")[0], **{**overrides, "img_size": 64}).eval()
    state = timm_models["vit"].state_dict()
    filtered = timm.models.vision_transformer.checkpoint_filter_fn(state, bigger)
    bigger.load_state_dict(filtered)
    images = _images(64)
    with torch.no_grad():
        expected = bigger(torch.from_numpy(images).permute(0, 3, 1, 2)).numpy()
    model = from_timm(name, dict(state), **{**ours, "image_size": 64})
    _assert_close(_run(model, images), expected)


@needs_timm
def test_every_timm_name_we_parse_is_timms_architecture():
    """Our table against timm's own models (built on the meta device, no weights)."""
    import timm
    import torch

    checked = 0
    for name in timm.list_models("vit_*") + timm.list_models("deit*"):
        try:
            spec = T.parse_timm_name(name)
        except ValueError:
            continue
        with torch.device("meta"):
            model = timm.create_model(name)
        block = model.blocks[0]
        args = spec.arguments
        assert model.embed_dim == args.get("hidden_dim", model.embed_dim), name
        assert block.attn.num_heads == args.get("num_heads", block.attn.num_heads), name
        assert (block.attn.qkv.bias is not None) == spec.qkv_bias, name
        assert model.num_classes == spec.num_classes, name
        assert (model.cls_token is not None) == args.get("class_token", True), name
        assert model.num_reg_tokens == args.get("num_register_tokens", 0), name
        assert model.no_embed_class == (not args.get("prefix_position_embedding", True)), name
        assert list(model.patch_embed.img_size) == [spec.image_size] * 2, name
        checked += 1
    assert checked > 100
