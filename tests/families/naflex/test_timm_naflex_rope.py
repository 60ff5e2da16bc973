"""keras_vit/weights/timm/naflex_config.py: timm's rotary NaFlexVit (from a NaFlexVitCfg) vs ours.

One tiny timm `NaFlexVit(NaFlexVitCfg(rope_type=...))` per RoPE code path (axial 'ij' = our
"eva02", axial 'xy' = our "axial" with a reference grid and offset, DINOv3 in timm's
rotate-half layout, mixed in timm's 'ij' indexing with LayerScale and prefix tokens), every
parameter perturbed, on one NaFlex batch mixing sizes and aspect ratios (padding included).
"""

import numpy as np
import pytest

from keras_vit import from_timm_naflexvit
from keras_vit.data import naflex_batch
from keras_vit.weights.timm.naflex_config import naflexvit_config
from tests.helpers import to_numpy
from tests.weights.references import import_timm, import_torch
from tests.weights.timm_cases import RTOL, assert_close, perturb

torch = import_torch()
timm = import_timm()
from timm.models.naflexvit import NaFlexVit, NaFlexVitCfg  # noqa: E402  (after the shim)

TINY = dict(patch_size=4, embed_dim=32, depth=1, num_heads=2, pos_embed_grid_size=(4, 4))
RNG = np.random.default_rng(0)
IMAGES = [RNG.uniform(-1, 1, size).astype("float32") for size in
          [(12, 40, 3), (40, 12, 3), (20, 20, 3)]]  # fmt: skip
BATCH = naflex_batch(IMAGES, 4, 24)  # grids 3 x 10, 10 x 3, 5 x 5 (this one padded)
CASES = {
    "axial_ij": dict(rope_type="axial", pos_embed="none", global_pool="avg", reg_tokens=1),
    "axial_xy": dict(rope_type="axial", rope_grid_indexing="xy", rope_ref_feat_shape=(3, 3),
                     rope_grid_offset=0.5, rope_temperature=100.0, pos_embed="none"),
    "dinov3": dict(rope_type="dinov3", rope_rotate_half=True, rope_temperature=100.0,
                   global_pool="avg", reg_tokens=4),
    "mixed_ij": dict(rope_type="mixed", pos_embed="none", init_values=0.1, class_token=True,
                     reg_tokens=1, global_pool="token"),
}  # fmt: skip
OURS = {"axial_ij": "eva02", "axial_xy": "axial", "dinov3": "dinov3", "mixed_ij": "mixed"}


@pytest.mark.parametrize("case", list(CASES))
def test_matches_timm_on_a_mixed_batch(case):
    cfg = NaFlexVitCfg(**TINY, **CASES[case])
    reference = perturb(torch, NaFlexVit(cfg, num_classes=3).eval())
    state = {k: v.detach().numpy().copy() for k, v in reference.state_dict().items()}
    with torch.no_grad():
        expected = reference({k: torch.from_numpy(v) for k, v in BATCH.items()}).numpy()
    model = from_timm_naflexvit(cfg, state)
    assert model.config.rotary_embedding == OURS[case] and not BATCH["patch_valid"].all()
    assert_close(to_numpy(model.predict_on_batch(BATCH)), expected, RTOL)


def test_configs_without_rope_and_refusals():
    """Every field is read or refused: a plain NaFlexVitCfg, and the ones keras_vit lacks."""
    config = naflexvit_config(NaFlexVitCfg(**TINY, global_pool="avg", act_layer="gelu_tanh"))
    assert (config.rotary_embedding, config.pooling, config.fc_norm, config.final_norm,
            config.approximate_gelu, config.image_size) == (None, "gap", True, False, True,
                                                            (16, 16))  # fmt: skip
    with pytest.raises(ValueError, match="swiglu_mlp=True, rope_type='mrope'"):
        naflexvit_config(NaFlexVitCfg(**TINY, swiglu_mlp=True, rope_type="mrope"))
    with pytest.raises(ValueError, match="needs timm's NaFlexVitCfg"):
        naflexvit_config("naflexvit_base_patch16_gap")


def test_feature_extractor_matches_forward_intermediates():
    """NaFlex `feature_extractor` (tokens + validity) against timm's NLC intermediates."""
    from keras_vit import feature_extractor

    cfg = NaFlexVitCfg(**{**TINY, "depth": 2}, **CASES["mixed_ij"])
    reference = perturb(torch, NaFlexVit(cfg, num_classes=3).eval())
    state = {k: v.detach().numpy().copy() for k, v in reference.state_dict().items()}
    inputs = {k: torch.from_numpy(v) for k, v in BATCH.items()}
    with torch.no_grad():
        expected = reference.forward_intermediates(
            inputs, indices=[0, -1], output_fmt="NLC", intermediates_only=True,
            return_prefix_tokens=True, output_dict=True,
        )  # fmt: skip
    features = feature_extractor(from_timm_naflexvit(cfg, state), [0, -1], output="tokens")
    got = features.predict_on_batch(BATCH)
    valid = BATCH["patch_valid"]
    np.testing.assert_array_equal(to_numpy(got["patch_valid"]), valid)
    prefix = reference.num_prefix_tokens
    patches, heads = expected["image_intermediates"], expected["image_intermediates_prefix"]
    for ours, patch, head in zip(got["tokens"], patches, heads, strict=True):
        ours = to_numpy(ours)
        assert_close(ours[:, :prefix], head.numpy(), RTOL)
        assert_close(ours[:, prefix:][valid], patch.numpy()[valid], RTOL)
    with pytest.raises(ValueError, match="Use output='tokens'"):
        feature_extractor(from_timm_naflexvit(cfg), 1)
