"""The one transformer: patch encoder -> blocks -> norm -> pooling -> head, from a `ViTConfig`.

Plain and hybrid models differ only in their stem (`keras_vit.models.stems`); masked-patch
pre-training (`keras_vit.mpp`) reuses `make_patch_encoder` and `apply_blocks`.

Layer names (what checkpoint converters map): `patch_encoder`, `pre_norm` (optional),
`encoderblock_{i}`, `encoder_norm` (absent with `fc_norm`), `pooling` (`TokenPooling` or
`MAPHead`), `fc_norm` (optional), `pre_logits` (optional), `head`; a distilled model's
classifier is `head` on the class token (`pooling`) and `head_dist` on the distillation token
(`pooling_dist`), averaged by `head_average` (then `classifier_activation`, if any).
"""

import os

import keras

from keras_vit.layers import MAPHead, PatchEncoder, TokenPooling, TransformerBlock
from keras_vit.models.stems import stem_features


def make_patch_encoder(config, **kwargs):
    """The `PatchEncoder` named `patch_encoder` of `config`; `kwargs` e.g. `use_mask_embedding`."""
    return PatchEncoder(
        config.hidden_dim,
        config.patch_size,
        class_token=config.class_token,
        position_embedding=config.position_embedding,
        dropout_rate=config.dropout_rate,
        name="patch_encoder",
        **encoder_options(config),
        **kwargs,
    )


def encoder_options(config):
    """The `PatchEncoder` arguments of `config` beyond the original ViT's (defaults left out).

    Only options that differ from the layer's defaults are passed, so that models without
    them keep exactly the layer configs of earlier versions.
    """
    options = dict(
        num_register_tokens=config.num_register_tokens,
        distillation_token=config.distillation_token,
        prefix_position_embedding=config.prefix_position_embedding,
        dynamic_image_size=config.dynamic_image_size,
    )
    defaults = dict(
        num_register_tokens=0,
        distillation_token=False,
        prefix_position_embedding=True,
        dynamic_image_size=False,
    )
    options = {k: v for k, v in options.items() if v != defaults[k]}
    if config.dynamic_image_size:
        options["position_embedding_grid"] = config.grid_size
    return options


def num_prefix_tokens(config):
    """Class, distillation and register tokens before the patch tokens."""
    return int(config.class_token) + int(config.distillation_token) + config.num_register_tokens


def apply_blocks(tokens, config):
    """`pre_norm`, `encoderblock_0` ... `encoderblock_{L-1}` and `encoder_norm` on tokens.

    `pre_norm` only with `config.pre_norm`; no `encoder_norm` with `config.fc_norm` (the
    final norm then follows the pooling).
    """
    x = tokens
    if config.pre_norm:
        x = keras.layers.LayerNormalization(epsilon=config.layer_norm_epsilon, name="pre_norm")(x)
    for i in range(config.num_layers):
        # Stochastic depth grows linearly with depth (timm / DeiT convention).
        rate = config.drop_path_rate * i / max(config.num_layers - 1, 1)
        x = TransformerBlock(
            num_heads=config.num_heads,
            mlp_dim=config.mlp_dim,
            dropout_rate=config.dropout_rate,
            attention_dropout_rate=config.attention_dropout_rate,
            drop_path_rate=rate,
            layer_norm_epsilon=config.layer_norm_epsilon,
            approximate_gelu=config.approximate_gelu,
            layer_scale_init_value=config.layer_scale_init_value,
            remat=config.remat,
            **_block_options(config),
            name=f"encoderblock_{i}",
        )(x)
    if config.fc_norm:
        return x
    return keras.layers.LayerNormalization(epsilon=config.layer_norm_epsilon, name="encoder_norm")(
        x
    )


def _block_options(config):
    """`qk_norm` and `activation` when they differ from the defaults (configs stay as before)."""
    options = {}
    if config.qk_norm:
        options["qk_norm"] = True
    if config.activation != "gelu":
        options["activation"] = config.activation
    return options


def _pool(x, config):
    """The pooled `(B, D)` vector (`pooling`, then `fc_norm` if set)."""
    prefix = num_prefix_tokens(config)
    if config.pooling == "map":
        x = MAPHead(
            num_heads=config.num_heads,
            mlp_dim=config.mlp_dim,
            layer_norm_epsilon=config.layer_norm_epsilon,
            activation=config.activation,
            approximate_gelu=config.approximate_gelu,
            num_prefix_tokens=prefix,
            name="pooling",
        )(x)
    else:
        kind = "token_distillation" if config.distillation_token else config.pooling
        x = TokenPooling(kind, num_prefix_tokens=prefix, name="pooling")(x)
    if config.fc_norm:
        x = keras.layers.LayerNormalization(epsilon=config.layer_norm_epsilon, name="fc_norm")(x)
    return x


def _head_dtype():
    """float32 under a mixed-precision policy: float32 logits (and softmax), as Keras advises."""
    return "float32" if keras.config.dtype_policy().name.startswith("mixed_") else None


def _classifier(config, name="head", activation=None):
    return keras.layers.Dense(
        config.num_classes,
        activation=activation,
        kernel_initializer="zeros",
        bias_initializer="zeros",
        dtype=_head_dtype(),
        name=name,
    )


def _distilled_head(x, config):
    """DeiT: `(head(class token) + head_dist(distillation token)) / 2` (timm's eval output)."""
    prefix = num_prefix_tokens(config)
    logits = _classifier(config)(TokenPooling("token", prefix, name="pooling")(x))
    logits_dist = _classifier(config, "head_dist")(
        TokenPooling("distillation", prefix, name="pooling_dist")(x)
    )
    out = keras.layers.Average(dtype=_head_dtype(), name="head_average")([logits, logits_dist])
    if config.classifier_activation is not None:
        out = keras.layers.Activation(
            config.classifier_activation, dtype=_head_dtype(), name="classifier_activation"
        )(out)
    return out


def build_encoder(inputs, features, config):
    """Assembles the transformer part on top of `features` (images, or a stem's feature map).

    Args:
        inputs: the functional model input.
        features: functional `(B, h, w, c)` tensor the patch encoder reads.
        config: a `keras_vit.models.config.ViTConfig`.

    Returns:
        A functional `keras.Model` named `config.name`.
    """
    x = apply_blocks(make_patch_encoder(config)(features), config)
    if config.include_top and config.distillation_token:
        return keras.Model(inputs, _distilled_head(x, config), name=config.name)
    if config.pooling is not None:
        x = _pool(x, config)
    if config.include_top:
        if config.representation_size:
            x = keras.layers.Dense(
                config.representation_size, activation="tanh", name="pre_logits"
            )(x)
        x = _classifier(config, activation=config.classifier_activation)(x)
    return keras.Model(inputs, x, name=config.name)


def build_model(config, weights=None):
    """Builds the model `config` describes (plain or hybrid) and loads `weights` into it.

    Args:
        config: a `keras_vit.models.config.ViTConfig`.
        weights: None or a path, see `load_weights` (preset names are resolved by
            `keras_vit.ViT`). Defaults to None.

    Returns:
        A functional `keras.Model` taking `(B, H, W, C)` images.

    Example:

    >>> from keras_vit.models.config import ViTConfig
    >>> build_model(ViTConfig.from_variant("mu/8", image_size=32, num_classes=10)).output_shape
    (None, 10)
    """
    size = (None, None) if config.dynamic_image_size else config.image_size
    inputs = keras.Input((*size, config.num_channels), name="images")
    model = build_encoder(inputs, stem_features(inputs, config), config)
    return load_weights(model, weights)


def load_weights(model, weights):
    """Loads `weights` (None, an official `.npz` or a `.weights.h5` path) into `model`.

    Preset names (`"imagenet21k"`, ...) are resolved to a file by `ViT` (see
    `keras_vit.presets`) before the model is built; this function takes the path.

    `.npz` files go through `keras_vit.checkpoints.load_npz` (strict, position
    embedding resampled to the model's grid, head kept when the class count
    differs, `pre_logits` dropped unless the model has `representation_size`).
    """
    if weights is None:
        return model
    expected = (
        "None, a preset name (see keras_vit.list_weights) or a path to an official .npz "
        "checkpoint or a .weights.h5 file"
    )
    if not isinstance(weights, (str, os.PathLike)):
        raise ValueError(f"weights must be {expected}. Received: weights={weights!r}")
    path = os.fspath(weights)
    if not path.endswith((".npz", ".weights.h5")):
        raise ValueError(f"weights must be {expected}. Received: weights={path!r}")
    if not os.path.exists(path):
        raise FileNotFoundError(f"Weights file not found: {path!r}")
    if path.endswith(".npz"):
        from keras_vit.weights.npz import load_npz

        return load_npz(model, path)
    model.load_weights(path)
    return model
