"""What feeds the patch encoder: the images, a CNN stem (BiT, ResNet-D, conv) or a `backbone`.

The paper's Hybrid Architecture (Sec. 3.1): the patch embedding is applied to patches of a CNN
feature map instead of raw pixels. Everything after the stem is the same for plain and hybrid
models (`keras_vit.models.encoder`).
"""

from keras_vit.layers.conv_stem import conv_stem
from keras_vit.layers.resnet import resnet_stem
from keras_vit.layers.resnet_d import resnet_d_stem


def _backbone_features(backbone, inputs, config):
    expected = (*config.image_size, config.num_channels)
    try:
        backbone_input = tuple(backbone.input_shape) if backbone.built else None
    except (AttributeError, ValueError):
        backbone_input = None
    if backbone_input is not None and len(backbone_input) == 4:
        for got, need in zip(backbone_input[1:], expected, strict=True):
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
    grid, patch = shape[1:3], config.patch_size
    for size, p, what in ((grid[0], patch[0], "height"), (grid[1], patch[1], "width")):
        if size % p:
            raise ValueError(
                f"The backbone's feature-map {what} must be divisible by the patch size "
                "(use a hybrid code such as 'R50+B/16' or patch_size=1 for one token per "
                f"feature-map cell). Received: feature map {grid}, patch_size={patch}"
            )
    return features


def stem_features(inputs, config, dtype=None):
    """The tensor the patch encoder reads: `inputs` itself, a stem's feature map or a backbone's.

    Args:
        inputs: functional `(B, H, W, C)` images.
        config: a `keras_vit.models.config.ViTConfig` (validated: only the backbone's output
            is checked here, since it is known once the backbone runs).
        dtype: optional dtype policy of the stem's layers (a `backbone` keeps its own).
            Defaults to None (the global policy).

    Returns:
        A functional `(B, h, w, c)` tensor.
    """
    if config.backbone is not None:
        return _backbone_features(config.backbone, inputs, config)
    if config.stem == "conv":
        return conv_stem(inputs, config.stem_widths, config.stem_strides, dtype=dtype)
    if config.stem == "resnet_d":
        return resnet_d_stem(
            inputs,
            config.resnet_units,
            config.resnet_width,
            norm_epsilon=config.resnet_norm_epsilon,
            dtype=dtype,
        )
    if config.resnet_units is not None:
        return resnet_stem(
            inputs,
            config.resnet_units,
            config.resnet_width,
            config.resnet_groups,
            conv_epsilon=config.resnet_conv_epsilon,
            conv_epsilon_mode=config.resnet_conv_epsilon_mode,
            norm_epsilon=config.resnet_norm_epsilon,
            dtype=dtype,
        )
    return inputs
