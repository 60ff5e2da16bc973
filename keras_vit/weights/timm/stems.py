"""timm's ResNet-D and MobileCLIP conv stems: their weight names -> our stem layers.

`stem_name_table(config)` maps the `patch_embed.backbone.*` keys of timm's `vit_*_resnet26d_*`,
`vit_*_resnet50d_*` (a `features_only` `resnet26d` / `resnet50d`: `conv1.{0,3,6}`, `bn1`,
`layer{s}.{b}.*`) and `vit_base_mci_224` (`ConvStem`: `{i}.conv`, `{i}.bn`) to the layers of
`keras_vit.layers.resnet_d` / `keras_vit.layers.conv_stem`; BatchNorm's running statistics
become the Keras layers' `moving_mean` / `moving_variance`. `batch_norm_counters(config)` lists
the BatchNorms' `num_batches_tracked` keys, which have no Keras counterpart (inference never
reads them): the loader leaves them out with a note. The BiT stem's table is in
`keras_vit.weights.timm.reader`.
"""

from keras_vit.weights import loading as L

BACKBONE = "patch_embed.backbone"


def _batch_norm(key, path):
    return {
        f"{key}.weight": (f"{path}/gamma", L.IDENTITY),
        f"{key}.bias": (f"{path}/beta", L.IDENTITY),
        f"{key}.running_mean": (f"{path}/moving_mean", L.IDENTITY),
        f"{key}.running_var": (f"{path}/moving_variance", L.IDENTITY),
    }


def _conv_norm(conv, norm, layer):
    """A bias-free timm conv `conv` and BatchNorm `norm` -> our `{layer}_conv*`-style pair."""
    return {f"{conv}.weight": (f"{layer[0]}/kernel", L.CONV), **_batch_norm(norm, layer[1])}


def _resnet_d(config):
    b = BACKBONE
    table = {}
    for i, (conv, norm) in enumerate(((0, 1), (3, 4), (6, None)), start=1):
        norm_key = f"{b}.bn1" if norm is None else f"{b}.conv1.{norm}"
        table.update(_conv_norm(f"{b}.conv1.{conv}", norm_key, (f"stem_conv{i}", f"stem_bn{i}")))
    for s, units in enumerate(config.resnet_units, start=1):
        for u in range(units):
            key, unit = f"{b}.layer{s}.{u}", f"layer{s}_{u}"
            for n in (1, 2, 3):
                layers = (f"{unit}_conv{n}", f"{unit}_bn{n}")
                table.update(_conv_norm(f"{key}.conv{n}", f"{key}.bn{n}", layers))
            if u == 0:
                table.update(
                    _conv_norm(
                        f"{key}.downsample.1",
                        f"{key}.downsample.2",
                        (f"{unit}_down_conv", f"{unit}_down_bn"),
                    )
                )
    return table


def _conv(config):
    table = {}
    for i in range(len(config.stem_widths)):
        key, layers = f"{BACKBONE}.{i}", (f"stem_conv{i + 1}", f"stem_bn{i + 1}")
        table.update(_conv_norm(f"{key}.conv", f"{key}.bn", layers))
    return table


def stem_name_table(config):
    """timm's keys of the ResNet-D or conv stem of `config` -> `(path, transform)`.

    Args:
        config: a `keras_vit.models.config.ViTConfig` with `stem="resnet_d"` or `"conv"`.

    Returns:
        dict, in timm's order, for `keras_vit.weights.loading.load_state_dict`.

    Example:

    >>> from keras_vit.models.config import ViTConfig
    >>> config = ViTConfig.from_variant("mu/1", image_size=32, resnet_units=(1,),
    ...                                 resnet_width=8, stem="resnet_d")
    >>> stem_name_table(config)["patch_embed.backbone.bn1.running_var"][0]
    'stem_bn3/moving_variance'
    """
    if config.stem == "resnet_d":
        return _resnet_d(config)
    if config.stem == "conv":
        return _conv(config)
    raise ValueError(
        f"stem_name_table reads stem='resnet_d' or 'conv'. Received: stem={config.stem!r}"
    )


def conv_stem_projection(config):
    """timm's key prefix of the conv stem's last convolution: our patch projection."""
    return f"{BACKBONE}.{len(config.stem_widths)}.conv"


def batch_norm_counters(config):
    """The `num_batches_tracked` keys of the stem's BatchNorms (no Keras counterpart)."""
    suffix = ".running_mean"
    return [
        key[: -len(suffix)] + ".num_batches_tracked"
        for key in stem_name_table(config)
        if key.endswith(suffix)
    ]
