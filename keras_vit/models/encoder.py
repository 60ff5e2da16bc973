"""The one transformer: patch encoder -> blocks -> norm -> pooling -> head, from a `ViTConfig`.

Plain and hybrid models differ only in their stem (`keras_vit.models.stems`); masked-patch
pre-training (`keras_vit.mpp`) reuses `make_patch_encoder` and `apply_blocks`.
"""

import os

import keras

from keras_vit.layers import PatchEncoder, TokenPooling, TransformerBlock
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
        **kwargs,
    )


def apply_blocks(tokens, config):
    """`encoderblock_0` ... `encoderblock_{L-1}` and `encoder_norm` on functional tokens."""
    x = tokens
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
            name=f"encoderblock_{i}",
        )(x)
    return keras.layers.LayerNormalization(epsilon=config.layer_norm_epsilon, name="encoder_norm")(
        x
    )


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
    if config.pooling is not None:
        x = TokenPooling(config.pooling, num_prefix_tokens=int(config.class_token), name="pooling")(
            x
        )
    if config.include_top:
        if config.representation_size:
            x = keras.layers.Dense(
                config.representation_size, activation="tanh", name="pre_logits"
            )(x)
        x = keras.layers.Dense(
            config.num_classes,
            activation=config.classifier_activation,
            kernel_initializer="zeros",
            bias_initializer="zeros",
            name="head",
        )(x)
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
    inputs = keras.Input((*config.image_size, config.num_channels), name="images")
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
