"""DINOv2 from Hugging Face (timm's DINOv2 is a core ViT family)."""

from keras_vit.models.preprocessing_config import IMAGENET_MEAN, IMAGENET_STD
from keras_vit.weights.registry import ModelFamily, register

_PROCESSOR = {"image_mean": IMAGENET_MEAN, "image_std": IMAGENET_STD, "resample": 3}
_READER = "keras_vit.families.dinov2.huggingface:from_huggingface_dinov2"
FAMILY = register(
    ModelFamily(
        name="dinov2",
        description=" ".join(__doc__.split()),
        huggingface_readers={
            "dinov2": _READER,
            "dinov2_with_registers": _READER,
        },
        # BitImageProcessor (DINOv2's config), where a folder has no preprocessor_config.json
        huggingface_input_specs={
            "dinov2": _PROCESSOR,
            "dinov2_with_registers": _PROCESSOR,
        },
    )
)
