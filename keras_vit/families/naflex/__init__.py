"""FlexiViT (`keras_vit.with_patch_size` for other patch sizes) and NaFlex ViTs (timm's
flexivit_*, naflexvit_*; SigLIP 2 NaFlex from Hugging Face) as NaFlex models: a dict input of
`patches`, `patch_coord`, `patch_valid` (`keras_vit.data.naflex_batch`)."""

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
        # Siglip2ImageProcessor, where a folder has no preprocessor_config.json
        huggingface_input_specs={
            "siglip2_vision_model": {
                "image_mean": (0.5,) * 3,
                "image_std": (0.5,) * 3,
                "resample": 2,
            },
        },
    )
)
