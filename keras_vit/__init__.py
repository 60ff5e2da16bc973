"""keras_vit: Vision Transformers (Dosovitskiy et al., ICLR 2021) for Keras 3 on TensorFlow, JAX and PyTorch."""

from keras_vit import inspect, layers, mpp, training
from keras_vit.checkpoints import load_npz, save_npz
from keras_vit.export import ExportResult, export_onnx, export_saved_model
from keras_vit.imagenet import decode_predictions, imagenet_classes
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
from keras_vit.presets import Preset, get_weights_file, list_weights, register_preset
from keras_vit.version import __version__
