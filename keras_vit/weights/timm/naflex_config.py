"""timm `NaFlexVit`s built from a `NaFlexVitCfg` (no registered name) -> keras_vit NaFlex models.

`from_timm` reads architectures from timm's model names. timm's `NaFlexVit` also takes a
`NaFlexVitCfg` directly (`NaFlexVit(cfg)`, e.g. `pos_embed='rope'` with `rope_type='axial'`,
`'mixed'` or `'dinov3'`, which no registered `naflexvit_*` name uses); `naflexvit_config`
turns such a config (the dataclass, any object with its fields, or a dict) into our
`ViTConfig`, and `from_timm_naflexvit` builds the model and loads the state dict. timm is never
imported. Fields keras_vit does not implement are refused with a `ValueError` naming them;
timm's train-time-only settings (dropout and patch-dropout rates, RoPE coordinate
augmentations, initialisation schemes) do not change eval outputs and are not carried over.

timm's RoPE blocks are `EvaBlock`s (`gamma_1` / `gamma_2` LayerScale, `AttentionRope`'s fused
`qkv`): the `Eva` name table of `keras_vit.families.eva.timm_table`. timm's `rope_type='axial'` is
our `"eva02"` (`rope_grid_indexing='ij'`) or `"axial"` (`'xy'`); `'mixed'` is our `"mixed"`
(timm's `'ij'` multiplies the rows by `rope.freqs[0]`, ours the columns: the two rows are
swapped on load); `rope_rotate_half=True` is read by reordering each query and key head's
channels (as the DINOv3 loader does).
"""

import dataclasses

import numpy as np

from keras_vit.models.arguments import (
    check_size_arguments,
    head_arguments,
    unknown_keys_message,
)
from keras_vit.models.config import ViTConfig
from keras_vit.models.encoder import build_model
from keras_vit.weights.state_dict import read_state_dict
from keras_vit.weights.timm.names import TimmArchitecture, parse_timm_name
from keras_vit.weights.timm.reader import _load

# NaFlexVitCfg fields (timm 1.0.31) that change eval outputs and have no keras_vit
# counterpart here, with timm's default (anything else is refused).
_UNSUPPORTED = {
    "scale_mlp_norm": False,
    "num_kv_heads": None,
    "proj_bias": True,
    "scale_attn_inner_norm": False,
    "pos_embed_use_grid_sample": False,
    "rope_mrope_section": None,
    "dynamic_img_pad": False,
    "patchify_channels_last": True,
    "pool_include_prefix": False,
    "attn_pool_num_heads": None,
    "attn_pool_mlp_ratio": None,
    "embed_proj_type": "linear",
    "input_norm_layer": None,
    "embed_norm_layer": None,
    "norm_layer": None,
    "block_fn": None,
    "mlp_layer": None,
    "attn_layer": None,
    "attn_gated": False,
    "swiglu_mlp": False,
    "qkv_fused": True,
    "attn_only_layer_scale": False,
    "enable_patch_interpolator": False,
}
_POOLING = {"map": "map", "avg": "gap", "token": "token", "": None}
_POSITION = {"learned": "learned", "factorized": "factorized", "none": None}
_ACTIVATIONS = {None: False, "gelu": False, "gelu_tanh": True}


# Every NaFlexVitCfg field of timm 1.0.31: a dict naming another key is refused (a misspelled
# field would otherwise silently keep timm's default).
FIELDS = (
    "patch_size", "embed_dim", "depth", "num_heads", "mlp_ratio", "scale_mlp_norm",
    "num_kv_heads", "qkv_bias", "qk_norm", "proj_bias", "attn_drop_rate",
    "scale_attn_inner_norm", "use_key_only_attn_mask", "init_values", "drop_rate",
    "pos_drop_rate", "patch_drop_rate", "proj_drop_rate", "drop_path_rate", "class_token",
    "reg_tokens", "pos_embed", "pos_embed_grid_size", "pos_embed_interp_mode",
    "pos_embed_ar_preserving", "pos_embed_antialias", "pos_embed_align_corners",
    "pos_embed_use_grid_sample", "rope_type", "rope_temperature", "rope_ref_feat_shape",
    "rope_grid_offset", "rope_grid_indexing", "rope_rotate_half", "rope_shift_coords",
    "rope_jitter_coords", "rope_rescale_coords", "rope_mrope_section", "dynamic_img_pad",
    "patchify_channels_last", "pre_norm", "final_norm", "fc_norm", "global_pool",
    "pool_include_prefix", "attn_pool_num_heads", "attn_pool_mlp_ratio", "weight_init",
    "fix_init", "embed_proj_type", "input_norm_layer", "embed_norm_layer", "norm_layer",
    "act_layer", "block_fn", "mlp_layer", "attn_layer", "attn_type", "attn_gated",
    "swiglu_mlp", "swiglu_align_to", "qkv_fused", "attn_only_layer_scale",
    "enable_patch_interpolator",
)  # fmt: skip


def _fields(cfg):
    if isinstance(cfg, dict):
        unknown = [key for key in cfg if key not in FIELDS]
        if unknown:
            raise ValueError(
                unknown_keys_message(unknown, FIELDS, "The NaFlexVitCfg dict")
                + " (the fields of timm's NaFlexVitCfg)."
            )
        return dict(cfg)
    if dataclasses.is_dataclass(cfg):
        return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    raise ValueError(
        "naflexvit_config needs timm's NaFlexVitCfg (or a dict of its fields). "
        f"Received: {type(cfg).__name__}"
    )


def _pair(value):
    return (value, value) if isinstance(value, int) else tuple(value)


def _rope(get, problems):
    """Our rotary arguments and the loader's layout extras of timm's rope_* fields."""
    rope_type = get("rope_type", "") or "none"
    indexing = get("rope_grid_indexing", "ij")
    half = bool(get("rope_rotate_half", False))
    if rope_type == "none":
        return {}, {}
    args = {"rotary_temperature": float(get("rope_temperature", 10000.0))}
    if rope_type == "axial":
        args["rotary_embedding"] = "eva02" if indexing == "ij" else "axial"
        if get("rope_ref_feat_shape") is not None:
            args["rotary_reference_grid"] = _pair(get("rope_ref_feat_shape"))
    elif rope_type == "dinov3":
        args["rotary_embedding"] = "dinov3"
        if indexing != "ij":
            problems.append(f"rope_type='dinov3' with rope_grid_indexing={indexing!r}")
    elif rope_type == "mixed":
        args["rotary_embedding"] = "mixed"
    else:
        problems.append(f"rope_type={rope_type!r}")
    if get("rope_grid_offset", 0.0) and rope_type != "mixed":  # (timm's mixed ignores it)
        args["rotary_grid_offset"] = float(get("rope_grid_offset"))
    return args, {"rope_half": half, "rope_swap": rope_type == "mixed" and indexing == "ij"}


def naflexvit_config(cfg, *, num_classes=1000, **kwargs):
    """The NaFlex `ViTConfig` of timm's `NaFlexVit(cfg)` (`cfg` a `NaFlexVitCfg` or a dict).

    Args:
        cfg: timm's `NaFlexVitCfg`, or a dict of its fields (missing fields: timm's defaults).
        num_classes: int. The head's class count; 0 for none. Defaults to 1000 (timm's).
        **kwargs: other `keras_vit.ViT` arguments (they override the config's).

    Returns:
        A `keras_vit.models.config.ViTConfig` with `naflex=True`.

    Raises:
        ValueError: a field keras_vit does not implement (all of them named).

    Example:

    >>> config = naflexvit_config(dict(embed_dim=32, depth=1, num_heads=2, patch_size=4,
    ...                                pos_embed="none", rope_type="axial",
    ...                                pos_embed_grid_size=(4, 4)), num_classes=0)
    >>> config.rotary_embedding, config.image_size, config.pooling
    ('eva02', (16, 16), 'map')
    """
    return _architecture(cfg, num_classes, kwargs)[0]


def _architecture(cfg, num_classes, kwargs):
    check_size_arguments(num_classes=num_classes, patch_size=kwargs.get("patch_size"))
    fields = _fields(cfg)

    def get(name, default=None):
        return fields.get(name, default)

    problems = [
        f"{name}={get(name)!r}"
        for name, default in _UNSUPPORTED.items()
        if get(name, default) != default
    ]
    if get("attn_type", "standard") not in ("standard", "rope"):
        problems.append(f"attn_type={get('attn_type')!r}")
    pooling = get("global_pool", "map")
    position = get("pos_embed", "learned") or "none"
    activation = get("act_layer")
    for what, value, table in (
        ("global_pool", pooling, _POOLING),
        ("pos_embed", position, _POSITION),
        ("act_layer", activation, _ACTIVATIONS),
    ):
        if value not in table:
            problems.append(f"{what}={value!r}")
    rotary, layout = _rope(get, problems)
    qkv_bias = bool(get("qkv_bias", True))
    if rotary and (not qkv_bias or get("qk_norm", False)):
        problems.append("RoPE blocks with qkv_bias=False or qk_norm=True")
    if problems:
        raise ValueError(
            "keras_vit does not implement these NaFlexVitCfg settings (timm's NaFlexVit "
            f"options without a keras_vit counterpart): {', '.join(problems)}"
        )
    patch = _pair(get("patch_size", 16))
    grid = _pair(get("pos_embed_grid_size") or (16, 16))
    hidden = int(get("embed_dim", 768))
    fc_norm = get("fc_norm")
    fc_norm = pooling == "avg" if fc_norm is None else bool(fc_norm)
    final = bool(get("final_norm", True))
    classes, include_top = head_arguments(num_classes)
    args = dict(
        naflex=True,
        patch_size=patch,
        image_size=(grid[0] * patch[0], grid[1] * patch[1]),
        hidden_dim=hidden,
        num_layers=int(get("depth", 12)),
        num_heads=int(get("num_heads", 12)),
        mlp_dim=int(hidden * float(get("mlp_ratio", 4.0))),
        qk_norm=bool(get("qk_norm", False)),
        layer_scale_init_value=get("init_values"),
        class_token=bool(get("class_token", False)),
        num_register_tokens=int(get("reg_tokens", 0)),
        position_embedding=_POSITION[position],
        pooling=_POOLING[pooling],
        fc_norm=final and fc_norm,
        final_norm=final and not fc_norm,
        pre_norm=bool(get("pre_norm", False)),
        approximate_gelu=_ACTIVATIONS[activation],
        num_classes=classes,
        include_top=include_top,
        **rotary,
    )
    if _POSITION[position] is not None:
        args.update(
            position_embedding_interpolation=get("pos_embed_interp_mode", "bicubic"),
            position_embedding_antialias=bool(get("pos_embed_antialias", True)),
            position_embedding_align_corners=bool(get("pos_embed_align_corners", False)),
            position_embedding_aspect_preserving=bool(get("pos_embed_ar_preserving", False)),
        )
    args.update(kwargs)
    config = ViTConfig.from_variant(f"B/{patch[0]}", **args)
    extras = {"layout": "eva", "attention": "rope", **layout} if rotary else {}
    base = parse_timm_name("naflexvit_base_patch16_gap")  # (the family: NaFlexVit)
    spec = TimmArchitecture(
        name=config.name or "naflexvit",
        tag="",
        family=base.family,
        arguments={},
        image_size=config.image_size[0],
        num_classes=num_classes,
        qkv_bias=qkv_bias,
        patch_bias=True,
        extras=extras,
    )
    return config, spec


def from_timm_naflexvit(cfg, checkpoint=None, *, num_classes=None, **kwargs):
    """Builds the keras_vit NaFlex model of timm's `NaFlexVit(cfg)` and loads its state dict.

    For NaFlex ViTs timm builds from a `NaFlexVitCfg` without a registered name (rotary
    `pos_embed='rope'` models with `rope_type` `'axial'`, `'mixed'` or `'dinov3'`, any size);
    registered `naflexvit_*` names go through `keras_vit.from_timm`. Loading is strict, as
    `from_timm`'s: one `ValueError` lists every missing, unexpected or mis-shaped array.

    Args:
        cfg: timm's `NaFlexVitCfg`, or a dict of its fields (`naflexvit_config`).
        checkpoint: None (random initialisation), a `.safetensors` / `.pth` path, or a dict
            of arrays or tensors (timm's `model.state_dict()`).
        num_classes: optional int. Defaults to the checkpoint head's class count (0: none),
            or 1000 without a checkpoint.
        **kwargs: other `keras_vit.ViT` arguments (`name`, dropout rates, ...).

    Returns:
        A `VisionTransformer` taking the NaFlex dict (`patches`, `patch_coord`,
        `patch_valid`), equal to timm's `NaFlexVit` in eval mode.

    Example:

    >>> model = from_timm_naflexvit(dict(embed_dim=32, depth=1, num_heads=2, patch_size=4,
    ...                                  pos_embed="none", rope_type="mixed",
    ...                                  rope_grid_indexing="xy", global_pool="avg"),
    ...                             num_classes=3)
    >>> model.rotary_embedding.name, model.output_shape
    ('rotary_embedding', (None, 3))
    """
    check_size_arguments(num_classes=num_classes, patch_size=kwargs.get("patch_size"))
    arrays = None if checkpoint is None else read_state_dict(checkpoint)
    if num_classes is None:
        head = None if arrays is None else arrays.get("head.weight")
        num_classes = 1000 if arrays is None else (0 if head is None else int(head.shape[0]))
    config, spec = _architecture(cfg, num_classes, kwargs)
    model = build_model(config)
    if arrays is not None:
        arrays = _timm_layout(arrays, config, spec)
        _load(model, spec, arrays, checkpoint, config)
    return model


def _timm_layout(arrays, config, spec):
    """The state dict with timm's RoPE layouts turned into ours (see the module docstring)."""
    arrays = dict(arrays)
    if spec.extras.get("rope_swap") and "rope.freqs" in arrays:
        arrays["rope.freqs"] = np.asarray(arrays["rope.freqs"])[::-1].copy()
    if spec.extras.get("rope_half"):
        for i in range(config.num_layers):
            for suffix in ("weight", "bias"):
                key = f"blocks.{i}.attn.qkv.{suffix}"
                if key in arrays:
                    arrays[key] = _interleave_qk(np.asarray(arrays[key]), config)
    return arrays


def _interleave_qk(qkv, config):
    """timm's fused q/k/v rows, each query and key head's channels `(0, d/2, 1, d/2 + 1, ...)`."""
    heads, dim = config.num_heads, config.hidden_dim // config.num_heads
    rows = qkv.reshape(3, heads, dim, *qkv.shape[1:])
    order = np.arange(dim).reshape(2, dim // 2).T.reshape(-1)
    rows = np.concatenate([rows[:2][:, :, order], rows[2:]], axis=0)
    return rows.reshape(qkv.shape)


__all__ = ["from_timm_naflexvit", "naflexvit_config"]
