"""keras_vit/families/vit: timm's `VisionTransformer` names and their defaults."""

import pytest

from keras_vit.families.vit import timm_names as V
from keras_vit.weights import registry as R
from keras_vit.weights.timm import names as N
from tests.helpers import backend_independent

pytestmark = backend_independent


def test_vit_family_s_patterns_are_its_rows_in_the_joined_table():
    """The registry holds the vit family's rows in its order; no other family's pattern
    matches a name of the family (the registry refuses that), so the order decides nothing."""
    core = [spec[0] for spec in V.FAMILY_SPECS]
    joined = [family.name for family in N.FAMILIES]
    start = joined.index(core[0])
    assert joined[start : start + len(core)] == core
    assert R.family("vit").timm_specs == V.FAMILY_SPECS


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
    with pytest.raises(ValueError, match="'vit_tiny_patch16_244'.*Did you mean"):
        N.parse_timm_name("vit_tiny_patch16_244")  # not one of timm's names


def test_a_name_of_timm_s_table_no_family_reads_is_refused_as_such(monkeypatch):
    """A name of keras_vit's table of timm's names (timm's ViT modules) that no registered
    family reads is refused saying so, before anything is downloaded."""
    import keras_vit
    from keras_vit.weights.timm import pretrained

    known = pretrained.known_architectures() | {"vit_unread_patch16_224"}
    monkeypatch.setattr(N, "known_architectures", lambda: known)
    message = "'vit_unread_patch16_224' is one of the timm architectures.*no registered model"
    with pytest.raises(ValueError, match=message):
        N.parse_timm_name("vit_unread_patch16_224")
    with pytest.raises(ValueError, match=message):  # refused before the Hub is asked
        keras_vit.from_timm("vit_unread_patch16_224.tag", pretrained=True)
