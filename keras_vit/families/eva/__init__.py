"""timm's eva.py: EVA-02, EVA, rotary register ViTs, DINOv3 (also from Hugging Face), LingBot,
Sapiens2.
"""

from keras_vit.families.eva import timm_dinov3_names, timm_names
from keras_vit.models.preprocessing_config import IMAGENET_MEAN, IMAGENET_STD
from keras_vit.weights.registry import ModelFamily, register

_READER = "keras_vit.families.eva.huggingface_dinov3:from_huggingface_dinov3"
FAMILY = register(
    ModelFamily(
        name="eva",
        timm_layout="keras_vit.families.eva.timm_table:TIMM_LAYOUT",
        description=" ".join(__doc__.split()),
        timm_specs=(
            *timm_names.FAMILY_SPECS,
            *timm_dinov3_names.FAMILY_SPECS,
        ),
        timm_default_classes={
            **timm_names.DEFAULT_CLASSES,
            **timm_dinov3_names.DEFAULT_CLASSES,
        },
        timm_headless=("dinov3",),
        timm_unsupported=(*timm_names.UNSUPPORTED,),
        huggingface_readers={
            "dinov3_vit": _READER,
        },
        # DINOv3ViTImageProcessorFast, where a folder has no preprocessor_config.json
        huggingface_input_specs={
            "dinov3_vit": {"image_mean": IMAGENET_MEAN, "image_std": IMAGENET_STD, "resample": 2},
        },
    )
)
