"""AIMv2 (RMSNorm, patch norm, SwiGLU, no biases; timm and Hugging Face)."""

from keras_vit.families.aimv2 import timm_names
from keras_vit.models.preprocessing_config import CLIP_MEAN, CLIP_STD
from keras_vit.weights.registry import ModelFamily, register

_READER = "keras_vit.families.aimv2.huggingface:from_huggingface_aimv2"
FAMILY = register(
    ModelFamily(
        name="aimv2",
        description=" ".join(__doc__.split()),
        timm_specs=(*timm_names.FAMILY_SPECS,),
        timm_default_classes={**timm_names.DEFAULT_CLASSES},
        huggingface_readers={
            "aimv2": _READER,
            "aimv2_vision_model": _READER,
        },
        # CLIPImageProcessor, where a folder has no preprocessor_config.json
        huggingface_input_specs={
            "aimv2_vision_model": {"image_mean": CLIP_MEAN, "image_std": CLIP_STD, "resample": 3},
        },
    )
)
