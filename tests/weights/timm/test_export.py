"""Tests for keras_vit/weights/timm/export.py and writing.py: keras_vit models -> timm.

Both directions, with real timm (`tests.weights.references`, torch first) and tiny perturbed
models: timm -> keras_vit -> timm for one model per family `from_timm` reads
(`tests.weights.timm_cases`: the written state dict has timm's keys and tensors, and the
returned name and kwargs build a timm model that loads it strictly and gives the same outputs),
and keras_vit -> timm -> keras_vit for keras_vit's own options (timm's outputs and ours again
after loading back), plus what timm cannot express.
"""

import dataclasses
import logging
import os
import re

import numpy as np
import pytest

from keras_vit import ViT, enable_lora, from_timm, quantize
from keras_vit.models.encoder import build_model
from keras_vit.models.variable_paths import PATHS
from keras_vit.weights.loading import load_state_dict
from keras_vit.weights.timm.export import (
    export_timm,
    timm_export_table,
    timm_model_for,
    timm_state_dict,
)
from keras_vit.weights.writing import model_config
from tests.weights.keras_models import images_for, perturbed
from tests.weights.references import import_timm, import_torch
from tests.weights.timm.test_reader import _run, _state
from tests.weights.timm_cases import (
    CASES,
    assert_close,
    from_timm_kwargs,
    perturb,
    random_images,
    timm_create_kwargs,
    timm_model,
    timm_run,
)

torch = import_torch()  # before timm, whatever the backend
timm = import_timm()
safetensors_torch = pytest.importorskip("safetensors.torch")

TINY_STEMS = ("hybrid", "hybrid_r50")  # ResNet stems timm has no model name for
# timm's Beit, VisionTransformerRelPos, parallel blocks and DINOv2 giant's SwiGLU: from_timm
# reads them, export_timm refuses (REFUSED).
IMPORT_ONLY = ("beit", "relpos", "srelpos", "vit_18x2", "dinov2_giant", "vit_rpn", "relpos_rpn")
EXPORTABLE = [case for case in CASES if case not in TINY_STEMS + IMPORT_ONLY]


def _timm_from(exported, path):
    """The timm model `export_timm` named, with the written file loaded strictly."""
    name, kwargs = exported
    model = timm.create_model(name, pretrained=False, **kwargs).eval()
    model.load_state_dict(safetensors_torch.load_file(path), strict=True)
    return model


@pytest.fixture(scope="module")
def round_trips(tmp_path_factory):
    """Per case: timm's perturbed state dict and output, ours from it, and what export wrote."""
    folder = tmp_path_factory.mktemp("export_timm")
    found = {}
    for case in [c for c in CASES if c not in IMPORT_ONLY]:
        reference = perturb(torch, timm_model(timm, case), seed=len(case) + 7)
        state = _state(reference)
        images = random_images(from_timm_kwargs(case)["image_size"], seed=5)
        ours = from_timm(CASES[case][0], state, **from_timm_kwargs(case))
        path = folder / f"{case}.safetensors"
        found[case] = dict(state=state, images=images, model=ours, path=str(path),
                           expected=timm_run(torch, reference, images))  # fmt: skip
        if case not in TINY_STEMS:
            found[case]["exported"] = export_timm(ours, path)
    return found


@pytest.mark.parametrize("case", EXPORTABLE)
def test_timm_to_keras_vit_to_timm(case, round_trips):
    trip = round_trips[case]
    written = {k: v.numpy() for k, v in safetensors_torch.load_file(trip["path"]).items()}
    assert sorted(written) == sorted(trip["state"])
    for key, value in trip["state"].items():
        np.testing.assert_array_equal(written[key], value, err_msg=key)
    name, kwargs = trip["exported"]
    assert name == CASES[case][0].partition(".")[0]  # the model's own timm name
    assert kwargs["num_classes"] == timm_create_kwargs(case)["num_classes"]
    assert_close(timm_run(torch, _timm_from(trip["exported"], trip["path"]), trip["images"]),
                  trip["expected"])  # fmt: skip


@pytest.mark.parametrize("case", TINY_STEMS)
def test_resnet_stems_timm_has_no_name_for(case, round_trips, tmp_path):
    """Tiny R26 / R50 stems: the state dict still reads back exactly; export names the stem."""
    trip = round_trips[case]
    arrays = timm_state_dict(trip["model"])
    assert sorted(arrays) == sorted(trip["state"])
    for key, value in trip["state"].items():
        np.testing.assert_array_equal(arrays[key], value, err_msg=key)
    path = tmp_path / "stem.safetensors"
    with pytest.raises(ValueError, match=r"ResNet stem .*'resnet_units': \(1, 1"):
        export_timm(trip["model"], path)
    assert not path.exists()


# keras_vit's own models: ViT("mu/8", ...) options, each exported, run by timm, loaded back.
OPTIONS = {
    "tanh_gelu_non_square_one_channel": dict(image_size=(32, 48), num_classes=3, num_channels=1),
    "gap_fc_norm_registers_qk_norm": dict(
        pooling="gap", fc_norm=True, num_register_tokens=2, prefix_position_embedding=False,
        layer_scale_init_value=0.1, qk_norm=True, num_classes=3, approximate_gelu=False,
    ),
    "sincos_pre_norm_patch_bias": dict(
        position_embedding="sincos2d", pre_norm=True, include_top=False, pooling="token",
    ),
    "clip_map_quick_gelu": dict(
        pooling="map", activation="quick_gelu", layer_norm_epsilon=1e-5, pre_norm=True,
        num_classes=3,
    ),
    "tokens_fc_norm": dict(include_top=False, pooling=None, fc_norm=True, class_token=True),
    "distilled_features": dict(distillation_token=True, include_top=False, approximate_gelu=False),
    "distilled_head": dict(distillation_token=True, num_classes=3, approximate_gelu=False),
    "dynamic": dict(dynamic_image_size=True, num_classes=3, num_register_tokens=1),
}  # fmt: skip


def _load_back(model, state):
    """timm's state dict into a new keras_vit model of the same architecture (timm's table).

    A `"sincos2d"` model comes back with the learned patch-token table timm holds; a
    `pre_norm` one with a zero patch bias (timm folds it into the position embedding).
    """
    config = model_config(model)
    if config.position_embedding == "sincos2d":
        config = dataclasses.replace(
            config, position_embedding="learned", prefix_position_embedding=False
        )
    table = timm_export_table(config)
    fills = {PATHS["patch_bias"]: 0.0} if config.pre_norm else None
    return load_state_dict(build_model(config), state, table, source="timm's state dict",
                           logger=logging.getLogger("test"), fills=fills)  # fmt: skip


@pytest.mark.parametrize("option", list(OPTIONS))
def test_keras_vit_to_timm_to_keras_vit(option, tmp_path):
    kwargs = {"image_size": 32, **OPTIONS[option]}
    model = perturbed(ViT("mu/8", **kwargs), seed=len(option))
    path = str(tmp_path / "model.safetensors")
    exported = export_timm(model, path)
    reference = _timm_from(exported, path)
    back = _load_back(model, _state(reference))
    sizes = [(48, 32), (32, 64)] if kwargs.get("dynamic_image_size") else [None]
    for size in sizes:
        images = images_for(model, size)
        ours = _run(model, images)
        assert_close(timm_run(torch, reference, images), ours)
        assert_close(_run(back, images), ours)


def test_names_and_kwargs_of_keras_vit_models():
    """Only what the name's own architecture lacks is in the kwargs (sizes, image, classes)."""
    clip = ViT("mu/8", image_size=32, num_classes=3, layer_norm_epsilon=1e-5, pre_norm=True,
               approximate_gelu=False)  # fmt: skip
    exported, qkv_bias = timm_model_for(model_config(clip))
    assert exported.name == "vit_base_patch16_clip_224" and qkv_bias
    assert exported.kwargs == dict(img_size=32, num_classes=3, embed_dim=32, depth=2,
                                   num_heads=2, mlp_ratio=2.0, patch_size=8)  # fmt: skip
    # A model name timm's table parses but cannot build (7 px < one patch) is passed over.
    named = ViT("mu/8", image_size=32, name="vit_base_patch16_7", approximate_gelu=False)
    assert timm_model_for(model_config(named))[0].name == "vit_base_patch16_224"
    headless = ViT("mu/8", image_size=32, include_top=False, approximate_gelu=False)
    exported, _ = timm_model_for(model_config(headless))
    assert exported.kwargs["num_classes"] == 0
    assert exported.create_model_call().startswith(
        "timm.create_model('vit_base_patch16_224', pretrained=False, img_size=32, num_classes=0"
    )


def test_overwrite_and_atomic_write(tmp_path):
    model = ViT("mu/8", image_size=32, num_classes=3)
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"keep")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        export_timm(model, path)
    assert path.read_bytes() == b"keep"
    export_timm(model, path, overwrite=True)
    assert sorted(os.listdir(tmp_path)) == ["model.safetensors"]  # no temporary file left
    assert "head.weight" in safetensors_torch.load_file(str(path))


def _backbone_model():
    import keras

    inputs = keras.Input((32, 32, 3))
    backbone = keras.Model(inputs, keras.layers.Conv2D(8, 4, strides=4)(inputs), name="cnn")
    return ViT("mu/1", image_size=32, backbone=backbone, num_classes=3)


REFUSED = {
    "backbone": (_backbone_model, "backbone='cnn'"),
    "representation_size": (
        lambda: ViT("mu/8", image_size=32, representation_size=16), "representation_size=16"),
    "classifier_activation": (
        lambda: ViT("mu/8", image_size=32, classifier_activation="softmax"),
        "classifier_activation='softmax'"),
    "layer_norm_epsilon": (
        lambda: ViT("mu/8", image_size=32, layer_norm_epsilon=1e-12), "layer_norm_epsilon=1e-12"),
    "official_resnet_stem": (
        lambda: ViT("R+Ti/16", image_size=32, hidden_dim=32, num_heads=2, mlp_dim=64,
                    num_layers=1), "resnet_conv_epsilon': 1e-05"),
    "lora": (lambda: enable_lora(ViT("mu/8", image_size=32), rank=2), "merge_lora"),
    "int8": (lambda: quantize(ViT("mu/8", image_size=32), "int8"), "has dtype int8"),
    "relative_position_bias": (
        lambda: ViT("mu/8", image_size=32, position_embedding=None, key_bias=False,
                    relative_position_bias="shared"), "relative_position_bias='shared'"),
    "key_bias": (lambda: ViT("mu/8", image_size=32, key_bias=False), "key_bias=False"),
    "swiglu": (lambda: ViT("mu/8", image_size=32, mlp="swiglu"), "mlp='swiglu'"),
    "rotary": (lambda: ViT("mu/8", image_size=32, rotary_embedding="eva02"),
               "rotary_embedding='eva02'"),
    "num_parallel": (lambda: ViT("mu/8", image_size=32, num_parallel=2), "block_kind='parallel'"),
    "post_norm": (lambda: ViT("mu/8", image_size=32, block_kind="post"), "block_kind='post'"),
    "parallel_scaling": (lambda: ViT("mu/8", image_size=32, block_kind="parallel_scaling"),
                         "block_kind='parallel_scaling'"),
    "token_gap": (lambda: ViT("mu/8", image_size=32, pooling="token_gap"), "pooling='token_gap'"),
    "sincos_dynamic": (
        lambda: ViT("mu/8", image_size=32, position_embedding="sincos2d",
                    dynamic_image_size=True), "position_embedding='sincos2d'"),
    # Refused by the allow-list (an option export_timm does not write, off its default).
    "dynamic_no_antialias": (
        lambda: ViT("mu/8", image_size=32, dynamic_image_size=True,
                    position_embedding_antialias=False), "position_embedding_antialias=False"),
}  # fmt: skip


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, marks=pytest.mark.slow) if c == "int8" else c for c in REFUSED],
)  # quantizing takes 12-18 s
def test_what_timm_cannot_express_is_refused_before_writing(case, tmp_path):
    build, message = REFUSED[case]
    path = tmp_path / "model.safetensors"
    with pytest.raises(ValueError, match=re.escape(message)):
        export_timm(build(), path)
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vit_small_r26_s32_224", "vit_base_r50_s16_224"])
def test_full_resnet_stems_round_trip(name, tmp_path):
    """timm's own R26 / R50 stems (full width, 32 px images, one tiny block) both ways."""
    sizes = dict(img_size=32, depth=1, embed_dim=32, num_heads=2, num_classes=3)
    reference = timm.create_model(name, pretrained=False, **sizes).eval()
    reference = perturb(torch, reference, seed=11)
    state = _state(reference)
    ours = from_timm(name, state, image_size=32, num_layers=1, hidden_dim=32, num_heads=2,
                     mlp_dim=128)  # fmt: skip
    path = str(tmp_path / "hybrid.safetensors")
    exported = export_timm(ours, path)
    assert exported == (name, {**sizes, "mlp_ratio": 4.0})
    written = safetensors_torch.load_file(path)
    assert sorted(written) == sorted(state)
    for key, value in state.items():
        np.testing.assert_array_equal(written[key].numpy(), value, err_msg=key)
    images = random_images(32, seed=8)
    assert_close(timm_run(torch, _timm_from(exported, path), images), _run(ours, images))


def test_every_option_is_written_or_refused():
    """The allow-list: an option export_timm does not write must be at its default."""
    import dataclasses

    from keras_vit.models.config import ViTConfig
    from keras_vit.weights.timm import export_checks as C

    assert set(C._WRITTEN) <= {f.name for f in dataclasses.fields(ViTConfig)}  # no stale names
    config = ViTConfig.from_variant("mu/8", image_size=32, dynamic_image_size=True)
    C.check_timm_expressible(config)
    with pytest.raises(ValueError, match="position_embedding_antialias=False.*no form for it"):
        C.check_timm_expressible(dataclasses.replace(config, position_embedding_antialias=False))
