"""VLM vision towers: Qwen3-VL and DeepSeek-V4 (with their projectors)."""

from keras_vit.families.vlm import timm_names
from keras_vit.weights.registry import ModelFamily, register

FAMILY = register(
    ModelFamily(
        name="vlm",
        timm_layout="keras_vit.families.vlm.timm_table:TIMM_LAYOUT",
        description=" ".join(__doc__.split()),
        timm_specs=(*timm_names.FAMILY_SPECS,),
        timm_default_classes={**timm_names.DEFAULT_CLASSES},
    )
)
