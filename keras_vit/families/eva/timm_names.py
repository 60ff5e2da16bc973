"""timm's `eva.py` model names keras_vit reads: EVA-02, EVA, timm's rotary ViTs and DINOv3.

Pure data, as `keras_vit.weights.timm.names` (which turns `FAMILY_SPECS` into its `Family`
entries): each family's name pattern, example, description and the `keras_vit.ViT` arguments it
means, read from timm 1.0.31's `timm/models/eva.py` model functions. Private keys (leading `_`)
say what the checkpoint's layout is, for the loader (`keras_vit.families.eva.timm_table`):

- `_layout`: `"eva"` (timm's `Eva` state dict: `attn.q_bias` / `q_proj`, `gamma_1`, ...);
- `_qkv_fused`: one `attn.qkv` matrix (with `q_bias`, `v_bias`) or `q_proj`, `k_proj`, `v_proj`;
- `_mlp_packed`: a SwiGLU whose gate and up projections are one `mlp.fc1` (timm's `GluMlp`,
  gate first) rather than `mlp.fc1_g`, `mlp.fc1_x`;
- `_mlp_ratio`: timm's `mlp_ratio`: the MLP width is `int(hidden_dim * ratio)` (also for a
  `hidden_dim` override);
- `_mlp_align`: timm's `swiglu_align_to`: the SwiGLU width rounded up to a multiple of it;
- `_qkv_bias`: whether the checkpoint has query and value biases;
- `_attention`: `"rope"` for timm's `AttentionRope` (RoPE-ViT: one `attn.qkv` with its full
  `(3D,)` bias, so a key bias too), else `EvaAttention`.

Every `EvaAttention` block here has no key bias (a zero `k_bias` buffer, or a `k_proj` without
bias), so `key_bias=False`.
"""

__all__ = ["DEFAULT_CLASSES", "FAMILY_SPECS", "UNSUPPORTED"]

_EVA_SIZES = {"tiny": "Ti", "small": "S", "medium": "M", "base": "B", "large": "L"}
_EVA02_MLP_RATIO = 4 * 2 / 3  # timm: mlp_ratio=4 * 2 / 3 (SwiGLU at about the MLP's cost)
# EVA-02's RoPE: positions rescaled to the 16 x 16 pre-training grid (224 / 14).
_EVA02_ROPE = dict(rotary_embedding="eva02", rotary_reference_grid=(16, 16))


def _eva_common():
    return dict(
        approximate_gelu=False,  # timm's nn.GELU
        key_bias=False,
        _layout="eva",
    )


def _eva02(g):
    size = g["size"]
    args = {
        **_eva_common(),
        "variant": f"{_EVA_SIZES[size]}/14",
        "mlp": "swiglu",
        "pooling": "gap",
        "class_token": True,
        "fc_norm": True,
        **_EVA02_ROPE,
        "_mlp_ratio": _EVA02_MLP_RATIO,
    }
    if size in ("tiny", "small"):  # timm: fused qkv, packed SwiGLU (GluMlp) without norm
        args.update(_qkv_fused=True, _mlp_packed=True)
    else:  # qkv_fused=False, scale_mlp=True: separate projections, SwiGLU with its sub-LN
        args.update(_qkv_fused=False, _mlp_packed=False, mlp_inner_norm=True)
    return args


def _eva02_clip(g):
    return {
        **_eva_common(),
        "variant": f"{_EVA_SIZES[g['size']]}/{g['patch']}",
        "mlp": "swiglu",
        "mlp_inner_norm": True,
        "attention_inner_norm": True,  # scale_attn_inner=True
        **_EVA02_ROPE,
        "_qkv_fused": False,
        "_mlp_packed": False,
        "_mlp_ratio": _EVA02_MLP_RATIO,
    }


def _eva_giant(g):
    args = {**_eva_common(), "variant": "g/14", "_qkv_fused": True, "_mlp_ratio": 6144 / 1408}
    if not g.get("clip"):
        args.update(pooling="gap", class_token=True, fc_norm=True)
    return args


def _eva02_enormous(g):
    """EVA-02-CLIP-E: EvaBlockPostNorm (residual post-norm), fused qkv + q/v biases, GELU MLP."""
    del g
    return {
        **_eva_common(),
        "variant": "g/14",
        "hidden_dim": 1792,
        "num_layers": 64,
        "num_heads": 16,
        "block_kind": "post",
        "_qkv_fused": True,
        "_mlp_ratio": 15360 / 1792,
    }


def _rope_registers(g):
    return {
        **_eva_common(),
        "variant": f"{_EVA_SIZES.get(g['size'], g['size'])}/16",
        "pooling": "gap",
        "class_token": False,
        "fc_norm": True,
        "num_register_tokens": int(g["reg"]),
        "position_embedding": None,  # use_abs_pos_emb=False
        "layer_scale_init_value": 1e-5,
        "rotary_embedding": "eva02",
        "rotary_reference_grid": (16, 16),
        "_qkv_fused": True,
        "_qkv_bias": g["size"] != "mediumd",
        "_mlp_ratio": 4.0,
    }


def _rope_vit(g):
    """RoPE-ViT (naver-ai/rope-vit): DeiT-III-like blocks with timm's AttentionRope."""
    mixed = bool(g["mixed"])
    args = {
        "variant": f"{_EVA_SIZES[g['size']]}/16",
        "approximate_gelu": False,
        "layer_scale_init_value": 1e-5,
        "pooling": "token",
        "class_token": True,
        "position_embedding": "learned" if g["ape"] else None,
        "rotary_embedding": "mixed" if mixed else "axial",
        "rotary_temperature": 10.0 if mixed else 100.0,
        "_layout": "eva",
        "_attention": "rope",
        "_qkv_fused": True,
        "_mlp_ratio": 4.0,
    }
    if g["ape"]:  # no_embed_class=True: the table covers the patches only
        args["prefix_position_embedding"] = False
    return args


# DINOv3 sizes (timm's vit_*_patch16_dinov3*): our size code and what differs from its row.
_DINOV3_SIZES = {
    "tiny": ("Ti", {}),
    "small": ("S", {}),
    "small_plus": ("S", {}),
    "base": ("B", {}),
    "large": ("L", {}),
    "huge_plus": ("H", dict(num_heads=20)),
    "7b": ("H", dict(num_layers=40, hidden_dim=4096, num_heads=32)),
}
# SwiGLU MLPs (unpacked fc1_g / fc1_x) and timm's swiglu_align_to; 7b: mlp_ratio=2.
_DINOV3_SWIGLU = {"small_plus": 8, "huge_plus": 8, "7b": 64}


def _dinov3(g):
    size = g["size"]
    code, overrides = _DINOV3_SIZES[size]
    args = {
        **_eva_common(),
        "variant": f"{code}/16",
        **overrides,
        "image_size": 256,  # timm's pretrained input size (any size works: no pos_embed)
        "pooling": "gap",  # timm's Eva default global_pool='avg' (upstream: the class token)
        "class_token": True,
        "num_register_tokens": 4,
        "position_embedding": None,  # use_abs_pos_emb=False
        "layer_scale_init_value": 1e-5,
        "layer_norm_epsilon": 1e-5,
        "rotary_embedding": "dinov3",
        "rotary_temperature": 100.0,
        "_qkv_fused": True,
        "_qkv_bias": bool(g["qkvb"]),
        "_mlp_ratio": 2.0 if size == "7b" else 4.0,
    }
    if size in _DINOV3_SWIGLU:
        args.update(mlp="swiglu", _mlp_packed=False, _mlp_align=_DINOV3_SWIGLU[size])
    return args


# (name, pattern, example, description, arguments): `timm_names.Family` fields.
FAMILY_SPECS = (
    (
        "eva02",
        r"eva02_(?P<size>tiny|small|base|large)_patch14_(?P<res>224|336|448)",
        "eva02_base_patch14_448.mim_in22k_ft_in22k_in1k",
        "EVA-02 (2-D RoPE, SwiGLU, q/v biases, average pooling)",
        _eva02,
    ),
    (
        "eva02_clip",
        r"eva02_(?P<size>base|large)_patch(?P<patch>14|16)_clip_(?P<res>224|336)",
        "eva02_base_patch16_clip_224.merged2b",
        "EVA-02 CLIP image towers (EVA-02 with an attention inner norm, class-token head)",
        _eva02_clip,
    ),
    (
        "eva",
        r"eva_giant_patch14_(?P<clip>clip_)?(?P<res>\d+)",
        "eva_giant_patch14_336.clip_ft_in1k",
        "EVA giant and its CLIP tower (q/v biases, GELU MLP)",
        _eva_giant,
    ),
    (
        "vit_rope_registers",
        r"vit_(?P<size>medium|mediumd|betwixt|base)_patch16_rope_reg(?P<reg>\d+)_gap_(?P<res>\d+)",
        "vit_betwixt_patch16_rope_reg4_gap_256.sbb_in1k",
        "timm's SBB ViTs with EVA-02's RoPE and registers (no absolute position embedding)",
        _rope_registers,
    ),
    (
        "eva02_enormous",
        r"eva02_enormous_patch14_clip_(?P<res>224)",
        "eva02_enormous_patch14_clip_224.laion2b",
        "EVA-02-CLIP-E image tower (residual post-norm blocks, GELU MLP, class-token head)",
        _eva02_enormous,
    ),
    (
        "rope_vit",
        r"vit_(?P<size>small|base|large)_patch16_rope(?P<mixed>_mixed)?(?P<ape>_ape)?_(?P<res>224)",
        "vit_base_patch16_rope_mixed_ape_224.naver_in1k",
        "RoPE-ViT: axial RoPE ('xy' grid, temperature 100) or mixed RoPE (learned frequencies "
        "per block and head), with or without an absolute position embedding",
        _rope_vit,
    ),
    (
        "dinov3",
        r"vit_(?P<size>tiny|small|small_plus|base|large|huge_plus|7b)_patch16_dinov3"
        r"(?P<qkvb>_qkvb)?",
        "vit_base_patch16_dinov3.lvd1689m",
        "DINOv3 (DINOv3's RoPE, 4 registers, LayerScale, SwiGLU for small_plus / huge_plus / "
        "7b, q/v biases in *_qkvb; no position embedding; average pooling as timm's default)",
        _dinov3,
    ),
)

# Class counts of timm's default pretrained tags (where not 1000; 0: no head).
DEFAULT_CLASSES = {
    "eva02_tiny_patch14_224": 0,
    "eva02_small_patch14_224": 0,
    "eva02_base_patch14_224": 0,
    "eva02_large_patch14_224": 0,
    "eva02_base_patch16_clip_224": 512,
    "eva02_large_patch14_clip_224": 768,
    "eva02_large_patch14_clip_336": 768,
    "eva_giant_patch14_clip_224": 1024,
    "eva02_enormous_patch14_clip_224": 1024,
}

# Names of eva.py keras_vit refuses, and what they need (checked before the families).
UNSUPPORTED = ()
