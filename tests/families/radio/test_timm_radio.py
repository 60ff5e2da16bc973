"""C-RADIO, TIPSv2, InternViT-300M and timm's test models through `keras_vit.from_timm`.

keras_vit/families/radio/timm_names.py. One tiny perturbed timm model per code path against
timm's forward pass: C-RADIO's plain ViT (class token and registers, position embedding on the
patches, no final norm) loading a larger stored table at two image sizes through timm's own
pretrained loader (bilinear, align_corners for v3 base), C-RADIO as NaFlex models on a batch
that mixes sizes and aspect ratios (align_corners True and False), InternViT-300M (no final
norm, any image size), `test_vit3` (MAP over every token, a register row in the position
table) and `test_vit4` (RMSNorm, any size). TIPSv2 is DINOv2's code path (the `dinov2_giant`
and `dinov2_registers` cases of tests/weights/timm/test_reader.py); the resize without align_corners
is checked against PyTorch in tests/layers/test_naflex_position.py. Every name of the families
against timm's architecture and state dict on the meta device.
"""

import numpy as np
import pytest

from keras_vit import from_timm
from keras_vit.data import naflex_batch
from keras_vit.families.radio import timm_names as timm_radio_names
from keras_vit.layers.position_embedding import resample_position_embedding
from tests.helpers import to_numpy
from tests.weights.references import import_timm, import_torch
from tests.weights.timm_cases import (
    assert_close,
    meta_models,
    perturb,
    random_images,
    timm_reference,
    timm_run,
    tiny_references,
    tiny_timm_model,
)

torch = import_torch()  # before timm, whatever the backend
timm = import_timm()

# The position embedding resampled at every call (as tests/weights/timm/test_reader.py).
DYNAMIC_RTOL = 1e-4
SMALL = dict(depth=1, embed_dim=32, num_heads=2, num_classes=3)
OURS = dict(num_layers=1, hidden_dim=32, num_heads=2)
# id: (timm name, image size: a 2 x 2 grid).
CASES = {
    "intern": ("vit_intern300m_patch14_448.ogvl_dist", 28),
    "test_vit3": ("test_vit3.r160_in1k", 32),
    "test_vit4": ("test_vit4", 32),  # timm has no weights (no tag) for it
}
# C-RADIO: a stored 4 x 4 table (RADIO's is 128 x 128) read at 2 x 2 and 3 x 2 grids.
RADIO = {"v3_base": "vit_base_patch16_radio_v3.c_radio"}
RADIO_TABLE = 64  # px: 4 x 4 patches of 16


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    return tiny_references(torch, timm, CASES, SMALL, tmp_path_factory.mktemp("timm_radio"))


@pytest.mark.parametrize("case", list(CASES))
def test_matches_timm(case, references):
    name, size = CASES[case]
    ref = references[case]
    model = from_timm(name, ref["path"], image_size=size, **OURS)
    assert model.config.dynamic_image_size == (case in ("intern", "test_vit4"))
    assert_close(to_numpy(model.predict_on_batch(ref["images"])), ref["expected"])
    if model.config.dynamic_image_size:  # timm's dynamic_img_size=True: another grid
        images = random_images((3 * size // 2, size), seed=1)
        expected = timm_run(torch, ref["model"], images)
        assert_close(to_numpy(model.predict_on_batch(images)), expected, DYNAMIC_RTOL)


@pytest.fixture(scope="module")
def radio_checkpoints(tmp_path_factory):
    """Per RADIO case: a perturbed timm model at 64 px (the stored table) and its file."""
    folder = tmp_path_factory.mktemp("timm_radio_plain")
    found = {}
    for case, name in RADIO.items():
        model = perturb(torch, tiny_timm_model(timm, name, RADIO_TABLE, SMALL), seed=len(case))
        path = folder / f"{case}.safetensors"
        found[case] = timm_reference(torch, model, random_images(RADIO_TABLE), path)
    return found


@pytest.mark.parametrize("case, size", [("v3_base", 32), ("v3_base", (48, 32))])
def test_radio_reads_a_larger_table_like_timms_loader(case, size, radio_checkpoints):
    """timm's pretrained loader (its RADIO filter: bilinear, no antialias, align_corners for
    v3 base) from the 4 x 4 table to the model's grid, against `from_timm` at that size."""
    ref = radio_checkpoints[case]
    name = RADIO[case]
    overlay = dict(file=str(ref["path"]), num_classes=3)
    reference = timm.create_model(name.partition(".")[0], pretrained=True, img_size=size,
                                  pretrained_cfg_overlay=overlay, **SMALL).eval()  # fmt: skip
    model = from_timm(name, ref["path"], image_size=size, **OURS)
    assert model.final_norm is None and model.config.num_register_tokens == 7
    images = random_images(size, seed=2)
    assert_close(to_numpy(model.predict_on_batch(images)), timm_run(torch, reference, images))
    # The table: our NumPy bilinear resize of the stored one.
    grid = model.config.grid_size
    posemb = to_numpy(model.get_layer("patch_encoder").position_embeddings)
    expected = resample_position_embedding(ref["state"]["pos_embed"], grid, 0,
                                           interpolation="bilinear", antialias=False,
                                           align_corners=case == "v3_base")  # fmt: skip
    np.testing.assert_allclose(posemb, expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(posemb[0], reference.pos_embed[0].detach().numpy(), atol=1e-6)


# C-RADIO NaFlex: patch 4, an 8 x 8 table (RADIO's 128 x 128), one block.
NAFLEX_TIMM = dict(depth=1, embed_dim=32, num_heads=2, patch_size=4, pos_embed_grid_size=(8, 8))
NAFLEX_OURS = dict(num_layers=1, hidden_dim=32, num_heads=2, patch_size=4, image_size=32)
RNG = np.random.default_rng(0)
IMAGES = [RNG.uniform(-1, 1, size).astype("float32") for size in
          [(12, 40, 3), (40, 12, 3), (20, 20, 3)]]  # fmt: skip
BATCH = naflex_batch(IMAGES, 4, 24)  # grids of other sizes and ratios, padded to 24


@pytest.mark.parametrize(
    "name", ["naflexvit_base_patch16_radio_v3.c_radio", "naflexvit_large_patch16_radio_v3"]
)
def test_naflex_radio_matches_timm_on_a_mixed_batch(name):
    """align_corners True (v3 base) and False (v3 large, LayerScale): the table resized to each
    image's longer side, cropped top-left; class token pooling over a padded batch."""
    reference = timm.create_model(name.partition(".")[0], num_classes=3, **NAFLEX_TIMM).eval()
    perturb(torch, reference)
    state = {k: v.detach().numpy().copy() for k, v in reference.state_dict().items()}
    with torch.no_grad():
        expected = reference({k: torch.from_numpy(v) for k, v in BATCH.items()}).numpy()
    model = from_timm(name, state, **NAFLEX_OURS)
    assert model.config.naflex and model.config.class_token and not BATCH["patch_valid"].all()
    assert_close(to_numpy(model.predict_on_batch(BATCH)), expected)


def _norm_kind(norm):
    return {"Identity": None, "LayerNorm": "layernorm", "RmsNorm": "rmsnorm"}[type(norm).__name__]


def _names():
    names = []
    for pattern in ("*radio*", "*tipsv2*", "vit_intern*", "test_vit*"):
        names += timm.list_models(pattern)
    return names


def test_every_name_is_timms_architecture():
    """Our table against every name of the families (meta device, one block): the numbers, the
    options and the weight names (`meta_models` checks the state dict)."""
    identity = torch.nn.Identity
    checked = 0
    for name, spec, model, config in meta_models(torch, timm, _names()):
        block = model.blocks[0]
        embeds = getattr(model, "embeds", None)  # NaFlexVit
        owner = embeds if embeds is not None else model
        got = dict(
            width=(model.embed_dim, block.attn.num_heads, block.mlp.fc2.in_features),
            swiglu=type(block.mlp.act).__name__ == "SiLU",
            qkv_bias=block.attn.qkv.bias is not None,
            class_token=getattr(owner, "cls_token", None) is not None,
            registers=getattr(owner, "num_reg_tokens", 0),
            final_norm=_norm_kind(model.norm),
            fc_norm=_norm_kind(model.fc_norm),
            norm=_norm_kind(block.norm1),
            pooling={"avg": "gap"}.get(model.global_pool, model.global_pool),
            layer_scale=not isinstance(block.ls1, identity),
            num_classes=model.num_classes,
        )
        norm = "rmsnorm" if config.norm == "rmsnorm" else "layernorm"
        ours = dict(
            width=(config.hidden_dim, config.num_heads, config.mlp_dim),
            swiglu=config.mlp == "swiglu",
            qkv_bias=spec.qkv_bias,
            class_token=config.class_token,
            registers=config.num_register_tokens,
            final_norm=norm if config.final_norm and not config.fc_norm else None,
            fc_norm=norm if config.fc_norm else None,
            norm=norm,
            pooling=config.pooling,
            layer_scale=config.layer_scale_init_value is not None,
            num_classes=spec.num_classes,
        )
        if embeds is not None:
            got.update(resize=(tuple(embeds.pos_embed_grid_size), embeds.pos_embed_interp_mode,
                               embeds.pos_embed_antialias, embeds.pos_embed_align_corners,
                               embeds.pos_embed_ar_preserving))  # fmt: skip
            ours.update(resize=(config.grid_size, config.position_embedding_interpolation,
                                config.position_embedding_antialias,
                                config.position_embedding_align_corners,
                                config.position_embedding_aspect_preserving))  # fmt: skip
        elif hasattr(block.attn, "rel_pos"):  # test_vit_relpos
            got["rel_pos"] = block.attn.rel_pos.mlp.fc1.out_features
            ours["rel_pos"] = config.relative_position_mlp_dim
        else:
            got.update(
                image_size=tuple(model.patch_embed.img_size),
                dynamic=model.dynamic_img_size,
                position_on_prefix=not model.no_embed_class,
                map_prefix=getattr(model, "pool_include_prefix", False),
            )
            ours.update(
                image_size=config.image_size,
                dynamic=config.dynamic_image_size,
                position_on_prefix=config.prefix_position_embedding,
                map_prefix=config.map_prefix_tokens,
            )
        differ = {k: (ours[k], got[k]) for k in got if ours[k] != got[k]}
        assert not differ, f"{name}: (ours, timm's) {differ}"
        checked += 1
    # timm 1.0.31: C-RADIO 6 + 6 NaFlex, TIPSv2 4, InternViT-300M 1, test_vit* 5.
    assert checked == 22 == len(timm_radio_names.DEFAULT_CLASSES) + 5
