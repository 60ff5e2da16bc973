"""FlexiViT and NaFlex ViTs (timm's flexivit_*, naflexvit_*; SigLIP 2 NaFlex from Hugging Face)."""

from keras_vit.families.naflex import timm_names
from keras_vit.weights.registry import ModelFamily, register

_READER = "keras_vit.families.naflex.huggingface_siglip2:from_huggingface_siglip2"
FAMILY = register(
    ModelFamily(
        name="naflex",
        description=" ".join(__doc__.split()),
        timm_specs=(*timm_names.FAMILY_SPECS,),
        huggingface_readers={
            "siglip2": _READER,
            "siglip2_vision_model": _READER,
        },
    )
)
