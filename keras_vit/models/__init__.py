"""keras_vit models: the builders, their one `ViTConfig`, and the variant table."""

from keras_vit.models.config import ViTConfig, config_from_model
from keras_vit.models.features import feature_extractor
from keras_vit.models.flexi import FlexiViT
from keras_vit.models.hybrid import (
    StdConv2D,
    ViTHybrid,
    ViTR26B32,
    ViTR26S32,
    ViTR50B16,
    ViTR50L32,
    ViTRTi16,
)
from keras_vit.models.mpp import MaskedPatchPredictor, build_mpp_model, extract_encoder
from keras_vit.models.patch_resize import with_patch_size
from keras_vit.models.variants import OFFICIAL_HYBRIDS, SIZES, parse_variant
from keras_vit.models.vit import (
    ViT,
    ViTB8,
    ViTB16,
    ViTB32,
    ViTH14,
    ViTL16,
    ViTL32,
    ViTS16,
    ViTS32,
    ViTTi16,
)

__all__ = [
    "FlexiViT",
    "MaskedPatchPredictor",
    "OFFICIAL_HYBRIDS",
    "SIZES",
    "StdConv2D",
    "ViT",
    "ViTB8",
    "ViTB16",
    "ViTB32",
    "ViTConfig",
    "ViTH14",
    "ViTHybrid",
    "ViTL16",
    "ViTL32",
    "ViTR26B32",
    "ViTR26S32",
    "ViTR50B16",
    "ViTR50L32",
    "ViTRTi16",
    "ViTS16",
    "ViTS32",
    "ViTTi16",
    "build_mpp_model",
    "config_from_model",
    "extract_encoder",
    "feature_extractor",
    "parse_variant",
    "with_patch_size",
]
