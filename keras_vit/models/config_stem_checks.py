"""The stem options of `ViTConfig` checked: BiT's ResNet (`resnet_units`, ...), ResNet-D and
MobileCLIP's convolutional stem (`stem`). Used by `keras_vit.models.config`."""

import math

import keras

from keras_vit.layers._checks import check_positive_int
from keras_vit.layers.resnet import GROUP_NORM_EPSILON
from keras_vit.layers.resnet_d import BATCH_NORM_EPSILON
from keras_vit.layers.std_conv import EPSILON_MODES, STD_CONV_EPSILON
from keras_vit.models import variants
from keras_vit.models.config_checks import check_divisible

_RESNET_EPSILONS = {
    "resnet_conv_epsilon": STD_CONV_EPSILON,
    "resnet_conv_epsilon_mode": "std",
    "resnet_norm_epsilon": GROUP_NORM_EPSILON,
}
_RESNET_ONLY = ("resnet_width", "resnet_groups", *_RESNET_EPSILONS)


def check_units(resnet_units):
    try:
        units = tuple(resnet_units)
    except TypeError:
        units = None
    if units is None or not all(
        isinstance(u, int) and not isinstance(u, bool) and u > 0 for u in units
    ):
        raise ValueError(
            "resnet_units must be a sequence of positive ints, one per ResNet stage "
            f"(e.g. (3, 4, 9), or () for the root only). Received: resnet_units={resnet_units!r}"
        )
    return units


def check_stem(config, normalize):
    _check_stem_kind(config)
    if config.backbone is not None:
        if config.dynamic_image_size:
            raise ValueError(
                "dynamic_image_size is not supported with a backbone stem (its feature-map "
                "grid is only known at a fixed input size); use a plain or ResNet hybrid "
                "ViT. Received: dynamic_image_size=True with a backbone"
            )
        if config.resnet_units is not None:
            raise ValueError(
                "Pass either a backbone or resnet_units, not both: the backbone replaces the "
                f"ResNet stem. Received: resnet_units={config.resnet_units!r}, "
                f"backbone={getattr(config.backbone, 'name', config.backbone)!r}"
            )
        if not isinstance(config.backbone, keras.layers.Layer):
            raise ValueError(
                "backbone must be a Keras model or layer mapping images to a feature map "
                "(e.g. keras.applications.ResNet50(include_top=False)). "
                f"Received: backbone={config.backbone!r}"
            )
        return  # the feature-map grid is known once the backbone runs (see stems.py)
    if config.stem == "conv":
        _check_conv_stem(config, normalize)
        return
    if config.resnet_units is None:
        if any(getattr(config, name) is not None for name in _RESNET_ONLY):
            raise ValueError(
                "Hybrid arguments need a hybrid variant code (e.g. 'R50+B/16'), resnet_units "
                "or a backbone. Received: a plain variant and resnet_units=None, backbone=None"
            )
        check_divisible(
            config.image_size,
            config.patch_size,
            "image {what} must be divisible by the patch size. "
            f"Received: image_size={config.image_size}, patch_size={config.patch_size}",
        )
        return
    if config.stem == "resnet_d":
        _check_resnet_d(config, normalize)
        return
    normalize("resnet_units", check_units(config.resnet_units))
    normalize("resnet_width", 64 if config.resnet_width is None else config.resnet_width)
    normalize("resnet_groups", 32 if config.resnet_groups is None else config.resnet_groups)
    for name, default in _RESNET_EPSILONS.items():
        if getattr(config, name) is None:
            normalize(name, default)
    for name in ("resnet_conv_epsilon", "resnet_norm_epsilon"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ValueError(f"{name} must be a positive number. Received: {name}={value!r}")
        normalize(name, float(value))
    if config.resnet_conv_epsilon_mode not in EPSILON_MODES:
        raise ValueError(
            f"resnet_conv_epsilon_mode must be one of {EPSILON_MODES}. "
            f"Received: resnet_conv_epsilon_mode={config.resnet_conv_epsilon_mode!r}"
        )
    check_positive_int(config.resnet_width, "resnet_width")
    check_positive_int(config.resnet_groups, "resnet_groups")
    if config.resnet_width % config.resnet_groups:
        raise ValueError(
            "resnet_groups (GroupNorm groups) must divide resnet_width (and so every "
            "stage width). Received: "
            f"resnet_width={config.resnet_width}, resnet_groups={config.resnet_groups}"
        )
    _check_stride(config, variants.resnet_stride(config.resnet_units), "ResNet")


def _check_stride(config, stem_stride, kind):
    total = (stem_stride * config.patch_size[0], stem_stride * config.patch_size[1])
    if config.image_size[0] % total[0] or config.image_size[1] % total[1]:
        raise ValueError(
            f"image_size must be divisible by the hybrid's total stride ({kind} stem stride "
            f"{stem_stride} x feature-map patch size {config.patch_size} = {total}). "
            f"Received: image_size={config.image_size}"
        )


# ResNet-D and MobileCLIP conv stems.
STEMS = ("bit", "resnet_d", "conv")
_BIT_ONLY = ("resnet_groups", "resnet_conv_epsilon", "resnet_conv_epsilon_mode")


def _check_stem_kind(config):
    if config.stem not in (None, *STEMS):
        raise ValueError(f"stem must be one of {STEMS} or None. Received: stem={config.stem!r}")
    if config.stem is not None and config.backbone is not None:
        raise ValueError(
            "Pass either a backbone or a stem kind, not both: the backbone is the stem. "
            f"Received: stem={config.stem!r} with a backbone"
        )
    if config.stem not in (None, "conv") and config.resnet_units is None:
        raise ValueError(
            f"stem={config.stem!r} needs resnet_units (its units per stage). "
            "Received: resnet_units=None"
        )
    given = [n for n in ("stem_widths", "stem_strides") if getattr(config, n) is not None]
    if given and config.stem != "conv":
        raise ValueError(
            f"{' and '.join(given)} apply to stem='conv' only. Received: stem={config.stem!r}"
        )


def _check_resnet_d(config, normalize):
    given = [n for n in _BIT_ONLY if getattr(config, n) is not None]
    if given:
        raise ValueError(
            f"{', '.join(given)} apply to the BiT stem (GroupNorm, StdConv2D) only; "
            "stem='resnet_d' has BatchNorm and plain convolutions. Received: "
            + ", ".join(f"{n}={getattr(config, n)!r}" for n in given)
        )
    normalize("resnet_units", check_units(config.resnet_units))
    if not config.resnet_units:
        raise ValueError(
            "stem='resnet_d' needs at least one stage (the feature map is a stage's output, "
            "as timm's out_indices). Received: resnet_units=()"
        )
    normalize("resnet_width", 64 if config.resnet_width is None else config.resnet_width)
    check_positive_int(config.resnet_width, "resnet_width")
    if config.resnet_width % 2:
        raise ValueError(
            "resnet_width must be even with stem='resnet_d' (its root's first convolutions "
            f"have half of it). Received: resnet_width={config.resnet_width}"
        )
    _positive_epsilon(config, normalize, "resnet_norm_epsilon", BATCH_NORM_EPSILON)
    _check_stride(config, variants.resnet_stride(config.resnet_units), "ResNet-D")


def _positive_epsilon(config, normalize, name, default):
    value = default if getattr(config, name) is None else getattr(config, name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"{name} must be a positive number. Received: {name}={value!r}")
    normalize(name, float(value))


def _check_conv_stem(config, normalize):
    if config.resnet_units is not None or any(
        getattr(config, n) is not None for n in _RESNET_ONLY
    ):
        raise ValueError(
            "stem='conv' takes stem_widths and stem_strides, not resnet_* arguments. "
            f"Received: resnet_units={config.resnet_units!r}"
        )
    pairs = []
    for name in ("stem_widths", "stem_strides"):
        value = getattr(config, name)
        try:
            value = tuple(value)
        except TypeError:
            value = ()
        if not value or not all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value
        ):
            raise ValueError(
                f"stem='conv' needs {name}: a non-empty sequence of positive ints. "
                f"Received: {name}={getattr(config, name)!r}"
            )
        normalize(name, value)
        pairs.append(value)
    if len(pairs[0]) != len(pairs[1]):
        raise ValueError(
            "stem_widths and stem_strides must have one entry per convolution. "
            f"Received: stem_widths={pairs[0]}, stem_strides={pairs[1]}"
        )
    _check_stride(config, math.prod(pairs[1]), "conv")
