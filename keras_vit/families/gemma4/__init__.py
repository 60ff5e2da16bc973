"""Gemma 4's vision towers (timm's gemma4_vit_*): a model of their own kind
(`Gemma4VisionTower`, images in [0, 1]), read by the family's own timm reader."""

from keras_vit.families.gemma4 import timm_names
from keras_vit.weights.registry import ModelFamily, register

FAMILY = register(
    ModelFamily(
        name="gemma4",
        description=" ".join(__doc__.split()),
        timm_specs=(*timm_names.FAMILY_SPECS,),
        timm_default_classes={**timm_names.DEFAULT_CLASSES},
        timm_headless=timm_names.HEADLESS,
        timm_reader="keras_vit.families.gemma4.timm:from_timm_gemma4",
        timm_patterns=(timm_names.PATTERN,),
    )
)
