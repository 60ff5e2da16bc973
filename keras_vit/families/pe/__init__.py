"""Perception Encoder towers (vit_pe_*)."""

from keras_vit.families.pe import timm_names
from keras_vit.weights.registry import ModelFamily, register

FAMILY = register(
    ModelFamily(
        name="pe",
        description=" ".join(__doc__.split()),
        timm_specs=(*timm_names.FAMILY_SPECS,),
        timm_default_classes={**timm_names.DEFAULT_CLASSES},
    )
)
