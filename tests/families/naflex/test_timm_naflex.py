"""keras_vit/weights/timm/naflex.py: timm's NaFlexVit (naflexvit_*) as NaFlex models, vs
timm.

One tiny timm model per position-embedding / pooling code path (learned bicubic table with GAP,
factorised aspect-preserving tables, the SigLIP 2 tower's bilinear table with MAP pooling),
every parameter perturbed, on one NaFlex batch that mixes sizes and aspect ratios (padding
included); the name table of every naflexvit_* name checked on the meta device.
"""

import numpy as np
import pytest

from keras_vit import from_timm
from keras_vit.data import naflex_batch
from keras_vit.weights.timm import names as N
from keras_vit.weights.timm import reader as T
from tests.helpers import to_numpy
from tests.weights.references import import_timm, import_torch
from tests.weights.timm_cases import perturb

torch = import_torch()
timm = import_timm()

# Tiny sizes: patch 4, a 4 x 4 position table (16 px), one block of width 32.
TIMM = dict(depth=1, embed_dim=32, num_heads=2, patch_size=4, pos_embed_grid_size=(4, 4))
OURS = dict(num_layers=1, hidden_dim=32, num_heads=2, mlp_dim=128, patch_size=4, image_size=16)
NAMES = {
    "gap": "naflexvit_base_patch16_gap.e300_s576_in1k",
    "parfac_gap": "naflexvit_base_patch16_parfac_gap.e300_s576_in1k",
    "siglip": "naflexvit_base_patch16_siglip.v2_webli",
}
RNG = np.random.default_rng(0)
IMAGES = [RNG.uniform(-1, 1, size).astype("float32") for size in
          [(12, 40, 3), (40, 12, 3), (20, 20, 3)]]  # fmt: skip
BATCH = naflex_batch(IMAGES, 4, 24)  # grids of other sizes and ratios, padded to 24


@pytest.mark.parametrize("kind", list(NAMES))
def test_matches_timm_on_a_mixed_batch(kind):
    name = NAMES[kind]
    reference = timm.create_model(name.partition(".")[0], num_classes=3, **TIMM).eval()
    perturb(torch, reference)
    state = {k: v.detach().numpy().copy() for k, v in reference.state_dict().items()}
    with torch.no_grad():
        expected = reference({k: torch.from_numpy(v) for k, v in BATCH.items()}).numpy()
    model = from_timm(name, state, **OURS)
    assert model.config.naflex and not BATCH["patch_valid"].all()
    got = to_numpy(model.predict_on_batch(BATCH))
    error = np.abs(got - expected).max() / np.abs(expected).max()
    assert error <= 1e-5, f"max relative error {error:.2e}"


def test_every_naflex_and_flexivit_name_is_timms_architecture():
    """Our table against every timm naflexvit_* / flexivit_* name (meta device, one block)."""
    checked = 0
    for name in timm.list_models("naflexvit_*") + timm.list_models("flexivit_*"):
        spec = N.parse_timm_name(name)
        with torch.device("meta"):
            model = timm.create_model(name, depth=1)
        config = T.timm_config(spec, num_layers=1)
        block = model.blocks[0]
        if name.startswith("naflex"):
            embeds = model.embeds
            got = (embeds.pos_embed_type, embeds.pos_embed_ar_preserving,
                   embeds.pos_embed_interp_mode, embeds.num_reg_tokens, model.global_pool,
                   not isinstance(model.fc_norm, torch.nn.Identity),
                   tuple(embeds.pos_embed_grid_size))  # fmt: skip
            ours = (config.position_embedding, config.position_embedding_aspect_preserving,
                    config.position_embedding_interpolation, config.num_register_tokens,
                    {"gap": "avg"}.get(config.pooling, config.pooling), config.fc_norm,
                    config.grid_size)  # fmt: skip
            assert got == ours, f"{name}: timm's {got}, ours {ours}"
        act = type(block.mlp.act).__name__
        got = (model.embed_dim, block.attn.num_heads, block.mlp.fc1.out_features,
               block.attn.qkv.bias is not None, model.num_classes, act == "GELUTanh",
               not isinstance(block.ls1, torch.nn.Identity))  # fmt: skip
        ours = (config.hidden_dim, config.num_heads, config.mlp_dim, spec.qkv_bias,
                spec.num_classes, config.approximate_gelu,
                config.layer_scale_init_value is not None)  # fmt: skip
        assert got == ours, f"{name}: timm's {got}, ours {ours}"
        table = T.timm_name_table(config, qkv_bias=spec.qkv_bias, patch_bias=spec.patch_bias)
        state = set(model.state_dict())
        assert set(table) == state, f"{name}: {sorted(set(table) ^ state)}"
        checked += 1
    assert checked == 17  # timm 1.0.31: 14 naflexvit_* (6 C-RADIO), 3 flexivit_*


def test_export_refuses_naflex():
    from keras_vit.weights.timm.export import check_timm_expressible

    with pytest.raises(ValueError, match="export_timm cannot write naflex=True"):
        check_timm_expressible(T.timm_config(NAMES["gap"], **OURS))
