"""The cross-field checks of `ViTConfig` (models/config.py), one function per option family.

Each takes the config being built and, where a field is normalised (a default filled in, a pair
made a tuple), the `normalize(name, value)` setter of the frozen dataclass; each raises a
ValueError naming the expected and the received values. The option tables they check against
live here too, and config.py imports them.
"""

import dataclasses

from keras_vit.layers._checks import (
    check_bool,
    check_non_negative_int,
    check_positive_int,
    check_positive_int_pair,
    check_rate,
)
from keras_vit.layers.activations import check_activation
from keras_vit.layers.block_base import MLPS  # declared once, by the blocks
from keras_vit.layers.block_kinds import BLOCK_KINDS  # complete: keras_vit.layers is imported
from keras_vit.layers.differential_attention import ATTENTION_TYPES  # declared once, there
from keras_vit.layers.norms import check_norm
from keras_vit.layers.rotary import NORMALIZE_COORDS
from keras_vit.models.arguments import check_num_classes

POOLINGS = ("token", "gap", "map", "token_gap", None)
RATES = ("dropout_rate", "attention_dropout_rate", "drop_path_rate", "patch_dropout_rate")
# NaFlex: the position-embedding resize options and their defaults (timm's).
NAFLEX_RESIZE = {
    "position_embedding_interpolation": "bicubic",
    "position_embedding_antialias": True,
    "position_embedding_align_corners": False,
    "position_embedding_aspect_preserving": False,
}
RELATIVE_POSITION_BIASES = ("block", "shared", "mlp", "mlp_shared")
# Rotary position embeddings: "eva02" is EVA-02's axial RoPE (timm's `RotaryEmbeddingCat`),
# "axial" RoPE-ViT's (the same with column angles first: timm's grid_indexing='xy'), "mixed"
# RoPE-ViT's learned per-block, per-head frequencies (timm's `RotaryEmbeddingMixed`), "dinov3"
# DINOv3's (timm's `RotaryEmbeddingDinoV3` in eval mode).
ROTARY_EMBEDDINGS = (None, "eva02", "axial", "mixed", "dinov3")
# The rotary options' defaults (checked against a model without rotary_embedding).
_ROTARY_DEFAULTS = {
    "rotary_temperature": 10000.0,
    "rotary_reference_grid": None,
    "rotary_grid_offset": 0.0,
    "rotary_normalize_coords": "separate",
}


def check_divisible(size, patch, message):
    for got, p, what in ((size[0], patch[0], "height"), (size[1], patch[1], "width")):
        if got % p:
            raise ValueError(message.format(what=what))


def check_families(config, normalize):
    """The EVA / EVA-02 / rotary options (`mlp`, `rotary_*`)."""
    if config.mlp not in MLPS:
        raise ValueError(f"mlp must be one of {MLPS}. Received: mlp={config.mlp!r}")
    if config.rotary_embedding not in ROTARY_EMBEDDINGS:
        raise ValueError(
            f"rotary_embedding must be one of {ROTARY_EMBEDDINGS}. "
            f"Received: rotary_embedding={config.rotary_embedding!r}"
        )
    for name in ("rotary_temperature", "rotary_grid_offset"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{name} must be a number. Received: {name}={value!r}")
        normalize(name, float(value))
    if config.rotary_temperature <= 0:
        raise ValueError(
            f"rotary_temperature must be positive. "
            f"Received: rotary_temperature={config.rotary_temperature!r}"
        )
    if config.rotary_reference_grid is not None:
        normalize(
            "rotary_reference_grid",
            check_positive_int_pair(config.rotary_reference_grid, "rotary_reference_grid"),
        )
    if config.rotary_normalize_coords not in NORMALIZE_COORDS:
        raise ValueError(
            f"rotary_normalize_coords must be one of {NORMALIZE_COORDS}. "
            f"Received: rotary_normalize_coords={config.rotary_normalize_coords!r}"
        )
    if config.rotary_embedding is None:
        changed = [
            f"{name}={getattr(config, name)!r}"
            for name, default in _ROTARY_DEFAULTS.items()
            if getattr(config, name) != default
        ]
        if changed:
            raise ValueError(
                "Rotary settings need rotary_embedding (e.g. 'eva02'). "
                f"Received: rotary_embedding=None, {', '.join(changed)}"
            )
        return
    if config.rotary_embedding == "dinov3" and config.rotary_reference_grid is not None:
        raise ValueError(
            "rotary_embedding='dinov3' normalises every grid to [-1, 1] and takes no "
            "rotary_reference_grid. Received: rotary_embedding='dinov3', "
            f"rotary_reference_grid={config.rotary_reference_grid!r}"
        )
    if config.rotary_embedding != "dinov3" and config.rotary_normalize_coords != "separate":
        raise ValueError(
            "rotary_normalize_coords is DINOv3's option and needs rotary_embedding='dinov3'. "
            f"Received: rotary_embedding={config.rotary_embedding!r}, "
            f"rotary_normalize_coords={config.rotary_normalize_coords!r}"
        )
    if config.rotary_embedding == "mixed":
        changed = [
            f"{name}={getattr(config, name)!r}"
            for name in ("rotary_reference_grid", "rotary_grid_offset")
            if getattr(config, name) != _ROTARY_DEFAULTS[name]
        ]
        if changed:
            raise ValueError(
                "rotary_embedding='mixed' (learned frequencies on integer positions) takes no "
                f"reference grid or grid offset. Received: {', '.join(changed)}"
            )
    head_dim = config.hidden_dim // config.num_heads
    if head_dim % 4:
        raise ValueError(
            "2-D rotary embeddings need a head width (hidden_dim / num_heads) divisible by "
            f"4. Received: hidden_dim={config.hidden_dim}, num_heads={config.num_heads} "
            f"(head width {head_dim})"
        )


def check_norms(config):
    """`norm` (the kind of every norm) and `patch_norm` (a norm after the patch projection)."""
    check_norm(config.norm)
    if config.patch_norm and config.naflex:
        raise ValueError(
            "patch_norm is not implemented for NaFlex models (their patch encoder has no "
            "patch norm). Received: patch_norm=True, naflex=True"
        )


def check_map_head(config):
    """The MAP head's own sizes and prefix pooling (Perception Encoder core)."""
    check_positive_int(config.map_num_heads, "map_num_heads", allow_none=True)
    check_positive_int(config.map_mlp_dim, "map_mlp_dim", allow_none=True)
    changed = [
        f"{name}={getattr(config, name)!r}"
        for name, default in (
            ("map_num_heads", None),
            ("map_mlp_dim", None),
            ("map_prefix_tokens", False),
        )  # fmt: skip
        if getattr(config, name) != default
    ]
    if changed and config.pooling != "map":
        raise ValueError(
            f"{', '.join(changed)} need pooling='map'. Received: pooling={config.pooling!r}"
        )
    heads = config.map_num_heads
    if heads is not None and config.hidden_dim % heads:
        raise ValueError(
            "map_num_heads must divide hidden_dim. "
            f"Received: hidden_dim={config.hidden_dim}, map_num_heads={heads}"
        )


def check_block_kind(config):
    """The block kind, by value (`block_kind`, a key of `BLOCK_KINDS`), and its one option:
    `num_parallel`, the branches of `"parallel"` (a count that cannot apply is refused)."""
    if config.block_kind not in BLOCK_KINDS:
        raise ValueError(
            f"block_kind must be one of {tuple(BLOCK_KINDS)}. "
            f"Received: block_kind={config.block_kind!r}"
        )
    check_positive_int(config.num_parallel, "num_parallel")
    if config.num_parallel != 1 and config.block_kind != "parallel":
        raise ValueError(
            f"block_kind={config.block_kind!r} takes no parallel branches: num_parallel is the "
            "branch count of block_kind='parallel'. Received: "
            f"block_kind={config.block_kind!r}, num_parallel={config.num_parallel!r}"
        )


def check_post_norm(config):
    """Residual post-norm blocks (`block_kind="post"`) have no LayerScale."""
    if config.block_kind == "post" and config.layer_scale_init_value is not None:
        raise ValueError(
            "block_kind='post' (residual post-norm: x + norm(f(x))) takes no LayerScale. "
            f"Received: layer_scale_init_value={config.layer_scale_init_value!r}"
        )


def check_attention_type(config):
    """timm's ParallelScalingBlock (`block_kind="parallel_scaling"`) and differential
    attention (`attention_type`): what they exclude."""
    if config.attention_type not in ATTENTION_TYPES:
        raise ValueError(
            f"attention_type must be one of {ATTENTION_TYPES}. "
            f"Received: attention_type={config.attention_type!r}"
        )
    if config.attention_type == "differential" and config.hidden_dim % (2 * config.num_heads):
        raise ValueError(
            "attention_type='differential' needs 2 * num_heads to divide hidden_dim. "
            f"Received: hidden_dim={config.hidden_dim}, num_heads={config.num_heads}"
        )
    parallel = config.block_kind == "parallel_scaling"
    if not parallel and config.attention_type == "standard":
        return
    problems = [
        f"{name}={getattr(config, name)!r}"
        for name, default in (
            ("rotary_embedding", None),
            ("relative_position_bias", None),
            ("key_bias", True),
            ("attention_inner_norm", False),
            ("mlp_inner_norm", False),
            *((("mlp", "mlp"), ("remat", False)) if parallel else ()),
        )
        if getattr(config, name) != default
    ]
    if config.block_kind == "parallel":  # differential attention: one branch
        problems.insert(0, "block_kind='parallel'")
    if problems:
        kind = "block_kind='parallel_scaling'" if parallel else "attention_type='differential'"
        raise ValueError(
            f"{kind} (timm's ParallelScalingBlock / DiffAttention) takes no parallel branches, "
            "rotary embedding, relative position bias, q/v-only biases or attention / MLP inner "
            f"norms{' and no SwiGLU or remat' if parallel else ''}. "
            f"Received: {', '.join(problems)}"
        )


def check_grouped_query(config, normalize):
    """Grouped-query attention (`num_key_value_heads`) and attention-only LayerScale."""
    heads = config.num_key_value_heads
    if isinstance(heads, list):  # a per-block tuple read back from JSON
        heads = tuple(heads)
        normalize("num_key_value_heads", heads)
    per_block = heads if isinstance(heads, tuple) else (heads,)
    if isinstance(heads, tuple) and len(heads) != config.num_layers:
        raise ValueError(
            "num_key_value_heads needs one entry per block. "
            f"Received: num_layers={config.num_layers}, num_key_value_heads={heads!r}"
        )
    for count in per_block:
        check_positive_int(count, "num_key_value_heads", allow_none=True)
        if count is not None and config.num_heads % count:
            raise ValueError(
                "num_key_value_heads must divide num_heads. Received: "
                f"num_heads={config.num_heads}, num_key_value_heads={heads!r}"
            )
    grouped = any(count not in (None, config.num_heads) for count in per_block)
    # The one-branch blocks (pre- or post-norm) with standard attention.
    standard = config.block_kind in ("pre", "post") and config.attention_type == "standard"
    if grouped and not (standard and config.rotary_embedding != "mixed"):
        raise ValueError(
            "num_key_value_heads (grouped-query attention) needs a one-branch block "
            "(block_kind 'pre' or 'post'), standard attention and no mixed RoPE. Received: "
            f"block_kind={config.block_kind!r}, attention_type={config.attention_type!r}, "
            f"rotary_embedding={config.rotary_embedding!r}"
        )
    if config.attention_only_layer_scale and (
        config.layer_scale_init_value is None or not standard
    ):
        raise ValueError(
            "attention_only_layer_scale needs layer_scale_init_value, a one-branch block and "
            "standard attention. Received: "
            f"layer_scale_init_value={config.layer_scale_init_value!r}, "
            f"block_kind={config.block_kind!r}, attention_type={config.attention_type!r}"
        )


def check_relative_position_bias(config, normalize):
    mlp = config.relative_position_bias in ("mlp", "mlp_shared")
    if config.relative_position_mlp_dim is not None and not mlp:
        raise ValueError(
            "relative_position_mlp_dim needs relative_position_bias='mlp' or 'mlp_shared'. "
            f"Received: relative_position_bias={config.relative_position_bias!r}"
        )
    if mlp and config.relative_position_mlp_dim is None:
        normalize("relative_position_mlp_dim", 128)
    check_positive_int(config.relative_position_mlp_dim, "relative_position_mlp_dim", True)
    if config.relative_position_bias is None:
        return
    if config.relative_position_bias not in RELATIVE_POSITION_BIASES:
        raise ValueError(
            f"relative_position_bias must be one of {RELATIVE_POSITION_BIASES} or None. "
            f"Received: relative_position_bias={config.relative_position_bias!r}"
        )
    problems = []
    if not config.class_token and not mlp:
        problems.append("class_token=False")
    if config.num_register_tokens:
        problems.append(f"num_register_tokens={config.num_register_tokens}")
    if config.distillation_token:
        problems.append("distillation_token=True")
    if config.dynamic_image_size:
        problems.append("dynamic_image_size=True")
    if config.backbone is not None:
        problems.append("a backbone stem")
    if problems:
        raise ValueError(
            "relative_position_bias (for the grid of image_size; BEiT's table for one "
            "class token) needs no register or distillation token, a fixed image size, a "
            "known grid, and a class token for 'block' / 'shared'. "
            f"Received: {', '.join(problems)}"
        )


def check_naflex(config, normalize):
    """NaFlex: the options only NaFlex models use, and what they exclude."""
    if config.position_embedding_interpolation not in ("bicubic", "bilinear"):
        raise ValueError(
            "position_embedding_interpolation must be 'bicubic' or 'bilinear'. Received: "
            f"position_embedding_interpolation={config.position_embedding_interpolation!r}"
        )
    if config.position_embedding_antialias and config.position_embedding_align_corners:
        raise ValueError(
            "position_embedding_align_corners=True needs position_embedding_antialias="
            "False. Received: both True"
        )
    if not config.naflex:
        changed = [k for k, v in NAFLEX_RESIZE.items() if getattr(config, k) != v]
        if config.dynamic_image_size:  # the resize at every call (Qwen3-VL: bilinear)
            changed = [k for k in changed if k == "position_embedding_aspect_preserving"]
        if config.position_embedding == "factorized":
            changed.append("position_embedding='factorized'")
        if changed:
            raise ValueError(
                f"{', '.join(changed)} only apply to NaFlex models (naflex=True; the "
                "interpolation, antialias and align_corners also to dynamic_image_size=True). "
                f"Received: naflex=False, dynamic_image_size={config.dynamic_image_size}"
            )
        return
    problems = []
    if config.position_embedding not in ("learned", "factorized", None):
        problems.append(f"position_embedding={config.position_embedding!r}")
    if config.dynamic_image_size:
        problems.append("dynamic_image_size=True")
    if config.distillation_token:
        problems.append("distillation_token=True")
    if config.resnet_units is not None or config.backbone is not None:
        problems.append("a ResNet or backbone stem")
    if config.relative_position_bias is not None:
        problems.append(f"relative_position_bias={config.relative_position_bias!r}")
    if problems:
        raise ValueError(
            "naflex=True takes patch sequences of any grid (a 'learned', 'factorized' or "
            "no position embedding, no stem, distillation token or relative position "
            "bias (a fixed grid); every input size "
            f"already). Received: {', '.join(problems)}"
        )
    # NaFlex position embeddings cover the patches only (timm): no prefix rows.
    normalize("prefix_position_embedding", False)


def check_distillation(config):
    if not config.distillation_token:
        return
    problems = []
    if not config.class_token:
        problems.append("class_token=False")
    if config.pooling not in ("token", None):
        problems.append(f"pooling={config.pooling!r}")
    if config.representation_size is not None:
        problems.append(f"representation_size={config.representation_size!r}")
    if config.fc_norm:
        problems.append("fc_norm=True")
    if problems:
        raise ValueError(
            "distillation_token=True (DeiT) needs a class token, pooling='token' (or None) "
            "and no representation_size or fc_norm: the heads read the class and "
            f"distillation tokens. Received: {', '.join(problems)}"
        )


def check_class_names(config, normalize):
    """`class_names`: None, or one str per class of the head (stored as a tuple)."""
    names = config.class_names
    if names is None:
        return
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise ValueError(
            "class_names must be a sequence of str (one per class). "
            f"Received: class_names={str(names)[:80]!r}"
        )
    names = tuple(names)
    if not config.include_top or len(names) != config.num_classes:
        raise ValueError(
            f"class_names needs one name per class of the head: expected {config.num_classes} "
            f"with include_top=True. Received: {len(names)} names, include_top="
            f"{config.include_top}"
        )
    normalize("class_names", names)


def token_dropping_conflicts(config):
    """`[(option, value, why)]` of `config`'s options that keep every patch token in place, so
    that nothing may drop tokens: patch dropout (`check_patch_dropout`) and the masked
    autoencoder (`keras_vit.models.mae.mae_encoder_config`) refuse the same ones."""
    found = (
        ("relative_position_bias", config.relative_position_bias, "biases the full grid"),
        ("merger_size", config.merger_size, "merges neighbouring patches of the full grid"),
        ("naflex", config.naflex, "takes padded patch sequences, not image grids"),
        ("dynamic_image_size", config.dynamic_image_size, "has no static token count"),
        ("stem", config.is_hybrid, "(a hybrid) embeds a CNN feature map, not image patches"),
    )
    return [(name, value, why) for name, value, why in found if value]


def check_patch_dropout(config):
    """Patch dropout (`patch_dropout_rate`) needs a static patch sequence it can thin out:
    refused with what keeps every patch in place (`token_dropping_conflicts`)."""
    if not config.patch_dropout_rate:
        return
    for name, value, why in token_dropping_conflicts(config):
        if name == "stem":  # patch dropout thins the stem's feature-map tokens as well
            continue
        raise ValueError(
            f"patch_dropout_rate drops patch tokens, but {name} {why}. Received: "
            f"patch_dropout_rate={config.patch_dropout_rate}, {name}={value!r}"
        )


def check_core(config, normalize):
    """The size, head, pooling, token, rate and bool fields of a `ViTConfig` (`__post_init__`
    runs this first, then each option group's check)."""
    normalize("image_size", check_positive_int_pair(config.image_size, "image_size"))
    normalize("patch_size", check_positive_int_pair(config.patch_size, "patch_size"))
    for field in dataclasses.fields(config):  # every bool option (the `bool` annotations)
        if field.type in (bool, "bool"):
            normalize(field.name, check_bool(getattr(config, field.name), field.name))
    normalize("class_token", check_bool(config.class_token, "class_token", allow_none=True))
    for name in ("num_layers", "hidden_dim", "mlp_dim", "num_heads", "num_channels"):
        normalize(name, check_positive_int(getattr(config, name), name))
    normalize(
        "representation_size",
        check_positive_int(config.representation_size, "representation_size", allow_none=True),
    )
    check_num_classes(config.num_classes)
    if config.include_top:
        check_positive_int(config.num_classes, "num_classes")
    if config.hidden_dim % config.num_heads:
        raise ValueError(
            "num_heads must divide hidden_dim. "
            f"Received: hidden_dim={config.hidden_dim}, num_heads={config.num_heads}"
        )
    if config.pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {POOLINGS}. Received: pooling={config.pooling!r}")
    if config.pooling is None and config.include_top:
        raise ValueError(
            "pooling=None returns the token sequence and needs include_top=False. "
            f"Received: pooling=None, include_top={config.include_top}"
        )
    if config.class_token is None:
        normalize("class_token", config.pooling in ("token", "token_gap", None))
    if config.pooling in ("token", "token_gap") and not config.class_token:
        raise ValueError(
            f"pooling={config.pooling!r} needs a class token. Received: "
            f"pooling={config.pooling!r}, class_token=False"
        )
    for name in RATES:
        normalize(name, check_rate(getattr(config, name), name))
    normalize(
        "num_register_tokens",
        check_non_negative_int(config.num_register_tokens, "num_register_tokens"),
    )
    check_activation(config.activation)
    parallel = config.block_kind == "parallel"
    if parallel and config.relative_position_bias in ("block", "mlp"):
        raise ValueError(
            "block_kind='parallel' takes no per-block relative position bias (timm has none). "
            f"Received: num_parallel={config.num_parallel}, "
            f"relative_position_bias={config.relative_position_bias!r}"
        )
    inner = [
        f"{name}={getattr(config, name)!r}"
        for name, default in (("mlp", "mlp"), ("mlp_inner_norm", False),
                              ("attention_inner_norm", False))
        if getattr(config, name) != default
    ]  # fmt: skip
    if parallel and inner:
        raise ValueError(
            "block_kind='parallel' (timm's ParallelThingsBlock, a ParallelBlock) needs mlp='mlp' "
            f"and no MLP or attention inner norm. Received: num_parallel={config.num_parallel}, "
            f"{', '.join(inner)}"
        )
