"""Hybrid Vision Transformers: a BiT ResNetV2 stem (or any Keras CNN) feeding the plain ViT.

The paper's Hybrid Architecture (Sec. 3.1): the patch embedding is applied to
patches of a CNN feature map instead of raw pixels. The stem here is the
ResNet of the official models (`vit_jax/models_resnet.py`): weight-standardised
convolutions without biases, GroupNorm (32 groups, epsilon 1e-6), bottleneck
units with a projection on the first unit of every stage. Its feature map goes
into the same `PatchEncoder` (patch size 1 for the official R50/R26 models)
and the same encoder and heads as `keras_vit.ViT`, via `build_vit`: there is
one transformer implementation in the package.

Layer names follow the official checkpoint one to one: `conv_root`, `gn_root`,
`block{s}_unit{u}_conv{1,2,3}`, `block{s}_unit{u}_gn{1,2,3}`,
`block{s}_unit1_conv_proj`, `block{s}_unit1_gn_proj` (official
`block{s}/unit{u}/conv1/kernel` etc.), then `patch_encoder`, `encoderblock_{i}`,
`encoder_norm`, `pre_logits`, `head`.
"""

import keras
from keras import ops

from keras_vit.layers._checks import check_positive_int, check_positive_int_pair
from keras_vit.models import variants
from keras_vit.models.vit import ViT, _check_config, _named, build_vit, load_weights

GROUP_NORM_EPSILON = 1e-6
STD_CONV_EPSILON = 1e-5
HYBRID_KWARGS = ("resnet_units", "resnet_width", "resnet_groups", "backbone")


@keras.saving.register_keras_serializable(package="keras_vit")
class StdConv2D(keras.layers.Conv2D):
    """2D convolution with weight standardisation (BiT / the official hybrid ViT).

    The stored raw kernel `w` (shape `(kh, kw, C_in, C_out)`, the official
    layout) is standardised at every call, per output channel over
    `(kh, kw, C_in)`:

        w_hat = (w - mean(w)) / (std(w) + epsilon)

    with the population standard deviation, exactly as `weight_standardize` in
    the official `vit_jax/models_resnet.py` (`epsilon=1e-5` added to the
    standard deviation, not to the variance). The standardisation is computed
    in float32 and cast to the compute dtype, so mixed precision keeps it
    accurate. Official checkpoints store the raw kernel, which loads as is.

    Args:
        filters: int. Output channels.
        kernel_size: int or (height, width).
        strides: int or (height, width). Defaults to 1.
        padding: `"same"` (the official models) or `"valid"`. Defaults to `"same"`.
        data_format, dilation_rate, groups, activation, kernel_initializer,
            bias_initializer, kernel_regularizer, bias_regularizer,
            activity_regularizer, kernel_constraint, bias_constraint: as in
            `keras.layers.Conv2D`.
        use_bias: bool. Defaults to False (the official stem has no conv biases).
        kernel_initializer: Defaults to `"lecun_normal"` (Flax's default).
        epsilon: float. Added to the standard deviation. Defaults to 1e-5.

    Call arguments:
        inputs: `(B, H, W, C_in)` (channels_last).

    Returns:
        `(B, H', W', filters)`.

    Example:

    >>> import numpy as np
    >>> tuple(StdConv2D(8, 3, strides=2)(np.ones((1, 16, 16, 3), "float32")).shape)
    (1, 8, 8, 8)

    Reference:
        Qiao et al., 2019, "Weight Standardization"; Kolesnikov et al., 2020,
        "Big Transfer (BiT)", Sec. 4.3; Dosovitskiy et al., 2021, Sec. 3.1.
    """

    def __init__(
        self,
        filters,
        kernel_size,
        strides=(1, 1),
        padding="same",
        data_format=None,
        dilation_rate=(1, 1),
        groups=1,
        activation=None,
        use_bias=False,
        kernel_initializer="lecun_normal",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        epsilon=STD_CONV_EPSILON,
        **kwargs,
    ):
        super().__init__(
            filters=filters,
            kernel_size=kernel_size,
            strides=strides,
            padding=padding,
            data_format=data_format,
            dilation_rate=dilation_rate,
            groups=groups,
            activation=activation,
            use_bias=use_bias,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
            **kwargs,
        )
        if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or epsilon <= 0:
            raise ValueError(f"epsilon must be a positive number. Received: epsilon={epsilon!r}")
        self.epsilon = float(epsilon)

    def standardize(self, kernel):
        """Returns `kernel` standardised per output channel, computed in float32."""
        w = ops.cast(kernel, "float32")
        w = w - ops.mean(w, axis=(0, 1, 2), keepdims=True)
        std = ops.sqrt(ops.mean(ops.square(w), axis=(0, 1, 2), keepdims=True))
        return w / (std + self.epsilon)

    def standardized_kernel(self):
        """The kernel this layer actually convolves with (float32 tensor)."""
        return self.standardize(self.kernel)

    def convolution_op(self, inputs, kernel):
        kernel = ops.cast(self.standardize(kernel), self.compute_dtype)
        return super().convolution_op(inputs, kernel)

    def get_config(self):
        config = super().get_config()
        config["epsilon"] = self.epsilon
        return config


def _group_norm(groups, name, gamma_initializer="ones"):
    return keras.layers.GroupNormalization(
        groups=groups,
        epsilon=GROUP_NORM_EPSILON,
        gamma_initializer=gamma_initializer,
        name=name,
    )


def residual_unit(x, filters, strides, name, groups=32):
    """One BiT bottleneck unit on the functional tensor `x` (layers named `{name}_...`).

    conv1 1x1 -> GN -> ReLU -> conv2 3x3 (`strides`) -> GN -> ReLU -> conv3 1x1
    -> GN (scale initialised to zeros, as the official model); the residual is
    projected (1x1 conv with `strides` + GN) when the channels or the stride
    change; output `ReLU(residual + y)` with `4 * filters` channels.

    Args:
        x: functional `(B, H, W, C)` tensor.
        filters: int. Bottleneck width; the unit outputs `4 * filters` channels.
        strides: int. Stride of conv2 and of the projection.
        name: str. Layer-name prefix, e.g. `"block1_unit1"`.
        groups: int. GroupNorm groups; must divide `filters`. Defaults to 32.

    Returns:
        The functional output tensor.
    """
    residual = x
    if x.shape[-1] != 4 * filters or strides != 1:
        residual = StdConv2D(4 * filters, 1, strides=strides, name=f"{name}_conv_proj")(x)
        residual = _group_norm(groups, f"{name}_gn_proj")(residual)
    y = StdConv2D(filters, 1, name=f"{name}_conv1")(x)
    y = _group_norm(groups, f"{name}_gn1")(y)
    y = keras.layers.ReLU(name=f"{name}_relu1")(y)
    y = StdConv2D(filters, 3, strides=strides, name=f"{name}_conv2")(y)
    y = _group_norm(groups, f"{name}_gn2")(y)
    y = keras.layers.ReLU(name=f"{name}_relu2")(y)
    y = StdConv2D(4 * filters, 1, name=f"{name}_conv3")(y)
    y = _group_norm(groups, f"{name}_gn3", gamma_initializer="zeros")(y)
    y = keras.layers.Add(name=f"{name}_add")([residual, y])
    return keras.layers.ReLU(name=f"{name}_out")(y)


def resnet_stem(x, resnet_units, resnet_width=64, resnet_groups=32):
    """The official hybrid's BiT ResNetV2 stem on the functional tensor `x`.

    Root: 7x7/2 `StdConv2D` (SAME) -> GN -> ReLU -> 3x3/2 max-pool (SAME); then
    one stage per entry of `resnet_units`, stage `s` (1-based) with bottleneck
    width `resnet_width * 2**(s-1)` and stride 1 for the first stage, 2 after.
    Total stride: `keras_vit.models.variants.resnet_stride(resnet_units)`.

    Args:
        x: functional `(B, H, W, C)` tensor.
        resnet_units: sequence of int. Units per stage, e.g. `(3, 4, 9)`;
            empty for the root only.
        resnet_width: int. Root width (64 in the official models, i.e. width
            factor 1). Defaults to 64.
        resnet_groups: int. GroupNorm groups; must divide `resnet_width`.
            Defaults to 32.

    Returns:
        The `(B, H / stride, W / stride, C')` feature map, `C' = 4 * resnet_width
        * 2**(len(resnet_units) - 1)` (or `resnet_width` for the root only).
    """
    x = StdConv2D(resnet_width, 7, strides=2, name="conv_root")(x)
    x = _group_norm(resnet_groups, "gn_root")(x)
    x = keras.layers.ReLU(name="root_relu")(x)
    x = keras.layers.MaxPooling2D(3, strides=2, padding="same", name="root_pool")(x)
    for s, units in enumerate(resnet_units, start=1):
        filters = resnet_width * 2 ** (s - 1)
        for u in range(1, units + 1):
            strides = 2 if (s > 1 and u == 1) else 1
            x = residual_unit(x, filters, strides, f"block{s}_unit{u}", groups=resnet_groups)
    return x


def _check_units(resnet_units):
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


def _backbone_features(backbone, inputs, image_size, num_channels):
    if not isinstance(backbone, keras.layers.Layer):
        raise ValueError(
            "backbone must be a Keras model or layer mapping images to a feature map "
            "(e.g. keras.applications.ResNet50(include_top=False)). "
            f"Received: backbone={backbone!r}"
        )
    expected = (*image_size, num_channels)
    try:
        backbone_input = tuple(backbone.input_shape) if backbone.built else None
    except (AttributeError, ValueError):
        backbone_input = None
    if backbone_input is not None and len(backbone_input) == 4:
        for got, need in zip(backbone_input[1:], expected):
            if got is not None and got != need:
                raise ValueError(
                    "The backbone's input shape does not match image_size and num_channels. "
                    f"Expected (None, {expected[0]}, {expected[1]}, {expected[2]}). "
                    f"Received: backbone input shape={backbone_input}"
                )
    features = backbone(inputs)
    if isinstance(features, (list, tuple, dict)):
        raise ValueError(
            "backbone must return one rank-4 feature map (batch, height, width, channels). "
            f"Received: {type(features).__name__} of {len(features)} outputs"
        )
    shape = tuple(features.shape)
    if len(shape) != 4:
        raise ValueError(
            "backbone must return a rank-4 feature map (batch, height, width, channels); "
            "build keras.applications models with include_top=False and pooling=None. "
            f"Received: backbone output shape={shape} (rank {len(shape)})"
        )
    if any(d is None for d in shape[1:]):
        raise ValueError(
            "backbone must return a feature map with static height, width and channels. "
            f"Received: backbone output shape={shape}"
        )
    return features


def build_hybrid(
    config,
    *,
    image_size,
    num_classes,
    include_top,
    weights,
    num_channels,
    pooling,
    representation_size,
    classifier_activation,
    dropout_rate,
    attention_dropout_rate,
    drop_path_rate,
    approximate_gelu,
    layer_norm_epsilon,
    layer_scale_init_value,
    position_embedding,
    class_token,
    name,
    remat=False,
    resnet_units=None,
    resnet_width=64,
    resnet_groups=32,
    backbone=None,
    **unknown,
):
    """Builds a hybrid ViT: a CNN stem, then `build_vit` on its feature map.

    Called by `keras_vit.ViT` for hybrid codes or when a hybrid argument is
    given; `config` holds the transformer numbers (`num_layers`, `hidden_dim`,
    `mlp_dim`, `num_heads`, `patch_size` on the feature map, and for hybrid
    codes `resnet_units`) with the size overrides already applied. See
    `ViTHybrid` for the arguments.
    """
    if unknown:
        raise TypeError(
            f"ViT() got unexpected keyword arguments {sorted(unknown)}. "
            f"Hybrid arguments are {list(HYBRID_KWARGS)}."
        )
    image_size = check_positive_int_pair(image_size, "image_size")
    patch = check_positive_int_pair(config["patch_size"], "patch_size")
    check_positive_int(num_channels, "num_channels")
    if class_token is None:
        class_token = pooling != "gap"
    inputs = keras.Input((*image_size, num_channels), name="images")

    if backbone is not None:
        if resnet_units is not None:
            raise ValueError(
                "Pass either a backbone or resnet_units, not both: the backbone replaces the "
                f"ResNet stem. Received: resnet_units={resnet_units!r}, "
                f"backbone={getattr(backbone, 'name', backbone)!r}"
            )
        features = _backbone_features(backbone, inputs, image_size, num_channels)
        grid = tuple(features.shape[1:3])
        for size, p, what in ((grid[0], patch[0], "height"), (grid[1], patch[1], "width")):
            if size % p:
                raise ValueError(
                    f"The backbone's feature-map {what} must be divisible by the patch size "
                    "(use a hybrid code such as 'R50+B/16' or patch_size=1 for one token per "
                    f"feature-map cell). Received: feature map {grid}, patch_size={patch}"
                )
    else:
        if resnet_units is None:
            resnet_units = config.get("resnet_units")
        if resnet_units is None:
            raise ValueError(
                "Hybrid arguments need a hybrid variant code (e.g. 'R50+B/16'), resnet_units "
                "or a backbone. Received: a plain variant and resnet_units=None, backbone=None"
            )
        resnet_units = _check_units(resnet_units)
        check_positive_int(resnet_width, "resnet_width")
        check_positive_int(resnet_groups, "resnet_groups")
        if resnet_width % resnet_groups:
            raise ValueError(
                "resnet_groups (GroupNorm groups) must divide resnet_width (and so every "
                "stage width). Received: "
                f"resnet_width={resnet_width}, resnet_groups={resnet_groups}"
            )
        stem_stride = variants.resnet_stride(resnet_units)
        total = (stem_stride * patch[0], stem_stride * patch[1])
        if image_size[0] % total[0] or image_size[1] % total[1]:
            raise ValueError(
                "image_size must be divisible by the hybrid's total stride (ResNet stem stride "
                f"{stem_stride} x feature-map patch size {patch} = {total}). "
                f"Received: image_size={image_size}"
            )
        features = resnet_stem(inputs, resnet_units, resnet_width, resnet_groups)
        grid = tuple(features.shape[1:3])

    transformer = dict(
        num_layers=config["num_layers"],
        hidden_dim=config["hidden_dim"],
        mlp_dim=config["mlp_dim"],
        num_heads=config["num_heads"],
    )
    rates = dict(
        dropout_rate=dropout_rate,
        attention_dropout_rate=attention_dropout_rate,
        drop_path_rate=drop_path_rate,
    )
    _check_config(
        image_size=grid,
        patch_size=patch,
        num_classes=num_classes,
        include_top=include_top,
        pooling=pooling,
        class_token=class_token,
        representation_size=representation_size,
        num_channels=num_channels,
        rates=rates,
        **transformer,
    )
    model = build_vit(
        inputs,
        features,
        patch_size=patch,
        num_classes=num_classes,
        include_top=include_top,
        pooling=pooling,
        class_token=class_token,
        position_embedding=position_embedding,
        representation_size=representation_size,
        classifier_activation=classifier_activation,
        layer_norm_epsilon=layer_norm_epsilon,
        approximate_gelu=approximate_gelu,
        layer_scale_init_value=layer_scale_init_value,
        remat=remat,
        name=name,
        **rates,
        **transformer,
    )
    return load_weights(model, weights)


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


# fmt: off
@_named("R50+B/16")
def ViTR50B16(**kwargs): return ViT("R50+B/16", **kwargs)  # noqa: E704
@_named("R26+S/32")
def ViTR26S32(**kwargs): return ViT("R26+S/32", **kwargs)  # noqa: E704
@_named("R26+B/32")
def ViTR26B32(**kwargs): return ViT("R26+B/32", **kwargs)  # noqa: E704
@_named("R+Ti/16")
def ViTRTi16(**kwargs): return ViT("R+Ti/16", **kwargs)  # noqa: E704
@_named("R50+L/32")
def ViTR50L32(**kwargs): return ViT("R50+L/32", **kwargs)  # noqa: E704
# fmt: on
