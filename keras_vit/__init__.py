"""keras_vit: Vision Transformers (Dosovitskiy et al., ICLR 2021) for Keras 3 on TensorFlow, JAX
and PyTorch."""

from keras_vit import inspect, layers, mpp, training
from keras_vit.export import ExportResult, export_onnx, export_saved_model
from keras_vit.layers import (
    DropPath,
    PatchEncoder,
    Patches,
    StdConv2D,
    TokenPooling,
    TransformerBlock,
)
from keras_vit.models import (
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
    parse_variant,
)
from keras_vit.preprocessing import preprocess_input
from keras_vit.saving import load_model
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
from keras_vit.weights.huggingface import from_huggingface
from keras_vit.weights.timm import from_timm

__all__ = [
    "DropPath",
    "ExportResult",
    "PatchEncoder",
    "Patches",
    "Preset",
    "StdConv2D",
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
    "export_onnx",
    "export_saved_model",
    "from_huggingface",
    "from_timm",
    "get_weights_file",
    "imagenet_classes",
    "inspect",
    "layers",
    "list_weights",
    "load_model",
    "load_npz",
    "mpp",
    "parse_variant",
    "preprocess_input",
    "register_preset",
    "save_npz",
    "training",
]
