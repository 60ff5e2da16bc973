"""timm's `VisionTransformer` families: ViT (original, AugReg), DeiT, DeiT III, DINOv2, CLIP,
SigLIP, BEiT, relpos ViTs, register ViTs, the R50 / R26 hybrids. Their checkpoint layout is the
shared one of `keras_vit.weights.timm.table`.
"""

from keras_vit.families.vit import timm_names
from keras_vit.weights.registry import ModelFamily, register

FAMILY = register(
    ModelFamily(
        name="vit",
        description=" ".join(__doc__.split()),
        timm_specs=timm_names.FAMILY_SPECS,
        timm_default_classes=timm_names.DEFAULT_CLASSES,
        timm_headless=timm_names.HEADLESS,
        timm_unsupported=timm_names.UNSUPPORTED,
    )
)
