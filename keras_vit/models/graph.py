"""The functional graph of a `ViTConfig`: `build_graph(config)` -> (inputs, outputs).

The builders `keras_vit.models.encoder.VisionTransformer` calls (patch encoder, rotary tables,
the blocks, the top) and the layer names of the model's roles (`PATCH_ENCODER`, `BLOCK_NAME`,
... : what the checkpoint name tables map). Split from `keras_vit.models.encoder`, which
re-exports these names.
"""

import keras

from keras_vit.layers import (
    MixedRotaryEmbedding,
    NaFlexMixedRotaryEmbedding,
    NaFlexRotaryEmbedding,
    PatchEncoder,
    RelativePositionBias,
    RelativePositionMLP,
    RotaryEmbedding2D,
    TokenDropping,
)
from keras_vit.layers.norms import make_norm
from keras_vit.layers.token_dropping import check_kept
from keras_vit.models import naflex
from keras_vit.models.blocks import make_block
from keras_vit.models.config import NAFLEX_RESIZE
from keras_vit.models.heads import build_top
from keras_vit.models.merger import merge_tokens
from keras_vit.models.stems import stem_features

# The layer names of the roles (`VisionTransformer` finds its parts by them; the checkpoint
# name tables map them). Block `i` is `BLOCK_NAME.format(i)`.
PATCH_ENCODER = "patch_encoder"
ROTARY_EMBEDDING = "rotary_embedding"
PRE_NORM = "pre_norm"
PATCH_DROPOUT = "patch_dropout"
BLOCK_NAME = "encoderblock_{}"
FINAL_NORM = "encoder_norm"
RELATIVE_POSITION_BIAS = "relative_position_bias"


def _default_dtype(name):
    """Without a model's policies: every layer takes the global dtype policy."""
    del name
    return None


def make_patch_encoder(config, dtype=None, **kwargs):
    """The `PatchEncoder` named `patch_encoder` of `config`; `kwargs` e.g. `use_mask_embedding`."""
    return PatchEncoder(
        config.hidden_dim,
        config.patch_size,
        class_token=config.class_token,
        position_embedding=config.position_embedding,
        dropout_rate=config.dropout_rate,
        name=PATCH_ENCODER,
        dtype=dtype,
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
        for name in ("interpolation", "antialias", "align_corners"):  # Qwen3-VL: bilinear
            name = f"position_embedding_{name}"
            if getattr(config, name) != NAFLEX_RESIZE[name]:
                options[name] = getattr(config, name)
    if config.patch_norm:  # AIMv2's norm on the patch embeddings (timm's embed_norm_layer)
        options["patch_norm"] = config.norm
        options["patch_norm_epsilon"] = config.layer_norm_epsilon
    return options


def num_prefix_tokens(config):
    """Class, distillation and register tokens before the patch tokens."""
    return int(config.class_token) + int(config.distillation_token) + config.num_register_tokens


def _layer_norm(config, name, dtype_of):
    """The model's norm `name` (`pre_norm`, `encoder_norm`, `fc_norm`) of kind `config.norm`."""
    return make_norm(config.norm, config.layer_norm_epsilon, name, dtype_of(name))


def rotary_table(features, config, dtype_of=_default_dtype):
    """The `rotary_embedding` layer's `(N, 2 * head_dim)` table for the grid of `features`.

    `features` is what the patch encoder embeds (images, or a stem's map; a NaFlex model's
    input dict, giving `(B, N, 1, 2 * head_dim)` per-token tables); None without
    `config.rotary_embedding`; with `"mixed"`, a list of one `(N, heads, 2 * head_dim)` table
    per block.
    """
    if config.rotary_embedding is None:
        return None
    layer = make_rotary_embedding(config, dtype_of(ROTARY_EMBEDDING))
    if config.naflex:  # per-token tables from the NaFlex inputs (`features`: their dict)
        return layer(features["patch_coord"], features["patch_valid"])
    return layer(features)


def make_rotary_embedding(config, dtype=None):
    """The `rotary_embedding` layer of `config` (which has one): plain or NaFlex, axial or mixed.

    Plain models' layers read the grid of the patch encoder's input (`patch_size`); NaFlex
    models' (`NaFlexRotaryEmbedding`, `NaFlexMixedRotaryEmbedding`) each token's coordinates.
    """
    head_dim = config.hidden_dim // config.num_heads
    common = dict(temperature=config.rotary_temperature, name=ROTARY_EMBEDDING, dtype=dtype)
    if not config.naflex:
        common["patch_size"] = config.patch_size
    if config.rotary_embedding == "mixed":
        layer = NaFlexMixedRotaryEmbedding if config.naflex else MixedRotaryEmbedding
        return layer(config.num_layers, config.num_heads, head_dim, **common)
    options = {"grid_indexing": "xy"} if config.rotary_embedding == "axial" else {}
    layer = NaFlexRotaryEmbedding if config.naflex else RotaryEmbedding2D
    return layer(
        head_dim,
        reference_grid_size=config.rotary_reference_grid,
        grid_offset=config.rotary_grid_offset,
        kind="dinov3" if config.rotary_embedding == "dinov3" else "eva02",
        normalize_coords=config.rotary_normalize_coords,
        **common,
        **options,
    )


def apply_blocks(tokens, config, dtype_of=_default_dtype, features=None, attention_mask=None):
    """`pre_norm`, `encoderblock_0` ... `encoderblock_{L-1}` and `encoder_norm` on tokens.

    `pre_norm` only with `config.pre_norm`; no `encoder_norm` with `config.fc_norm` (the
    final norm then follows the pooling). `dtype_of(layer name)` gives each layer's dtype
    policy (None: the global policy). With `config.rotary_embedding`, `features` (what the
    patch encoder embedded) gives the grid of the rotary table every block is called with.
    `attention_mask` (NaFlex: `patch_valid`) goes to every block's attention.
    """
    if config.rotary_embedding is not None and features is None:
        raise ValueError(
            "A model with rotary_embedding needs the patch encoder's input (features) to "
            f"compute its rotary table. Received: rotary_embedding={config.rotary_embedding!r}, "
            "features=None"
        )
    rotary = rotary_table(features, config, dtype_of)
    if config.patch_dropout_rate:  # timm's patch_drop: after the position embedding
        if tokens.shape[1] is not None:
            check_kept(tokens.shape[1] - num_prefix_tokens(config), config.patch_dropout_rate,
                       "patch_dropout_rate")  # fmt: skip
        dropped = TokenDropping(
            config.patch_dropout_rate,
            num_prefix_tokens(config),
            training_only=True,
            name=PATCH_DROPOUT,
            dtype=dtype_of(PATCH_DROPOUT),
        )(tokens, rotary_embedding=rotary)
        tokens, rotary = dropped["tokens"], dropped.get("rotary_embedding")
    per_block = isinstance(rotary, (list, tuple))  # mixed RoPE: one table per block
    mask = {} if attention_mask is None else {"attention_mask": attention_mask}
    x = tokens
    if config.pre_norm:
        x = _layer_norm(config, PRE_NORM, dtype_of)(x)
    shared = {}
    name, dtype = RELATIVE_POSITION_BIAS, dtype_of(RELATIVE_POSITION_BIAS)
    if config.relative_position_bias == "shared":
        layer = RelativePositionBias(config.num_heads, config.grid_size, name=name, dtype=dtype)
        shared["attention_bias"] = layer(x)
    elif config.relative_position_bias == "mlp_shared":
        layer = RelativePositionMLP(
            config.num_heads,
            config.grid_size,
            config.relative_position_mlp_dim,
            num_prefix_tokens=num_prefix_tokens(config),
            name=name,
            dtype=dtype,
        )
        shared["attention_bias"] = layer(x)
    for i in range(config.num_layers):
        # Stochastic depth grows linearly with depth (timm / DeiT convention).
        rate = config.drop_path_rate * i / max(config.num_layers - 1, 1)
        name = BLOCK_NAME.format(i)
        x = make_block(config, i, rate, name, dtype_of(name))(
            x, **shared, **_rotary_option(rotary, i if per_block else None), **mask
        )
    if (config.fc_norm and not config.final_and_fc_norm) or not config.final_norm:
        return x
    return _layer_norm(config, FINAL_NORM, dtype_of)(x)


def _rotary_option(rotary, index):
    """Block call arguments: the rotary table (block `index`'s of a per-block list), if any."""
    if rotary is None:
        return {}
    return {"rotary_embedding": rotary if index is None else rotary[index]}


def build_outputs(features, config, dtype_of=_default_dtype):
    """Assembles the transformer part on top of `features` (images, or a stem's feature map).

    Args:
        features: functional `(B, h, w, c)` tensor the patch encoder reads.
        config: a `keras_vit.models.config.ViTConfig`.
        dtype_of: callable mapping a layer name to its dtype policy (None: the global one).

    Returns:
        The functional output tensor.
    """
    x = make_patch_encoder(config, dtype=dtype_of(PATCH_ENCODER))(features)
    return encode_tokens(x, config, dtype_of, features=features)


def encode_tokens(x, config, dtype_of=_default_dtype, patch_valid=None, features=None):
    """Blocks, norm, pooling and head on the patch encoder's tokens (`build_outputs`' rest).

    `patch_valid`: NaFlex validity `(B, N)` of the patch tokens, masking attention and
    pooling (`keras_vit.models.naflex`). `features`: what the patch encoder embedded (the
    grid of a rotary model's table).
    """
    x = apply_blocks(x, config, dtype_of, features=features, attention_mask=patch_valid)
    x = merge_tokens(x, features, config, dtype_of)  # a VLM projector, if any
    return build_top(x, config, num_prefix_tokens(config), dtype_of, patch_valid)


def build_graph(config, dtype_of=_default_dtype):
    """The functional `(inputs, outputs)` of the model `config` describes (plain or hybrid).

    Example:

    >>> from keras_vit.models.config import ViTConfig
    >>> inputs, outputs = build_graph(ViTConfig.from_variant("mu/8", image_size=32))
    >>> outputs.shape
    (None, 1000)
    """
    if config.naflex:
        return _naflex_graph(config, dtype_of)
    size = (None, None) if config.dynamic_image_size else config.image_size
    inputs = keras.Input((*size, config.num_channels), name="images")
    features = stem_features(inputs, config, dtype_of(None))
    return inputs, build_outputs(features, config, dtype_of)


def _naflex_graph(config, dtype_of):
    """A NaFlex model's `(inputs dict, outputs)` (`keras_vit.models.naflex`).

    Example:

    >>> from keras_vit.models.config import ViTConfig
    >>> config = ViTConfig.from_variant("mu/8", image_size=32, naflex=True, pooling="gap")
    >>> inputs, outputs = build_graph(config)
    >>> sorted(inputs), outputs.shape
    (['patch_coord', 'patch_valid', 'patches'], (None, 1000))
    """
    inputs = naflex.naflex_inputs(config)
    patch_encoder = naflex.make_naflex_patch_encoder(
        config, PATCH_ENCODER, dtype=dtype_of(PATCH_ENCODER)
    )
    valid = inputs["patch_valid"]
    x = patch_encoder(inputs["patches"], inputs["patch_coord"], valid)
    return inputs, encode_tokens(x, config, dtype_of, patch_valid=valid, features=inputs)
