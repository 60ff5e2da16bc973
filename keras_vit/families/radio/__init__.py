"""C-RADIO (plain and NaFlex), TIPSv2, InternViT-300M and timm's test ViTs."""

from keras_vit.families.radio import timm_names
from keras_vit.weights.registry import ModelFamily, register

FAMILY = register(
    ModelFamily(
        name="radio",
        description=" ".join(__doc__.split()),
        timm_specs=(*timm_names.FAMILY_SPECS,),
        timm_default_classes={**timm_names.DEFAULT_CLASSES},
    )
)
