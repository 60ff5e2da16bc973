"""BEiT, BEiT v2 (Hugging Face) and BEiT-3 (timm)."""

from keras_vit.families.beit import timm_beit3_names
from keras_vit.weights.registry import ModelFamily, register

_READER = "keras_vit.families.beit.huggingface:from_huggingface_beit"
FAMILY = register(
    ModelFamily(
        name="beit",
        timm_layout="keras_vit.families.beit.timm_table:TIMM_LAYOUT",
        description=" ".join(__doc__.split()),
        timm_specs=(*timm_beit3_names.FAMILY_SPECS,),
        huggingface_readers={
            "beit": _READER,
        },
        # BeitImageProcessor, where a folder has no preprocessor_config.json
        huggingface_input_specs={
            "beit": {"image_mean": (0.5,) * 3, "image_std": (0.5,) * 3, "resample": 3},
        },
    )
)
