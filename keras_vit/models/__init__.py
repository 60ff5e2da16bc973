"""keras_vit models: `VisionTransformer`, its builders, its one `ViTConfig`, the variant table."""

from keras_vit._public import public_names as _public_names
from keras_vit.models.config import ViTConfig
from keras_vit.models.encoder import VisionTransformer
from keras_vit.models.features import feature_extractor
from keras_vit.models.flexi import FlexiViT
from keras_vit.models.hybrid import ViTR26B32, ViTR26S32, ViTR50B16, ViTR50L32, ViTRTi16
from keras_vit.models.mae import MaskedAutoencoder, build_mae_model, extract_mae_encoder
from keras_vit.models.mpp import MaskedPatchPredictor, build_mpp_model, extract_encoder
from keras_vit.models.patch_resize import with_patch_size
from keras_vit.models.preprocessing_config import PreprocessingConfig
from keras_vit.models.variants import OFFICIAL_HYBRIDS, SIZES
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

__all__ = _public_names(globals())
