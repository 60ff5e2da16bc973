"""Hybrid Vision Transformers: a BiT ResNetV2 stem (or any Keras CNN) feeding the plain ViT.

The paper's Hybrid Architecture (Sec. 3.1): the patch embedding is applied to
patches of a CNN feature map instead of raw pixels. The stem is the ResNet of
the official models (`keras_vit.layers.resnet`, with `keras_vit.layers.StdConv2D`);
its feature map goes into the same `PatchEncoder` (patch size 1 for the
official R50/R26 models) and the same encoder and heads as `keras_vit.ViT`
(`keras_vit.models.encoder`): there is one transformer implementation in the
package, and `ViT` itself builds hybrids from hybrid codes. This module holds
the hybrid entry points: `ViTHybrid` and the named builders.

Layer names follow the official checkpoint one to one: `conv_root`, `gn_root`,
`block{s}_unit{u}_conv{1,2,3}`, `block{s}_unit{u}_gn{1,2,3}`,
`block{s}_unit1_conv_proj`, `block{s}_unit1_gn_proj` (official
`block{s}/unit{u}/conv1/kernel` etc.), then `patch_encoder`, `encoderblock_{i}`,
`encoder_norm`, `pre_logits`, `head`.
"""

from keras_vit.layers.resnet import GROUP_NORM_EPSILON, residual_unit, resnet_stem
from keras_vit.layers.std_conv import STD_CONV_EPSILON, StdConv2D
from keras_vit.models import variants
from keras_vit.models.config import HYBRID_KWARGS, ViTConfig
from keras_vit.models.encoder import build_model
from keras_vit.models.vit import ViT, named_builder

__all__ = [
    "GROUP_NORM_EPSILON",
    "HYBRID_KWARGS",
    "STD_CONV_EPSILON",
    "StdConv2D",
    "ViTHybrid",
    "ViTR26B32",
    "ViTR26S32",
    "ViTR50B16",
    "ViTR50L32",
    "ViTRTi16",
    "build_hybrid",
    "residual_unit",
    "resnet_stem",
]


def build_hybrid(config, weights=None):
    """Builds the hybrid `config` describes (`keras_vit.models.encoder.build_model`).

    Args:
        config: a `ViTConfig` with `resnet_units` or a `backbone`.
        weights: None or a weights path (see `keras_vit.models.encoder.load_weights`).

    Returns:
        A functional `keras.Model`.
    """
    if not isinstance(config, ViTConfig) or not config.is_hybrid:
        raise ValueError(
            "build_hybrid needs a ViTConfig with resnet_units or a backbone. "
            f"Received: {config!r}"
        )
    return build_model(config, weights)


def ViTHybrid(variant="R50+B/16", **kwargs):
    """Builds a hybrid Vision Transformer (CNN stem + ViT) as a functional `keras.Model`.

    Same arguments as `keras_vit.ViT` (image size, pooling, include_top,
    representation_size, dropout rates, size overrides, ...), plus the hybrid
    arguments below. The stem's feature map goes into the same `PatchEncoder`
    and encoder as the plain ViT.

    Args:
        variant: str. A hybrid code `"R{depth}+SIZE/STRIDE"`: `"R50+B/16"`,
            `"R50+L/32"`, `"R26+S/32"`, `"R26+B/32"`, `"R+Ti/16"` (official,
            see `keras_vit.models.variants.OFFICIAL_HYBRIDS`) or e.g.
            `"R26+B/64"`; a plain code (`"mu/1"`) together with `resnet_units`
            or `backbone`. Defaults to `"R50+B/16"`.
        resnet_units: optional sequence of int. Units per ResNet stage,
            overriding the code's (e.g. `(1, 1)` for tests, `()` for the root
            only). Stage 1 has stride 1 and every later stage stride 2, after
            the root's stride 4.
        resnet_width: int. Root width of the ResNet (64 = the official width
            factor 1); stage `s` has bottleneck width `resnet_width * 2**(s-1)`
            and outputs 4x that. Defaults to 64.
        resnet_groups: int. GroupNorm groups in the ResNet (32 in the official
            models); must divide `resnet_width`. Defaults to 32.
        resnet_conv_epsilon, resnet_conv_epsilon_mode, resnet_norm_epsilon: the
            stem's numerics: `StdConv2D` `epsilon` / `epsilon_mode` and the
            GroupNorm epsilon. Default to the official 1e-5, `"std"`, 1e-6
            (timm's hybrids: 1e-8, `"variance"`, 1e-5; `keras_vit.from_timm`
            sets them).
        backbone: optional Keras model mapping `(B, H, W, C)` images to one
            rank-4 `(B, h, w, c)` feature map (a functional CNN, or a
            `keras.applications` model with `include_top=False`), used instead
            of the ResNet stem; its static output grid sets the token grid
            (with the variant's `patch_size` applied to it: use a hybrid code
            or `patch_size=1` for one token per feature-map cell).
        **kwargs: every other argument of `keras_vit.ViT`.

    Returns:
        A functional `keras.Model`; ResNet layers are named like the official
        checkpoint (`conv_root`, `gn_root`, `block1_unit1_conv1`, ...).

    Example:

    >>> model = ViTHybrid("mu/1", resnet_units=(1, 1), resnet_width=8,
    ...     resnet_groups=4, image_size=32, num_classes=10)
    >>> model.get_layer("patch_encoder").grid_size
    (4, 4)

    Reference:
        Dosovitskiy et al., 2021, Sec. 3.1 (Hybrid Architecture) and Sec. 4.1.
    """
    config = variants.parse_variant(variant)
    if "resnet_units" not in config and not any(
        kwargs.get(k) is not None for k in ("resnet_units", "backbone")
    ):
        raise ValueError(
            "ViTHybrid needs a hybrid variant code (e.g. 'R50+B/16'), resnet_units or a "
            f"backbone. Received: variant={variant!r}"
        )
    return ViT(variant, **kwargs)


ViTR50B16 = named_builder("R50+B/16", __name__)
ViTR26S32 = named_builder("R26+S/32", __name__)
ViTR26B32 = named_builder("R26+B/32", __name__)
ViTRTi16 = named_builder("R+Ti/16", __name__)
ViTR50L32 = named_builder("R50+L/32", __name__)
