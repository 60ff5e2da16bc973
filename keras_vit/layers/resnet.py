"""The BiT ResNetV2 stem of the official hybrid ViTs, built on functional tensors.

The stem is the ResNet of `vit_jax/models_resnet.py`: weight-standardised convolutions
(`StdConv2D`) without biases, GroupNorm (32 groups, epsilon 1e-6), bottleneck units with a
projection on the first unit of every stage. Layer names follow the official checkpoint one to
one: `conv_root`, `gn_root`, `block{s}_unit{u}_conv{1,2,3}`, `block{s}_unit{u}_gn{1,2,3}`,
`block{s}_unit1_conv_proj`, `block{s}_unit1_gn_proj`.

Reference:
    Kolesnikov et al., 2020, "Big Transfer (BiT)"; Dosovitskiy et al., 2021, Sec. 3.1.
"""

import functools

import keras

from keras_vit.layers.std_conv import STD_CONV_EPSILON, StdConv2D

__all__ = ["residual_unit", "resnet_stem"]

GROUP_NORM_EPSILON = 1e-6


def _group_norm(groups, name, gamma_initializer="ones", epsilon=GROUP_NORM_EPSILON, dtype=None):
    return keras.layers.GroupNormalization(
        groups=groups,
        epsilon=epsilon,
        gamma_initializer=gamma_initializer,
        name=name,
        dtype=dtype,
    )


def residual_unit(
    x,
    filters,
    strides,
    name,
    groups=32,
    *,
    conv_epsilon=STD_CONV_EPSILON,
    conv_epsilon_mode="std",
    norm_epsilon=GROUP_NORM_EPSILON,
    dtype=None,
):
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
        conv_epsilon, conv_epsilon_mode: the `StdConv2D` `epsilon` and
            `epsilon_mode`. Default to 1e-5 and `"std"` (official).
        norm_epsilon: float. GroupNorm epsilon. Defaults to 1e-6 (official).
        dtype: optional dtype policy of every layer. Defaults to None (the global policy).

    Returns:
        The functional output tensor.
    """
    conv = functools.partial(
        StdConv2D, epsilon=conv_epsilon, epsilon_mode=conv_epsilon_mode, dtype=dtype
    )
    norm = functools.partial(_group_norm, groups, epsilon=norm_epsilon, dtype=dtype)
    relu = functools.partial(keras.layers.ReLU, dtype=dtype)
    residual = x
    if x.shape[-1] != 4 * filters or strides != 1:
        residual = conv(4 * filters, 1, strides=strides, name=f"{name}_conv_proj")(x)
        residual = norm(f"{name}_gn_proj")(residual)
    y = conv(filters, 1, name=f"{name}_conv1")(x)
    y = norm(f"{name}_gn1")(y)
    y = relu(name=f"{name}_relu1")(y)
    y = conv(filters, 3, strides=strides, name=f"{name}_conv2")(y)
    y = norm(f"{name}_gn2")(y)
    y = relu(name=f"{name}_relu2")(y)
    y = conv(4 * filters, 1, name=f"{name}_conv3")(y)
    y = norm(f"{name}_gn3", gamma_initializer="zeros")(y)
    y = keras.layers.Add(name=f"{name}_add", dtype=dtype)([residual, y])
    return relu(name=f"{name}_out")(y)


def resnet_stem(
    x,
    resnet_units,
    resnet_width=64,
    resnet_groups=32,
    *,
    conv_epsilon=STD_CONV_EPSILON,
    conv_epsilon_mode="std",
    norm_epsilon=GROUP_NORM_EPSILON,
    dtype=None,
):
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
        conv_epsilon, conv_epsilon_mode, norm_epsilon: see `residual_unit`
            (timm's hybrids use 1e-8, `"variance"` and 1e-5).
        dtype: optional dtype policy of every layer. Defaults to None (the global policy).

    Returns:
        The `(B, H / stride, W / stride, C')` feature map, `C' = 4 * resnet_width
        * 2**(len(resnet_units) - 1)` (or `resnet_width` for the root only).
    """
    epsilons = dict(
        conv_epsilon=conv_epsilon,
        conv_epsilon_mode=conv_epsilon_mode,
        norm_epsilon=norm_epsilon,
        dtype=dtype,
    )
    x = StdConv2D(
        resnet_width, 7, strides=2, epsilon=conv_epsilon, epsilon_mode=conv_epsilon_mode,
        name="conv_root", dtype=dtype,
    )(x)
    x = _group_norm(resnet_groups, "gn_root", epsilon=norm_epsilon, dtype=dtype)(x)
    x = keras.layers.ReLU(name="root_relu", dtype=dtype)(x)
    x = keras.layers.MaxPooling2D(3, strides=2, padding="same", name="root_pool", dtype=dtype)(x)
    for s, units in enumerate(resnet_units, start=1):
        filters = resnet_width * 2 ** (s - 1)
        for u in range(1, units + 1):
            strides = 2 if (s > 1 and u == 1) else 1
            x = residual_unit(
                x, filters, strides, f"block{s}_unit{u}", groups=resnet_groups, **epsilons
            )
    return x
