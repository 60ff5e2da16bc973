"""timm's `VisionTransformer` state dict, declared: the keys and shapes of a timm model name
with keyword arguments, from timm's constructor arguments alone (timm is not imported).

What a name fixes is the `model_args` its timm model function passes to the model class, kept
in keras_vit's table of timm's names (`pretrained.json`, written from timm by
scripts/make_timm_pretrained_table.py); the keyword arguments override them, as in
`timm.create_model(name, **kwargs)`. `declared_state_shapes` follows timm's constructors:
`VisionTransformer` (and `VisionTransformerDistilled`) with timm's `Block` (`Attention`, `Mlp`,
LayerScale, QK-norm, BEiT-3's inner norms), LayerNorm, class / register / distillation tokens,
the learned position embedding (`no_embed_class`), `pre_norm`, `final_norm`, `fc_norm`,
`global_pool` (`"token"`, `"avg"`, `"map"`: `AttentionPoolLatent`, `""`) and the head.
A hybrid's ResNet stem (`patch_embed.backbone.*`, fixed by the name) and its grid are the
caller's (`stem`); any other block, norm, MLP or model class is `NotDeclared`.
`keras_vit.weights.timm.verify` uses this where timm is not installed; the tests check it
against timm's own models on the meta device.
"""

from keras_vit.weights.timm.pretrained import model_arguments

__all__ = ["NotDeclared", "declared_state_shapes"]


class NotDeclared(ValueError):
    """The name's timm model is not one this module declares (says why)."""


# Builder arguments that change no weight's name or shape.
_NO_WEIGHTS = ("act_layer", "dynamic_img_size", "dynamic_img_pad", "drop_rate", "pos_drop_rate",
               "patch_drop_rate", "proj_drop_rate", "attn_drop_rate", "drop_path_rate",
               "weight_init", "fix_init", "class_token_init", "pretrained", "features_only",
               "global_pool_include_prefix")  # fmt: skip


def _pair(value):
    return tuple(value) if isinstance(value, (list, tuple)) else (value, value)


def _linear(prefix, out_features, in_features, bias=True):
    shapes = {f"{prefix}.weight": (out_features, in_features)}
    if bias:
        shapes[f"{prefix}.bias"] = (out_features,)
    return shapes


def _norm(prefix, features):
    return {f"{prefix}.weight": (features,), f"{prefix}.bias": (features,)}


def _block(i, args, dim, hidden):
    key, heads = f"blocks.{i}", args.get("num_heads", 12)
    proj_bias = args.get("proj_bias", True)
    shapes = {**_norm(f"{key}.norm1", dim)}
    shapes.update(_linear(f"{key}.attn.qkv", 3 * dim, dim, args.get("qkv_bias", True)))
    if args.get("qk_norm", False):
        shapes.update(_norm(f"{key}.attn.q_norm", dim // heads))
        shapes.update(_norm(f"{key}.attn.k_norm", dim // heads))
    if args.get("scale_attn_norm", False):
        shapes.update(_norm(f"{key}.attn.norm", dim))
    shapes.update(_linear(f"{key}.attn.proj", dim, dim, proj_bias))
    if args.get("init_values"):
        shapes[f"{key}.ls1.gamma"] = (dim,)
    shapes.update(_norm(f"{key}.norm2", dim))
    shapes.update(_linear(f"{key}.mlp.fc1", hidden, dim, proj_bias))
    if args.get("scale_mlp_norm", False):
        shapes.update(_norm(f"{key}.mlp.norm", hidden))
    shapes.update(_linear(f"{key}.mlp.fc2", dim, hidden, proj_bias))
    if args.get("init_values"):
        shapes[f"{key}.ls2.gamma"] = (dim,)
    return shapes


def _map_head(dim, hidden):
    """timm's `AttentionPoolLatent` as `VisionTransformer` makes it (one latent, q / kv
    biases, no QK-norm, the blocks' MLP ratio)."""
    return {
        "attn_pool.latent": (1, 1, dim),
        **_linear("attn_pool.q", dim, dim),
        **_linear("attn_pool.kv", 2 * dim, dim),
        **_linear("attn_pool.proj", dim, dim),
        **_norm("attn_pool.norm", dim),
        **_linear("attn_pool.mlp.fc1", hidden, dim),
        **_linear("attn_pool.mlp.fc2", dim, hidden),
    }


def _check_declared(name, model_class, args):
    if model_class not in ("VisionTransformer", "VisionTransformerDistilled"):
        raise NotDeclared(f"{name!r} is a timm {model_class}, not a VisionTransformer")
    for option, value in args.items():
        if option in ("block_fn", "mlp_layer", "embed_norm_layer", "attn_layer"):
            raise NotDeclared(f"{name!r} has {option}={value!r}")
        if option == "norm_layer" and "LayerNorm" not in str(value):
            raise NotDeclared(f"{name!r} has norm_layer={value!r}")
        if option == "embed_layer" and "HybridEmbed" not in str(value):
            raise NotDeclared(f"{name!r} has embed_layer={value!r}")
    if args.get("global_pool", "token") not in ("token", "avg", "map", ""):
        raise NotDeclared(f"{name!r} has global_pool={args['global_pool']!r}")
    if args.get("pos_embed", "learn") not in ("learn", "none", None, ""):
        raise NotDeclared(f"{name!r} has pos_embed={args['pos_embed']!r}")


def declared_state_shapes(name, kwargs, *, stem=None):
    """`{key: shape}` of `timm.create_model(name, pretrained=False, **kwargs)`'s state dict.

    Args:
        name: str. A timm architecture name of keras_vit's table (no tag).
        kwargs: dict. `timm.create_model` keyword arguments.
        stem: for a hybrid (`embed_layer=HybridEmbed`), what its ResNet stem (fixed by the name)
            gives: a dict of `backbone` (`{key: shape}` under `patch_embed.backbone.`),
            `features` (its output channels) and `tokens` (its grid's size). Defaults to None.

    Raises:
        NotDeclared: a model this module does not declare (another class, block, norm, MLP).

    Example:

    >>> shapes = declared_state_shapes("deit3_small_patch16_224",
    ...                                {"depth": 1, "embed_dim": 32, "num_heads": 2})
    >>> shapes["pos_embed"], shapes["blocks.0.ls1.gamma"], shapes["head.weight"]
    ((1, 196, 32), (32,), (1000, 32))
    """
    model_class, fixed = model_arguments(name)
    args = {**fixed, **kwargs}
    _check_declared(name, model_class, args)
    dim, depth = args.get("embed_dim", 768), args.get("depth", 12)
    hidden = int(dim * args.get("mlp_ratio", 4.0))
    distilled = model_class == "VisionTransformerDistilled"
    class_token, registers = args.get("class_token", True), args.get("reg_tokens", 0)
    global_pool = args.get("global_pool", "token")
    fc_norm = args.get("fc_norm")
    use_fc_norm = global_pool in ("avg", "avgmax", "max") if fc_norm is None else fc_norm
    final_norm, pre_norm = args.get("final_norm", True), args.get("pre_norm", False)
    num_classes = args.get("num_classes", 1000)
    hybrid = "HybridEmbed" in str(args.get("embed_layer", ""))
    if hybrid:
        if stem is None:
            raise NotDeclared(f"{name!r} is a hybrid: its stem's shapes are the caller's")
        tokens = stem["tokens"]
    else:
        patch = _pair(args.get("patch_size", 16))
        size = _pair(args.get("img_size", 224))
        tokens = (size[0] // patch[0]) * (size[1] // patch[1])
    prefix = int(class_token) + registers + int(distilled)
    shapes = {}
    if class_token:
        shapes["cls_token"] = (1, 1, dim)
    if registers:
        shapes["reg_token"] = (1, registers, dim)
    if args.get("pos_embed", "learn") == "learn":
        length = tokens + (0 if args.get("no_embed_class", False) else prefix)
        shapes["pos_embed"] = (1, length, dim)
    if distilled:
        shapes["dist_token"] = (1, 1, dim)
    if hybrid:
        shapes.update({f"patch_embed.backbone.{k}": v for k, v in stem["backbone"].items()})
        shapes.update(_linear("patch_embed.proj", dim, stem["features"], not pre_norm))
        shapes["patch_embed.proj.weight"] += (1, 1)
    else:
        channels = args.get("in_chans", 3)
        shapes["patch_embed.proj.weight"] = (dim, channels, *patch)
        if not pre_norm:
            shapes["patch_embed.proj.bias"] = (dim,)
    if pre_norm:
        shapes.update(_norm("norm_pre", dim))
    for i in range(depth):
        shapes.update(_block(i, args, dim, hidden))
    if final_norm and not use_fc_norm:
        shapes.update(_norm("norm", dim))
    if global_pool == "map":
        shapes.update(_map_head(dim, hidden))
    if final_norm and use_fc_norm:
        shapes.update(_norm("fc_norm", dim))
    if num_classes > 0:
        shapes.update(_linear("head", num_classes, dim))
        if distilled:
            shapes.update(_linear("head_dist", num_classes, dim))
    return shapes
