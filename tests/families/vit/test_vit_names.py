"""keras_vit/families/vit: timm's `VisionTransformer` names, registered first; their defaults."""

import pytest

from keras_vit.families.vit import timm_names as V
from keras_vit.weights import registry as R
from keras_vit.weights.timm import names as N
from tests.helpers import backend_independent

pytestmark = backend_independent


def test_vit_family_is_registered_first_and_matched_first():
    assert R.registered()[0].name == "vit"
    core = [spec[0] for spec in V.FAMILY_SPECS]
    assert [family.name for family in N.FAMILIES[: len(core)]] == core


@pytest.mark.parametrize(
    "name, family, variant, classes",
    [
        ("vit_base_patch16_224.augreg2_in21k_ft_in1k", "vit", "B/16", 1000),
        ("vit_small_patch14_dinov2.lvd142m", "dinov2", "S/14", 0),  # headless by default
        ("vit_so400m_patch14_siglip_384.webli", "siglip", "So400m/14", 0),
        ("vit_base_patch16_224_miil.in21k", "vit_miil", "B/16", 11221),  # DEFAULT_CLASSES
        ("vit_base_r50_s16_384.orig_in21k_ft_in1k", "hybrid", "R50+B/16", 1000),
        ("vit_medium_patch16_clip_224.tinyclip_yfcc15m", "clip", "M/16", 512),
    ],
)
def test_names_parse_with_the_family_defaults(name, family, variant, classes):
    spec = N.parse_timm_name(name)
    assert (spec.family.name, spec.arguments["variant"], spec.num_classes) == (
        family,
        variant,
        classes,
    )


def test_headless_families_and_refusals_come_from_the_registry():
    assert set(V.HEADLESS) <= N._table("HEADLESS")
    assert "dinov3" in N._table("HEADLESS")  # registered by the eva family
    for pattern, _ in V.UNSUPPORTED:
        assert (pattern, _) in N.UNSUPPORTED
    with pytest.raises(ValueError, match="samvit_base_patch16.*not supported by keras_vit"):
        N.parse_timm_name("samvit_base_patch16")
