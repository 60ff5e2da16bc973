"""keras_vit: Vision Transformers (Dosovitskiy et al., ICLR 2021) for Keras 3 on TensorFlow, JAX and PyTorch."""

from keras_vit import layers
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
from keras_vit.preprocessing import preprocess_input
from keras_vit.version import __version__
