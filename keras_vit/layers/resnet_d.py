"""timm's ResNet-D stem of the `vit_*_resnet26d_*` / `vit_*_resnet50d_*` hybrids (functional).

The backbone of timm's `resnet26d` / `resnet50d` (timm/models/resnet.py, `stem_type="deep"`,
`avg_down=True`) up to the stage whose feature map feeds the patch embedding:

- deep root: 3x3/2 conv (`resnet_width // 2` channels) -> BN -> ReLU -> 3x3 conv (same) -> BN
  -> ReLU -> 3x3 conv (`resnet_width` channels) -> BN -> ReLU -> 3x3/2 max-pool (padding 1);
- bottleneck units: 1x1 conv -> BN -> ReLU -> 3x3 conv (stride on the first unit of every stage
  but the first) -> BN -> ReLU -> 1x1 conv (`4 * width`) -> BN (scale initialised to zeros, as
  timm's `zero_init_last`), plus the shortcut, then ReLU; the first unit's shortcut is a 2x2/2
  average pool (ResNet-D's "avg_down"; none where the stride is 1) -> 1x1 conv -> BN.

Convolutions have no biases; every norm is a `keras.layers.BatchNormalization` with timm's
epsilon 1e-5 and momentum 0.9 (PyTorch's 0.1), so inference reads the running statistics
(`moving_mean`, `moving_variance`) and `model.fit` trains it as Keras trains any
BatchNormalization (see docs/models.md). Padding is PyTorch's (one pixel on every side for the
3x3 convolutions and the max-pool: explicit where the stride is 2, where Keras' `"same"` would
pad only after), so outputs equal timm's at every even image size.

Layer names, per timm module: `stem_conv{1,2,3}` / `stem_bn{1,2,3}` (`conv1.{0,3,6}`,
`conv1.{1,4}`, `bn1`), `layer{s}_{b}_conv{1,2,3}` / `layer{s}_{b}_bn{1,2,3}`
(`layer{s}.{b}.conv1` ...), `layer{s}_0_down_conv` / `layer{s}_0_down_bn`
(`layer{s}.0.downsample.{1,2}`).

Reference:
    He et al., 2019, "Bag of Tricks for Image Classification with Convolutional Neural
    Networks", Sec. 4.1 (ResNet-D); timm's vision_transformer_hybrid.py.
"""

import functools

import keras

__all__ = ["resnet_d_stem", "resnet_d_unit"]

BATCH_NORM_EPSILON = 1e-5  # timm's (PyTorch's) BatchNorm2d
BATCH_NORM_MOMENTUM = 0.9  # PyTorch's momentum 0.1


def batch_norm(name, epsilon=BATCH_NORM_EPSILON, gamma_initializer="ones", dtype=None):
    """A `keras.layers.BatchNormalization` as PyTorch's `BatchNorm2d` (epsilon, momentum)."""
    return keras.layers.BatchNormalization(
        epsilon=epsilon,
        momentum=BATCH_NORM_MOMENTUM,
        gamma_initializer=gamma_initializer,
        name=name,
        dtype=dtype,
    )


def _conv(x, filters, kernel_size, strides, name, dtype):
    """A bias-free convolution with PyTorch's padding `kernel_size // 2` on every side."""
    padding = "same"
    if strides > 1 and kernel_size > 1:  # Keras' "same" would pad after only
        x = keras.layers.ZeroPadding2D(kernel_size // 2, name=f"{name}_pad", dtype=dtype)(x)
        padding = "valid"
    return keras.layers.Conv2D(
        filters, kernel_size, strides=strides, padding=padding, use_bias=False, name=name,
        dtype=dtype,
    )(x)  # fmt: skip


def resnet_d_unit(x, filters, strides, name, *, norm_epsilon=BATCH_NORM_EPSILON, dtype=None):
    """One ResNet-D bottleneck unit on the functional tensor `x` (layers named `{name}_...`).

    Args:
        x: functional `(B, H, W, C)` tensor.
        filters: int. Bottleneck width; the unit outputs `4 * filters` channels.
        strides: int. Stride of the 3x3 convolution and of the shortcut's average pool.
        name: str. Layer-name prefix, e.g. `"layer1_0"`.
        norm_epsilon: float. BatchNorm epsilon. Defaults to 1e-5 (timm's).
        dtype: optional dtype policy of every layer. Defaults to None (the global policy).

    Returns:
        The functional output tensor.
    """
    norm = functools.partial(batch_norm, epsilon=norm_epsilon, dtype=dtype)
    relu = functools.partial(keras.layers.ReLU, dtype=dtype)
    shortcut = x
    if x.shape[-1] != 4 * filters or strides != 1:
        if strides != 1:  # timm: AvgPool2d(2, stride, ceil_mode=True, count_include_pad=False)
            shortcut = keras.layers.AveragePooling2D(
                2, strides=strides, padding="same", name=f"{name}_down_pool", dtype=dtype
            )(shortcut)
        shortcut = _conv(shortcut, 4 * filters, 1, 1, f"{name}_down_conv", dtype)
        shortcut = norm(f"{name}_down_bn")(shortcut)
    y = _conv(x, filters, 1, 1, f"{name}_conv1", dtype)
    y = relu(name=f"{name}_relu1")(norm(f"{name}_bn1")(y))
    y = _conv(y, filters, 3, strides, f"{name}_conv2", dtype)
    y = relu(name=f"{name}_relu2")(norm(f"{name}_bn2")(y))
    y = _conv(y, 4 * filters, 1, 1, f"{name}_conv3", dtype)
    y = norm(f"{name}_bn3", gamma_initializer="zeros")(y)
    y = keras.layers.Add(name=f"{name}_add", dtype=dtype)([shortcut, y])
    return relu(name=f"{name}_out")(y)


def resnet_d_stem(x, resnet_units, resnet_width=64, *, norm_epsilon=BATCH_NORM_EPSILON, dtype=None):
    """timm's ResNet-D (deep root, average-pool shortcuts, BatchNorm) on the functional `x`.

    Stage `s` (1-based) has bottleneck width `resnet_width * 2**(s-1)` and stride 1 for the
    first stage, 2 after; the output is the last stage's feature map (timm's
    `features_only=True, out_indices=[len(resnet_units)]`). Total stride:
    `keras_vit.models.variants.resnet_stride(resnet_units)`, as the BiT stem's.

    Args:
        x: functional `(B, H, W, C)` tensor.
        resnet_units: sequence of int. Units per stage: `(2, 2, 2, 2)` is timm's `resnet26d`,
            `(3, 4, 6, 3)` its `resnet50d` (`(3, 4, 6)`: its first three stages).
        resnet_width: int. The root's output width and the first stage's bottleneck width
            (64 in timm; the root's first two convolutions have half of it). Defaults to 64.
        norm_epsilon: float. BatchNorm epsilon. Defaults to 1e-5 (timm's).
        dtype: optional dtype policy of every layer. Defaults to None (the global policy).

    Returns:
        The `(B, H / stride, W / stride, 4 * resnet_width * 2**(len(resnet_units) - 1))`
        feature map.

    Example:

    >>> import keras
    >>> x = keras.Input((32, 32, 3))
    >>> resnet_d_stem(x, (1, 1), resnet_width=8).shape
    (None, 4, 4, 64)
    """
    norm = functools.partial(batch_norm, epsilon=norm_epsilon, dtype=dtype)
    relu = functools.partial(keras.layers.ReLU, dtype=dtype)
    widths = (resnet_width // 2, resnet_width // 2, resnet_width)
    for i, (width, strides) in enumerate(zip(widths, (2, 1, 1), strict=True), start=1):
        x = _conv(x, width, 3, strides, f"stem_conv{i}", dtype)
        x = relu(name=f"stem_relu{i}")(norm(f"stem_bn{i}")(x))
    x = keras.layers.ZeroPadding2D(1, name="stem_pool_pad", dtype=dtype)(x)  # after a ReLU: as -inf
    x = keras.layers.MaxPooling2D(3, strides=2, name="stem_pool", dtype=dtype)(x)
    for s, units in enumerate(resnet_units, start=1):
        filters = resnet_width * 2 ** (s - 1)
        for b in range(units):
            strides = 2 if (s > 1 and b == 0) else 1
            x = resnet_d_unit(
                x, filters, strides, f"layer{s}_{b}", norm_epsilon=norm_epsilon, dtype=dtype
            )
    return x
