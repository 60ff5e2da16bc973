"""timm's Perception Encoder (`vit_pe_*`) through `keras_vit.from_timm`.

Three tiny perturbed timm models on non-square grids (a spatial tower: class token, RoPE with
'xy' indexing and grid offset 1, `norm_pre`, no patch bias, no final norm; the lang gigantic
tower: no class token, offset 0, LayerScale; a core tower: final norm, timm's attention pool of
8 heads over every token, the class token included, and its output projection) against timm's
forward pass, `dynamic_image_size` and `feature_extractor` against `forward_intermediates`;
every `vit_pe_*` name against timm's state dict on the meta device.
"""

import dataclasses

import pytest

from keras_vit import feature_extractor, from_timm
from keras_vit.weights.timm import reader as T
from tests.helpers import to_numpy
from tests.weights.references import import_timm, import_torch
from tests.weights.timm_cases import (
    DYNAMIC_RTOL,
    TINY_OURS,
    TINY_TIMM,
    assert_close,
    meta_models,
    name_fields,
    random_images,
    timm_run,
    tiny_references,
    tiny_timm_model,
)

torch = import_torch()  # before timm, whatever the backend
timm = import_timm()

# id: (timm name, a non-square image size: 3 x 2 patches).
CASES = {
    "spatial": ("vit_pe_spatial_base_patch16_512.fb", (48, 32)),
    "lang_gigantic": ("vit_pe_lang_gigantic_patch14_448.fb", (42, 28)),
    "core": ("vit_pe_core_base_patch16_224.fb", (48, 32)),
}


def _timm_model(case, **overrides):
    return tiny_timm_model(timm, *CASES[case], TINY_TIMM, **overrides)


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    return tiny_references(torch, timm, CASES, TINY_TIMM, tmp_path_factory.mktemp("timm_pe"))


@pytest.mark.parametrize("case", list(CASES))
def test_matches_timm(case, references):
    ref = references[case]
    model = from_timm(CASES[case][0], ref["path"], image_size=CASES[case][1], **TINY_OURS)
    assert (model.final_norm is None) == (case != "core") and model.pre_norm is not None
    assert model.config.rotary_embedding == "axial"
    assert_close(to_numpy(model(ref["images"], training=False)), ref["expected"])


@pytest.mark.slow  # about 17 s on JAX (one compile per grid), 2 s elsewhere
def test_dynamic_image_size_and_features_match_timm(references):
    """timm's dynamic_img_size=True on a 2 x 4 grid; its intermediates on the 3 x 2 one."""
    ref = references["spatial"]
    theirs_model = _timm_model("spatial", dynamic_img_size=True)
    theirs_model.load_state_dict(ref["model"].state_dict())
    ours = from_timm(CASES["spatial"][0], ref["path"], image_size=CASES["spatial"][1],
                     dynamic_image_size=True, **TINY_OURS)  # fmt: skip
    images = random_images((32, 64), seed=2)
    assert_close(to_numpy(ours(images, training=False)),
                 timm_run(torch, theirs_model, images), DYNAMIC_RTOL)  # fmt: skip
    features = feature_extractor(ours, [0, 1])(ref["images"], training=False)
    theirs = timm_run(torch, theirs_model, ref["images"], theirs_model.forward_intermediates,
                      indices=[0, 1], norm=False, output_fmt="NCHW",
                      intermediates_only=True)  # fmt: skip
    assert [tuple(f.shape) for f in features] == [(2, 3, 2, 32)] * 2
    for a, b in zip(features, theirs, strict=True):
        assert_close(to_numpy(a), b, DYNAMIC_RTOL)


def test_export_timm_refuses_no_final_norm():
    from keras_vit.weights.timm.export import check_timm_expressible

    config = T.timm_config("vit_pe_spatial_tiny_patch16_512", num_layers=1)
    plain = dataclasses.replace(config, rotary_embedding=None, rotary_reference_grid=None,
                                rotary_grid_offset=0.0)  # fmt: skip
    with pytest.raises(ValueError, match="export_timm cannot write final_norm=False"):
        check_timm_expressible(plain)


def test_every_pe_name_we_read_is_timms_architecture():
    """Every `vit_pe_*` name we parse, against timm's model on the meta device (one block)."""
    checked = []
    for name, spec, model, config in meta_models(torch, timm, timm.list_models("vit_pe_*")):
        block = model.blocks[0]
        ours, got = name_fields(
            model, config, spec, "hidden_dim", "mlp_dim", "num_classes", "image_size",
            "class_token", "pre_norm", "layer_norm_epsilon",
        )  # fmt: skip
        got.update(
            layer_scale=block.gamma_1 is not None,
            final_norm=not isinstance(model.norm, torch.nn.Identity),
            map_num_heads=model.attn_pool.num_heads if model.attn_pool else None,
            map_mlp_dim=model.attn_pool.mlp.fc1.out_features if model.attn_pool else None,
        )
        ours.update(
            layer_scale=config.layer_scale_init_value is not None,
            final_norm=config.final_norm,
            map_num_heads=config.map_num_heads,
            map_mlp_dim=config.map_mlp_dim,
        )
        assert config.map_prefix_tokens == (config.pooling == "map")
        assert ours == got, f"{name}: ours {ours}, timm's {got}"
        checked.append(name)
    assert len(checked) == 12, checked  # timm 1.0.31: core 5, lang 2, spatial 5
