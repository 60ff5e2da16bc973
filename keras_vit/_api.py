"""The public names of `keras_vit`, imported on first use of any of them (`keras_vit.__getattr__`).

Add a public name here (import and `__all__`); `keras_vit/__init__.py` stays free of imports so
that `keras-vit --help` and usage errors answer without loading Keras or a backend."""

from keras_vit import inspection, layers, training
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
    ViT,
    ViTB8,
    ViTB16,
    ViTB32,
    ViTConfig,
    ViTH14,
    ViTHybrid,
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
    config_from_model,
    feature_extractor,
    parse_variant,
    with_patch_size,
)
from keras_vit.preprocessing import preprocess_input
from keras_vit.saving import load_model
from keras_vit.training.lora import (
    enable_lora,
    load_lora_weights,
    lora_config,
    merge_lora,
    save_lora_weights,
)
from keras_vit.training.quantization import quantize
from keras_vit.version import __version__
from keras_vit.weights import (
    Preset,
    decode_predictions,
    get_weights_file,
    imagenet_classes,
    list_weights,
    load_npz,
    register_preset,
    save_npz,
)
from keras_vit.weights.export_huggingface import export_huggingface
from keras_vit.weights.export_timm import export_timm
from keras_vit.weights.huggingface import from_huggingface
from keras_vit.weights.timm import from_timm

__all__ = [
    "DropPath",
    "ExportResult",
    "FlexiViT",
    "MAPHead",
    "MultiHeadSelfAttention",
    "PatchEncoder",
    "Patches",
    "Preset",
    "StdConv2D",
    "TokenGrid",
    "TokenPooling",
    "TransformerBlock",
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
    "__version__",
    "config_from_model",
    "decode_predictions",
    "enable_lora",
    "export_litert",
    "export_huggingface",
    "export_onnx",
    "export_saved_model",
    "export_timm",
    "feature_extractor",
    "from_huggingface",
    "from_timm",
    "get_weights_file",
    "imagenet_classes",
    "inspection",
    "layers",
    "list_weights",
    "load_lora_weights",
    "load_model",
    "load_npz",
    "lora_config",
    "merge_lora",
    "parse_variant",
    "preprocess_input",
    "quantize",
    "register_preset",
    "save_lora_weights",
    "save_npz",
    "training",
    "with_patch_size",
]
