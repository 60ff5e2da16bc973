"""The public names of `keras_vit`, imported on first use of any of them (`keras_vit.__getattr__`).

Add a public name here (an import: `__all__` is derived from them, `keras_vit._public`);
`keras_vit/__init__.py` stays free of imports so that `keras-vit --help` and usage errors answer
without loading Keras or a backend."""

from keras_vit import inspection, layers, training
from keras_vit._public import public_names as _public_names
from keras_vit.export import ExportResult, export_litert, export_onnx, export_saved_model
from keras_vit.layers import (
    DropPath,
    MAPHead,
    MultiHeadSelfAttention,
    PatchEncoder,
    Patches,
    StdConv2D,
    TokenGrid,
    TokenPooling,
    TransformerBlock,
)
from keras_vit.models import (
    FlexiViT,
    VisionTransformer,
    ViT,
    ViTB8,
    ViTB16,
    ViTB32,
    ViTConfig,
    ViTH14,
    ViTL16,
    ViTL32,
    ViTR26B32,
    ViTR26S32,
    ViTR50B16,
    ViTR50L32,
    ViTRTi16,
    ViTS16,
    ViTS32,
    ViTTi16,
    feature_extractor,
    with_patch_size,
)
from keras_vit.preprocessing import preprocess_input
from keras_vit.saving import load_model
from keras_vit.training.lora import enable_lora, get_lora_settings, merge_lora
from keras_vit.training.lora_files import load_lora_weights, save_lora_weights
from keras_vit.training.qat import quantization_aware
from keras_vit.training.quantization import quantize
from keras_vit.version import __version__
from keras_vit.weights import (
    Preset,
    decode_predictions,
    get_preset_file,
    imagenet_classes,
    list_presets,
    load_npz,
    register_preset,
    save_npz,
)
from keras_vit.weights.huggingface.export import export_huggingface
from keras_vit.weights.huggingface.reader import from_huggingface
from keras_vit.weights.timm.export import export_timm
from keras_vit.weights.timm.naflex_config import from_timm_naflexvit
from keras_vit.weights.timm.reader import from_timm

# Everything imported above is the public API (modules aside): `__all__` is derived from it.
__all__ = _public_names(globals())
