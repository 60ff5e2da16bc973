"""`.keras` files of earlier versions: plain functional models, loaded as `VisionTransformer`s.

Before the model class, the builders returned plain functional `keras.Model`s; their files
load (every layer is registered) as such. `upgrade` reads the architecture back from the
layer graph (the builders' layer names and types), builds the `VisionTransformer` of it with
the same dtype policies, and moves the weights over (by variable path); a model that is not
exactly such a ViT (a feature extractor, an edited graph) is returned unchanged. This is the
only place that reads a model's structure from its layer names; `keras_vit.load_model` calls it.
"""

import keras

from keras_vit.layers import EncoderBlock, MAPHead, PatchEncoder, StdConv2D, TokenPooling
from keras_vit.layers._quantization import quantized_sublayers
from keras_vit.layers.block_kinds import kind_of
from keras_vit.models import encoder as builder
from keras_vit.models import variants
from keras_vit.models.config import ViTConfig
from keras_vit.models.encoder import VisionTransformer


def _is_plain_functional(model):
    """A functional model of Keras' own class (what `load_model` makes of a plain model file)."""
    kind = type(model)
    return kind.__name__ == "Functional" and kind.__module__.startswith("keras.")


def upgrade(model):
    """`model` as a `VisionTransformer` when it is a plain functional ViT of an earlier version.

    Args:
        model: any loaded `keras.Model`.

    Returns:
        A `VisionTransformer` with `model`'s weights and dtype policies (identical outputs),
        or `model` itself when it is not a plain functional keras_vit ViT.
    """
    if not _is_plain_functional(model):
        return model
    try:
        config = read_config(model)
    except ValueError:
        return model
    layers = _layers_by_name(model)
    default = layers[builder.PATCH_ENCODER].dtype_policy
    quantized = quantized_sublayers(model)
    dtype = keras.dtype_policies.DTypePolicyMap(default, quantized) if quantized else default
    try:
        upgraded = VisionTransformer(config, dtype=dtype, name=model.name)
    except ValueError:
        return model
    source = {variable.path: variable for variable in model.weights}
    target = {variable.path: variable for variable in upgraded.weights}
    shapes = {path: tuple(v.shape) for path, v in source.items()}
    if (
        len(source) != len(model.weights)
        or shapes != {path: tuple(v.shape) for path, v in target.items()}
        or model.output_shape != upgraded.output_shape
    ):
        return model
    for path, variable in target.items():
        if variable is not source[path]:
            variable.assign(source[path])
    upgraded.trainable = model.trainable
    return upgraded


def _layers_by_name(model):
    return {layer.name: layer for layer in model.layers}


def _stem_fields(model, encoder):
    """The hybrid fields of `model`: ResNet stem numbers, a backbone, or none (plain)."""
    layers = _layers_by_name(model)
    if isinstance(layers.get("conv_root"), StdConv2D):
        units = []
        while f"block{len(units) + 1}_unit1_conv1" in layers:
            stage = len(units) + 1
            count = 1
            while f"block{stage}_unit{count + 1}_conv1" in layers:
                count += 1
            units.append(count)
        return dict(
            resnet_units=tuple(units),
            resnet_width=layers["conv_root"].filters,
            resnet_groups=layers["gn_root"].groups,
            resnet_conv_epsilon=layers["conv_root"].epsilon,
            resnet_conv_epsilon_mode=layers["conv_root"].epsilon_mode,
            resnet_norm_epsilon=layers["gn_root"].epsilon,
        )
    source = encoder.input
    if isinstance(source, (list, tuple)):
        source = source[0]
    producer = source._keras_history.operation
    if isinstance(producer, keras.layers.InputLayer):
        return {}
    return dict(backbone=producer)


def read_config(model):
    """The `ViTConfig` of a plain functional model saved by an earlier keras_vit.

    Raises:
        ValueError: when `model` has no `PatchEncoder` named `patch_encoder` or no
            `TransformerBlock`.
    """
    if not isinstance(model, keras.Model):
        raise ValueError(
            "read_config needs a keras.Model built by keras_vit.ViT. "
            f"Received: {type(model).__name__}"
        )
    layers = _layers_by_name(model)
    encoder = layers.get(builder.PATCH_ENCODER)
    if not isinstance(encoder, PatchEncoder):
        raise ValueError(
            "read_config needs a model built by keras_vit.ViT, with a PatchEncoder named "
            f"'patch_encoder'. Received: model {model.name!r} without one"
        )
    blocks = [layer for layer in model.layers if isinstance(layer, EncoderBlock)]
    if not blocks:
        raise ValueError(
            "read_config needs a ViT with transformer blocks. "
            f"Received: model {model.name!r} without a TransformerBlock"
        )
    head, pre_logits = layers.get(builder.HEAD), layers.get(builder.PRE_LOGITS)
    activation = head.get_config()["activation"] if head is not None else None
    if builder.CLASSIFIER_ACTIVATION in layers:  # distilled heads: the activation after the average
        activation = layers[builder.CLASSIFIER_ACTIVATION].get_config()["activation"]
    _, height, width, channels = model.input_shape
    stem = _stem_fields(model, encoder)
    if encoder.dynamic_image_size:  # the size the position embedding is made for
        units = stem.get("resnet_units")
        stride = 1 if units is None else variants.resnet_stride(units)
        height, width = (stride * size for size in encoder.image_size)
    first, last = blocks[0], blocks[-1]
    return ViTConfig(
        patch_size=encoder.patch_size,
        num_layers=len(blocks),
        hidden_dim=encoder.hidden_dim,
        mlp_dim=first.mlp_dim,
        num_heads=first.num_heads,
        image_size=(height, width),
        num_channels=channels,
        dynamic_image_size=encoder.dynamic_image_size,
        include_top=head is not None,
        pooling=_pooling_of(model, layers),
        representation_size=pre_logits.units if pre_logits is not None else None,
        classifier_activation=None if activation == "linear" else activation,
        fc_norm=builder.FC_NORM in layers or builder.FINAL_NORM not in layers,
        class_token=encoder.class_token,
        position_embedding=encoder.position_embedding,
        dropout_rate=encoder.dropout_rate,
        attention_dropout_rate=first.attention_dropout_rate,
        drop_path_rate=last.drop_path_rate,
        approximate_gelu=first.approximate_gelu,
        layer_norm_epsilon=first.layer_norm_epsilon,
        layer_scale_init_value=first.layer_scale_init_value,
        remat=first.remat,
        num_register_tokens=encoder.num_register_tokens,
        distillation_token=encoder.distillation_token,
        prefix_position_embedding=encoder.prefix_position_embedding,
        pre_norm=builder.PRE_NORM in layers,
        qk_norm=first.qk_norm,
        activation=first.activation,
        key_bias=first.key_bias,
        **_relative_position(first, layers.get(builder.RELATIVE_POSITION_BIAS)),
        block_kind=kind_of(first),
        num_parallel=first.num_parallel,
        name=model.name,
        **({"num_classes": head.units} if head is not None else {}),
        **stem,
    )


def _relative_position(block, shared):
    """`relative_position_bias` / `relative_position_mlp_dim` of a built model."""
    if block.relative_position_grid is not None:
        dim = block.relative_position_mlp_dim
        return {"relative_position_bias": "block" if dim is None else "mlp",
                "relative_position_mlp_dim": dim}  # fmt: skip
    if shared is None:
        return {}
    dim = getattr(shared, "hidden_dim", None)
    return {"relative_position_bias": "shared" if dim is None else "mlp_shared",
            "relative_position_mlp_dim": dim}  # fmt: skip


def _pooling_of(model, layers):
    """The `pooling` field of a built model: its pooling layer's kind, or None."""
    pooling = layers.get(builder.POOLING)
    if not isinstance(pooling, (TokenPooling, MAPHead)):
        found = [layer for layer in model.layers if isinstance(layer, (TokenPooling, MAPHead))]
        pooling = found[0] if found else None
    if pooling is None:
        return None
    if isinstance(pooling, MAPHead):
        return "map"
    return pooling.pooling if pooling.pooling in ("gap", "token_gap") else "token"
