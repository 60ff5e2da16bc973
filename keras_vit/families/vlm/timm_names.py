"""timm's VLM vision towers keras_vit reads: Qwen3-VL `qwen3_vit_*`, DeepSeek-V4 `deepseek_vit_*`.

Pure data, as `keras_vit.families.eva.timm_names` (whose private `_layout` / `_attention` /
`_qkv_fused` / `_mlp_*` keys these use too): `FAMILY_SPECS`, the class counts and the projector
widths, read from timm 1.0.31's `timm/models/qwen3_vit.py` and `deepseek_vit.py`. Three names per
size: the classifier (`qwen3_vit_88m`: the patch tokens' mean, an affine-free norm, the head),
the classifier keeping the VLM projector before the mean (`*_merge`, `*_align`) and the tower
itself (`*_enc`: the projector's tokens, no `encoder.` key prefix). Private keys for the loader
(`keras_vit.families.vlm.timm_table`):

- `_vlm`: `"qwen3"` or `"deepseek"`; `_prefix`: the key prefix of the tower (`"encoder."` in the
  classifiers); `_rotate_half`: timm's `rotate_half=True` RoPE layout (the loader reorders each
  head's query / key channels to our interleaved pairs);
- `_merger_dims`: `{tag: projector width}`, `""` the default tag's (timm's `out_features`, the
  source LLM's width; `timm_config` picks the name's tag); `_merger_hidden_is_dim`: the
  projector's `fc1` is that wide too (DeepSeek's aligner).

Qwen3-VL: timm's `EvaBlock` (fused qkv with bias, tanh-GELU MLP, LayerNorm 1e-6), a learned
48 x 48 position grid resized bilinearly with `align_corners=True` to every input grid (our
`dynamic_image_size` with that resize), axial RoPE on integer patch coordinates (our `"eva02"`
without reference grid), no class token, no final norm; the merger: LayerNorm, 2 x 2 unshuffle,
`fc1` (4 D), GELU, `fc2`. DeepSeek-V4: RMSNorm 1e-6, fused qkv with bias, a bias-free packed
SwiGLU (gate first), RoPE only, a final RMSNorm; the aligner: 3 x 3 unshuffle of the grid
zero-padded to a multiple of 3, channel-major (the loader permutes `fc1`'s inputs), `fc1` and
`fc2` at the LLM width. The classifiers' norm after the mean has no weights in timm
(`affine=False`); ours keeps its scale at 1 (and bias at 0).
"""

__all__ = ["DEFAULT_CLASSES", "FAMILY_SPECS", "merger_dim"]

# size: (width, depth, heads, mlp_ratio).
_QWEN3 = {
    "88m": (768, 12, 12, 4.0),
    "306m": (1024, 24, 16, 4.0),
    "416m": (1152, 27, 16, 4304 / 1152),
}
_QWEN3_GRID = 48  # timm's pos_embed_grid_size: the learned table's grid
# timm's _SOURCE_CFGS out_features per architecture and tag (the first tag: timm's default).
_QWEN3_DIMS = {
    "88m": {"qwen3_5_0_8b": 1024},
    "306m": {"qwen3_5_2b": 2048, "qwen3_5_4b": 2560, "qwen3_vl_4b": 2560,
             "qwen_drive_1_0_4b": 2560},
    "416m": {"qwen3_8_27b": 5120, "qwen3_8_flash_next": 2560, "qwen3_5_27b": 5120,
             "qwen3_5_9b": 4096, "qwen3_vl_8b": 4096, "qwen3_vl_32b": 5120,
             "qwen3_vl_30b_a3b": 2048, "qwen3_vl_235b_a22b": 4096},
}  # fmt: skip
_DEEPSEEK_DIMS = {"deepseek_v4_1_flash": 5120, "deepseek_v4_flash_vision_exp": 4096}


def _with_default(dims):
    return {"": next(iter(dims.values())), **dims}


def _tower(kind, projector):
    """What every name of a family shares, by its suffix: classifier, with projector, tower."""
    if kind == "enc":
        return {"include_top": False, "pooling": None, "_prefix": "", "_projector": True}
    return {"pooling": "gap", "fc_norm": True, "_prefix": "encoder.", "_projector": projector}


def _qwen3(g):
    hidden, depth, heads, ratio = _QWEN3[g["size"]]
    kind = g["kind"] or ""
    args = {
        "variant": "B/16",  # the numbers below replace the table's
        "hidden_dim": hidden,
        "num_layers": depth,
        "num_heads": heads,
        "approximate_gelu": True,  # timm's GELU(approximate='tanh')
        "class_token": False,
        "final_norm": False,
        "image_size": _QWEN3_GRID * 16,  # the table's grid; any even grid works
        "dynamic_image_size": True,
        "position_embedding_interpolation": "bilinear",
        "position_embedding_antialias": False,
        "position_embedding_align_corners": True,
        "rotary_embedding": "eva02",  # RotaryEmbeddingCat, in_pixels=False, 'ij', no ref grid
        **_tower(kind, kind == "merge"),
        "_vlm": "qwen3",
        "_layout": "eva",
        "_attention": "rope",
        "_qkv_fused": True,
        "_rotate_half": True,
        "_mlp_ratio": ratio,
        "_position_resize": dict(interpolation="bilinear", antialias=False, align_corners=True),
    }
    if args.pop("_projector"):
        args.update(merger_size=2, merger_norm=True)
        args["_merger_dims"] = _with_default(_QWEN3_DIMS[g["size"]])
    return args


def _deepseek(g):
    kind = g["kind"] or ""
    args = {
        "variant": "L/14",  # 1024 wide, 16 heads
        "num_layers": 32,
        "norm": "rmsnorm",
        "mlp": "swiglu",
        "class_token": False,
        "position_embedding": None,
        "image_size": 546,  # timm's input size (39 x 39 patches); any grid works
        "dynamic_image_size": True,
        "rotary_embedding": "eva02",
        **_tower(kind, kind == "align"),
        "_vlm": "deepseek",
        "_layout": "eva",
        "_attention": "rope",
        "_qkv_fused": True,
        "_rotate_half": True,
        "_mlp_packed": True,
        "_mlp_ratio": 2816 / 1024 * 2,  # GluMlp's fc1: gate and up halves
        "_mlp_ratio_packed": True,
    }
    if kind != "enc":
        args["final_and_fc_norm"] = True  # the encoder's RMSNorm, then the classifier's
    if args.pop("_projector"):
        args.update(merger_size=3, merger_padding=True)
        args.update(_merger_dims=_with_default(_DEEPSEEK_DIMS), _merger_hidden_is_dim=True)
    return args


# (name, pattern, example, description, arguments): `timm_names.Family` fields.
FAMILY_SPECS = (
    (
        "qwen3_vit",
        r"qwen3_vit_(?P<size>88m|306m|416m)(?:_(?P<kind>merge|enc))?",
        "qwen3_vit_306m_enc.qwen3_vl_4b",
        "Qwen3-VL / Qwen3.5 vision towers (learned 48 x 48 grid resized bilinearly to any input, "
        "rotate-half RoPE, no class token or final norm; _merge / _enc: the 2 x 2 merger)",
        _qwen3,
    ),
    (
        "deepseek_vit",
        r"deepseek_vit_(?P<size>412m)(?:_(?P<kind>align|enc))?",
        "deepseek_vit_412m_enc.deepseek_v4_1_flash",
        "DeepSeek-V4 vision towers (RMSNorm, bias-free SwiGLU, rotate-half RoPE only, final "
        "RMSNorm; _align / _enc: the padded 3 x 3 aligner)",
        _deepseek,
    ),
)

# Every Qwen3 and DeepSeek checkpoint of timm has no classifier (num_classes=0).
DEFAULT_CLASSES = {
    **{f"qwen3_vit_{size}{kind}": 0 for size in _QWEN3 for kind in ("", "_merge", "_enc")},
    **{f"deepseek_vit_412m{kind}": 0 for kind in ("", "_align", "_enc")},
}


def merger_dim(spec):
    """The projector width of a parsed name (`TimmArchitecture`): its tag's, or the default's.

    Raises:
        ValueError: a tag timm has no projector width for (pass `merger_dim=` instead).
    """
    dims = spec.extras["merger_dims"]
    if spec.tag in dims:
        return dims[spec.tag]
    raise ValueError(
        f"timm's {spec.name!r} has no projector width for the tag {spec.tag!r} (timm: 'Specify "
        f"out_features'). Expected one of {sorted(t for t in dims if t)} or merger_dim=. "
        f"Received: {spec.name}.{spec.tag}"
    )
