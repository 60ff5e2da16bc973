"""keras_vit: Vision Transformers (Dosovitskiy et al., ICLR 2021) for Keras 3 on TensorFlow, JAX and PyTorch."""

from keras_vit import inspect, layers, mpp, training
from keras_vit.export import ExportResult, export_onnx, export_saved_model
from keras_vit.layers import DropPath, PatchEncoder, Patches, TokenPooling, TransformerBlock
from keras_vit.models import (
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
    parse_variant,
)
from keras_vit.models.hybrid import (
    StdConv2D,
    ViTHybrid,
    ViTR26B32,
    ViTR26S32,
    ViTR50B16,
    ViTR50L32,
    ViTRTi16,
)
from keras_vit.preprocessing import preprocess_input
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
