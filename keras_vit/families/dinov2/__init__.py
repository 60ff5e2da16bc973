"""DINOv2 from Hugging Face (timm's DINOv2 is a core ViT family)."""

from keras_vit.weights.registry import ModelFamily, register

_READER = "keras_vit.families.dinov2.huggingface:from_huggingface_dinov2"
FAMILY = register(
    ModelFamily(
        name="dinov2",
        description=" ".join(__doc__.split()),
        huggingface_readers={
            "dinov2": _READER,
            "dinov2_with_registers": _READER,
        },
    )
)
