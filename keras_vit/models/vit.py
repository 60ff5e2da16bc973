"""`ViT(...)`: functional Vision Transformer builders, plain and hybrid."""

import os

import keras

from keras_vit import presets
from keras_vit.layers import PatchEncoder, TokenPooling, TransformerBlock
from keras_vit.layers._checks import (
    check_positive_int,
    check_positive_int_pair,
    check_rate,
)
from keras_vit.models import variants

POOLINGS = ("token", "gap", None)


def _check_config(
    *,
    image_size,
    patch_size,
    num_layers,
    hidden_dim,
    mlp_dim,
    num_heads,
    num_classes,
    include_top,
    pooling,
    class_token,
    representation_size,
    num_channels,
    rates,
):
    for name, value in (
        ("num_layers", num_layers),
        ("hidden_dim", hidden_dim),
        ("mlp_dim", mlp_dim),
        ("num_heads", num_heads),
        ("num_channels", num_channels),
    ):
        check_positive_int(value, name)
    check_positive_int(representation_size, "representation_size", allow_none=True)
    if include_top:
        check_positive_int(num_classes, "num_classes")
    if hidden_dim % num_heads:
        raise ValueError(
            "num_heads must divide hidden_dim. "
            f"Received: hidden_dim={hidden_dim}, num_heads={num_heads}"
        )
    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {POOLINGS}. Received: pooling={pooling!r}")
    if pooling is None and include_top:
        raise ValueError(
            "pooling=None returns the token sequence and needs include_top=False. "
            f"Received: pooling=None, include_top={include_top}"
        )
    if pooling == "token" and not class_token:
        raise ValueError(
            "pooling='token' needs a class token. Received: pooling='token', class_token=False"
        )
    for name, value in rates.items():
        check_rate(value, name)
    for size, patch, what in (
        (image_size[0], patch_size[0], "height"),
        (image_size[1], patch_size[1], "width"),
    ):
        if size % patch:
            raise ValueError(
                f"image {what} must be divisible by the patch size. "
                f"Received: image_size={image_size}, patch_size={patch_size}"
            )


def build_vit(
    inputs,
    features,
    *,
    patch_size,
    num_layers,
    hidden_dim,
    mlp_dim,
    num_heads,
    num_classes,
    include_top,
    pooling,
    class_token,
    position_embedding,
    representation_size,
    classifier_activation,
    dropout_rate,
    attention_dropout_rate,
    drop_path_rate,
    layer_norm_epsilon,
    approximate_gelu,
    layer_scale_init_value,
    name,
    remat=False,
):
    """Assembles the transformer part on top of `features` (images, or a stem's feature map).

    Everything after the stem is the same for plain and hybrid models.
    """
    x = PatchEncoder(
        hidden_dim,
        patch_size,
        class_token=class_token,
        position_embedding=position_embedding,
        dropout_rate=dropout_rate,
        name="patch_encoder",
    )(features)
    for i in range(num_layers):
        # Stochastic depth grows linearly with depth (timm / DeiT convention).
        rate = drop_path_rate * i / max(num_layers - 1, 1)
        x = TransformerBlock(
            num_heads=num_heads,
            mlp_dim=mlp_dim,
            dropout_rate=dropout_rate,
            attention_dropout_rate=attention_dropout_rate,
            drop_path_rate=rate,
            layer_norm_epsilon=layer_norm_epsilon,
            approximate_gelu=approximate_gelu,
            layer_scale_init_value=layer_scale_init_value,
            remat=remat,
            name=f"encoderblock_{i}",
        )(x)
    x = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="encoder_norm")(x)
    if pooling is not None:
        x = TokenPooling(pooling, num_prefix_tokens=int(class_token), name="pooling")(x)
    if include_top:
        if representation_size:
            x = keras.layers.Dense(representation_size, activation="tanh", name="pre_logits")(x)
        x = keras.layers.Dense(
            num_classes,
            activation=classifier_activation,
            kernel_initializer="zeros",
            bias_initializer="zeros",
            name="head",
        )(x)
    return keras.Model(inputs, x, name=name)


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
        from keras_vit.checkpoints import load_npz

        return load_npz(model, path)
    model.load_weights(path)
    return model


def ViT(
    variant="B/16",
    *,
    image_size=None,
    num_classes=None,
    include_top=True,
    weights=None,
    num_channels=3,
    pooling="token",
    representation_size=None,
    classifier_activation=None,
    dropout_rate=0.0,
    attention_dropout_rate=0.0,
    drop_path_rate=0.0,
    approximate_gelu=True,
    layer_norm_epsilon=1e-6,
    layer_scale_init_value=None,
    remat=False,
    position_embedding="learned",
    class_token=None,
    num_layers=None,
    hidden_dim=None,
    mlp_dim=None,
    num_heads=None,
    patch_size=None,
    name=None,
    **hybrid_kwargs,
):
    """Builds a Vision Transformer as a functional `keras.Model`.

    Args:
        variant: str. Size and patch code: `"Ti/16"`, `"S/16"`, `"S/32"`,
            `"B/8"`, `"B/16"`, `"B/32"`, `"L/16"`, `"L/32"`, `"H/14"` (any
            size with any patch works, plus `"mu"` for tests), or a hybrid
            code such as `"R50+B/16"`. Defaults to `"B/16"`.
        image_size: int or (height, width). Input size in pixels. Defaults to
            224, or the resolution of the preset named by `weights`.
        num_classes: int. Classifier outputs (with `include_top`). Defaults to
            1000, or the class count of the preset named by `weights`.
        include_top: bool. Whether to add the (pre-logits and) classifier head.
            Defaults to True.
        weights: None, a preset name for this variant (`"imagenet21k"`,
            `"imagenet21k+imagenet2012"`, `"augreg_in21k"`,
            `"augreg_in21k_ft_in1k"`, ...; see `keras_vit.list_weights(variant)`),
            or a path to an official `.npz` checkpoint or a `.weights.h5` file.
            A preset is downloaded once into the Keras cache (base URL from
            `$KERAS_VIT_WEIGHTS_URL`) and loaded strictly; the model takes the
            preset's image size and class count unless given. Given another
            class count, the head is new (zeros) and `pre_logits` is dropped
            unless `representation_size` is set; with the preset's own class
            count, an ImageNet-21k original keeps its `pre_logits`. Given
            another image size, the position embedding is resampled.
            Defaults to None.
        num_channels: int. Input channels. Defaults to 3.
        pooling: `"token"` (class token), `"gap"` (mean of patch tokens) or None
            (only with `include_top=False`: returns the `(B, T, D)` tokens).
            Defaults to `"token"`.
        representation_size: optional int. Adds the pre-logits layer
            (Dense + tanh) used in pre-training. Defaults to None.
        classifier_activation: optional activation of the classifier (e.g.
            `"softmax"`); None returns logits. Defaults to None.
        dropout_rate: float in [0, 1). Dropout after the position embedding and
            inside every block. Defaults to 0.
        attention_dropout_rate: float in [0, 1). Defaults to 0.
        drop_path_rate: float in [0, 1). Stochastic depth of the last block,
            increasing linearly from 0 at the first. Defaults to 0.
        approximate_gelu: bool. tanh GELU (official) or exact. Defaults to True.
        layer_norm_epsilon: float. Defaults to 1e-6.
        layer_scale_init_value: optional float enabling LayerScale. Defaults to None.
        remat: bool. Rematerialise every transformer block in the backward
            pass (gradient checkpointing through `keras.remat`): training keeps
            only each block's input and recomputes the rest, for about one more
            forward pass of compute; outputs and gradients are unchanged. A
            ViT-S/16 step at batch 16 on CPU: peak memory -47% on TensorFlow,
            -12 to -20% on PyTorch, unchanged on JAX, 15-23% slower (see
            `TransformerBlock`).
            Defaults to False.
        position_embedding: `"learned"`, `"sincos2d"` or None. Defaults to `"learned"`.
        class_token: optional bool; defaults to True unless `pooling="gap"`
            (the official GAP models have no class token).
        num_layers, hidden_dim, mlp_dim, num_heads, patch_size: override the
            variant's numbers.
        name: optional model name; defaults to e.g. `"vit_b16"`.
        **hybrid_kwargs: for hybrid codes only, `resnet_units`, `resnet_width`
            or a `backbone` (see `keras_vit.ViTHybrid`).

    Returns:
        A functional `keras.Model` taking `(B, H, W, C)` images in [-1, 1]
        (see `keras_vit.preprocess_input`).

    Example:

    >>> model = ViT("mu/8", image_size=32, num_classes=10)
    >>> model.output_shape
    (None, 10)

    Reference:
        Dosovitskiy et al., 2021, "An Image is Worth 16x16 Words", Sec. 3.1.
    """
    config = variants.parse_variant(variant)
    overrides = dict(
        num_layers=num_layers,
        hidden_dim=hidden_dim,
        mlp_dim=mlp_dim,
        num_heads=num_heads,
        patch_size=patch_size,
    )
    config.update({k: v for k, v in overrides.items() if v is not None})
    if presets.is_preset_name(weights):
        weights, image_size, num_classes, representation_size = presets.resolve_builder_weights(
            variant,
            weights,
            image_size=image_size,
            num_classes=num_classes,
            include_top=include_top,
            representation_size=representation_size,
        )
    image_size = 224 if image_size is None else image_size
    num_classes = 1000 if num_classes is None else num_classes
    if "resnet_units" in config or hybrid_kwargs:
        from keras_vit.models.hybrid import build_hybrid

        common = dict(
            image_size=image_size,
            num_classes=num_classes,
            include_top=include_top,
            weights=weights,
            num_channels=num_channels,
            pooling=pooling,
            representation_size=representation_size,
            classifier_activation=classifier_activation,
            dropout_rate=dropout_rate,
            attention_dropout_rate=attention_dropout_rate,
            drop_path_rate=drop_path_rate,
            approximate_gelu=approximate_gelu,
            layer_norm_epsilon=layer_norm_epsilon,
            layer_scale_init_value=layer_scale_init_value,
            remat=remat,
            position_embedding=position_embedding,
            class_token=class_token,
            name=name or variants.model_name(variant),
        )
        return build_hybrid(config, **common, **hybrid_kwargs)

    image_size = check_positive_int_pair(image_size, "image_size")
    patch = check_positive_int_pair(config["patch_size"], "patch_size")
    if class_token is None:
        class_token = pooling != "gap"
    _check_config(
        image_size=image_size,
        patch_size=patch,
        num_layers=config["num_layers"],
        hidden_dim=config["hidden_dim"],
        mlp_dim=config["mlp_dim"],
        num_heads=config["num_heads"],
        num_classes=num_classes,
        include_top=include_top,
        pooling=pooling,
        class_token=class_token,
        representation_size=representation_size,
        num_channels=num_channels,
        rates=dict(
            dropout_rate=dropout_rate,
            attention_dropout_rate=attention_dropout_rate,
            drop_path_rate=drop_path_rate,
        ),
    )
    inputs = keras.Input((*image_size, num_channels), name="images")
    model = build_vit(
        inputs,
        inputs,
        patch_size=patch,
        num_layers=config["num_layers"],
        hidden_dim=config["hidden_dim"],
        mlp_dim=config["mlp_dim"],
        num_heads=config["num_heads"],
        num_classes=num_classes,
        include_top=include_top,
        pooling=pooling,
        class_token=class_token,
        position_embedding=position_embedding,
        representation_size=representation_size,
        classifier_activation=classifier_activation,
        dropout_rate=dropout_rate,
        attention_dropout_rate=attention_dropout_rate,
        drop_path_rate=drop_path_rate,
        layer_norm_epsilon=layer_norm_epsilon,
        approximate_gelu=approximate_gelu,
        layer_scale_init_value=layer_scale_init_value,
        remat=remat,
        name=name or variants.model_name(variant),
    )
    return load_weights(model, weights)


_BUILDER_DOC = """Builds ViT-{code} ({layers} layers, hidden {hidden}, MLP {mlp}, {heads} heads{extra}).

    A one-line wrapper of `keras_vit.ViT("{code}", **kwargs)`; every argument of
    `ViT` except `variant` is accepted (`image_size`, `num_classes`,
    `include_top`, `weights`, `pooling`, `representation_size`,
    `classifier_activation`, dropout rates, size overrides, ...).

    Returns:
        A functional `keras.Model` named `"{name}"`.

    Example:

    >>> model = {fn}(image_size={demo_size}, num_layers=1, include_top=False,
    ...     pooling="gap")  # doctest: +SKIP

    Reference:
        Dosovitskiy et al., 2021, Table 1{ref}.
    """


def _document(fn, code):
    config = variants.parse_variant(code)
    hybrid = "resnet_units" in config
    fn.__doc__ = _BUILDER_DOC.format(
        code=code,
        fn=fn.__name__,
        name=variants.model_name(code),
        layers=config["num_layers"],
        hidden=config["hidden_dim"],
        mlp=config["mlp_dim"],
        heads=config["num_heads"],
        extra=f", BiT ResNet stem {config['resnet_units']}" if hybrid else "",
        demo_size=64 if hybrid else 32,
        ref=" and Sec. 3.1 (Hybrid Architecture)" if hybrid else "",
    )
    return fn


def _named(code):
    return lambda fn: _document(fn, code)


# fmt: off
@_named("Ti/16")
def ViTTi16(**kwargs): return ViT("Ti/16", **kwargs)  # noqa: E704
@_named("S/16")
def ViTS16(**kwargs): return ViT("S/16", **kwargs)  # noqa: E704
@_named("S/32")
def ViTS32(**kwargs): return ViT("S/32", **kwargs)  # noqa: E704
@_named("B/8")
def ViTB8(**kwargs): return ViT("B/8", **kwargs)  # noqa: E704
@_named("B/16")
def ViTB16(**kwargs): return ViT("B/16", **kwargs)  # noqa: E704
@_named("B/32")
def ViTB32(**kwargs): return ViT("B/32", **kwargs)  # noqa: E704
@_named("L/16")
def ViTL16(**kwargs): return ViT("L/16", **kwargs)  # noqa: E704
@_named("L/32")
def ViTL32(**kwargs): return ViT("L/32", **kwargs)  # noqa: E704
@_named("H/14")
def ViTH14(**kwargs): return ViT("H/14", **kwargs)  # noqa: E704
# fmt: on
