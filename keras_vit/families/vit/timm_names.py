"""timm's `VisionTransformer` families keras_vit reads: ViT, DeiT, DINOv2, CLIP, SigLIP, BEiT,
relpos ViTs, hybrids, ... (the core of timm's vision_transformer*.py): pure data.

`FAMILY_SPECS` rows are `keras_vit.weights.timm.records.Family` fields `(name, pattern, example,
description, arguments)`; the `vit` family registers them first (`keras_vit.families.vit`), so
they are matched before every other family's.
"""

from keras_vit.weights.timm.sizes import HYBRIDS, SIZE_CODES, TIMM_RESNET
from keras_vit.weights.timm.sizes import sizes as _sizes

__all__ = ["DEFAULT_CLASSES", "FAMILY_SPECS", "HEADLESS", "UNSUPPORTED"]

# Class counts of timm's default pretrained tag where it is not 1000 (0: no head). Used when no
# checkpoint is given, as `timm.create_model(name)` does.
DEFAULT_CLASSES = {
    "vit_small_patch8_224": 0,
    "vit_large_patch32_224": 0,
    "vit_huge_patch14_224": 0,
    "vit_base_patch16_224_miil": 11221,
    "vit_medium_patch16_gap_240": 11821,
    "vit_huge_patch14_gap_224": 0,
    "vit_huge_patch16_gap_448": 0,
    "vit_giant_patch16_gap_224": 0,
    "vit_base_r50_s16_224": 0,
    "vit_xsmall_patch16_clip_224": 512,
    "vit_medium_patch32_clip_224": 512,
    "vit_medium_patch16_clip_224": 512,
    "vit_betwixt_patch32_clip_224": 512,
    "vit_base_patch32_clip_256": 512,
    "vit_base_patch16_plus_clip_240": 640,
    "vit_giant_patch14_clip_224": 1024,
    "vit_gigantic_patch14_clip_224": 1280,
    "vit_gigantic_patch14_clip_378": 1280,
    "vit_huge_patch14_clip_378": 1024,
    "vit_base_patch32_clip_quickgelu_224": 512,
    "vit_base_patch16_clip_quickgelu_224": 512,
    "vit_large_patch14_clip_quickgelu_224": 768,
    "vit_large_patch14_clip_quickgelu_336": 768,
    "vit_huge_patch14_clip_quickgelu_224": 1024,
    "vit_huge_patch14_clip_quickgelu_378": 1024,
    "naflexvit_base_patch16_siglip": 0,
    "naflexvit_so400m_patch16_siglip": 0,
    "vit_gigantic_patch14_clip_quickgelu_224": 1280,
}
# Families whose timm models have no classifier by default.
HEADLESS = ("dinov2", "dinov2_registers", "siglip", "siglip_gap")

# SigLIP towers with tanh GELU in timm (SigLIP 2 checkpoints): (size, patch, resolution or None).
_SIGLIP_TANH = {
    ("base", 32, None),
    ("large", 16, 512),
    ("so400m", 16, None),
    ("giantopt", 16, None),
}


def _vit(g):
    return _sizes(g["size"], g["patch"])


def _eva_large(g):
    # timm's VisionTransformer with global_pool='avg': fc_norm after the pooling, no final norm.
    return {**_sizes("large", 14), "pooling": "gap", "class_token": True, "fc_norm": True}


def _miil(g):
    return {**_sizes("base", 16), "_qkv_bias": False}


def _rpn(g):
    """`vit_base_patch16_rpn_224`: timm's ResPostBlock (residual post-norm, no LayerScale)."""
    return {
        **_sizes("base", 16),
        "block_kind": "post",
        "class_token": False,
        "pooling": "gap",
        "fc_norm": True,
        "_qkv_bias": False,
    }


def _plus(g):
    return {**_sizes("base_plus", g["patch"]), "layer_scale_init_value": 1e-5}


def _deep_small(g):
    return {**_sizes("small", 16), "num_layers": 36, "layer_scale_init_value": 1e-5}


def _distilled(g):
    return {**_sizes(g["size"], g["patch"]), "distillation_token": True}


def _parallel(g):
    return {
        **_sizes(g["size"], g["patch"]),
        "num_layers": 18,
        "block_kind": "parallel",
        "num_parallel": 2,
        "layer_scale_init_value": 1e-5,
    }


def _deit3(g):
    return {
        **_sizes(g["size"], g["patch"]),
        "layer_scale_init_value": 1e-6,
        "prefix_position_embedding": False,
    }


def _gap(g):
    args = {**_sizes(g["size"], g["patch"]), "pooling": "gap", "class_token": False}
    if g["size"] == "base":
        args["num_heads"] = 16  # timm's vit_base_patch16_gap_224
    if g["size"] in ("medium", "betwixt"):
        args.update(_qkv_bias=False, layer_scale_init_value=1e-6)
    return args


def _registers(g):
    size = g["size"]
    args = {
        **_sizes(size, g["patch"]),
        "pooling": "gap" if g["pool"] == "gap" else "map",
        "class_token": False,
        "num_register_tokens": int(g["reg"]),
    }
    if size not in ("so150m", "so150m2"):
        args["prefix_position_embedding"] = False
    if size != "so150m":
        args["fc_norm"] = True  # timm: final norm after pooling (fc_norm), none before
    if size not in ("base", "so150m"):
        args["layer_scale_init_value"] = 1e-5
    if size == "so150m2":
        args["_qkv_bias"] = False
    return args


def _dinov2(g):
    args = {**_sizes(g["size"], "14"), "layer_scale_init_value": 1e-5, "image_size": 518}
    if g["size"] == "giant":  # ViT-g/14 of DINOv2: width 1536, 24 heads, SwiGLUPacked MLP
        args.update(
            hidden_dim=1536,
            num_heads=24,
            mlp="swiglu",
            _mlp_ratio=2.66667 * 2,  # timm: int(1536 * 5.33334) = 8192 = 2 x 4096
            _mlp_ratio_packed=True,
        )
    if g.get("reg"):
        args.update(num_register_tokens=int(g["reg"]), prefix_position_embedding=False)
    return args


def _clip(g):
    size = "base_plus" if g.get("plus") else g["size"]
    args = {
        **_sizes(size, g["patch"]),
        "pre_norm": True,
        "layer_norm_epsilon": 1e-5,
        "_patch_bias": False,
    }
    if g.get("quick"):
        args["activation"] = "quick_gelu"
    return args


def _siglip(g):
    args = {**_sizes(g["size"], g["patch"]), "class_token": False}
    args["pooling"] = "gap" if g.get("gap") else "map"
    keys = {(g["size"], int(g["patch"]), None), (g["size"], int(g["patch"]), int(g["res"]))}
    if keys & _SIGLIP_TANH:
        args["approximate_gelu"] = True  # timm's GELUTanh
    return args


def _beit(g):
    v1_base = not g["v2"] and g["size"] == "base"
    return {
        **_sizes(g["size"], g["patch"]),
        "position_embedding": None,  # timm's use_abs_pos_emb=False
        "relative_position_bias": "block",
        "key_bias": False,  # q_bias, v_bias
        "layer_scale_init_value": 0.1 if v1_base else 1e-5,
        "pooling": "gap",
        "class_token": True,
        "fc_norm": True,
    }


def _relpos(g):
    size = "base_plus" if g["plus"] else g["size"]
    post = bool(g.get("rpn"))  # ResPostRelPosBlock: no LayerScale (init_values sets norm1/2)
    args = {
        **_sizes(size, g["patch"]),
        "position_embedding": None,
        "relative_position_bias": "mlp_shared" if g["shared"] else "mlp",
        "layer_scale_init_value": None if post else 1e-6,  # timm's default init_values
        "pooling": "token" if g["cls"] == "_cls" else "gap",
        "class_token": bool(g["cls"]),
        "fc_norm": not (g["shared"] or g["plus"] or g["cls"] == "_cls" or post),
    }
    if post:
        args["block_kind"] = "post"
    if not g["plus"]:
        args["_qkv_bias"] = False
    if g["shared"]:
        args["relative_position_mlp_dim"] = {"small": 384, "medium": 512}[g["size"]]
    elif g["cls"] == "_cls" and g["size"] == "medium":
        args["relative_position_mlp_dim"] = 256
    return args


def _hybrid(g):
    return {"variant": HYBRIDS[g["arch"]], **TIMM_RESNET, "approximate_gelu": False}


_SIZE = "|".join(SIZE_CODES)
FAMILY_SPECS = (
    (
        "vit",
        r"vit_(?P<size>tiny|small|base|large|huge|giant|gigantic)_patch(?P<patch>\d+)_(?P<res>\d+)",
        "vit_base_patch16_224.augreg2_in21k_ft_in1k",
        "original and AugReg ViT, any size, patch and resolution",
        _vit,
    ),
    (
        "eva_large",
        r"eva_large_patch14_(?P<res>196|336)",
        "eva_large_patch14_336.in22k_ft_in22k_in1k",
        "EVA-01 large (MIM-pretrained ViT-L/14, average of the patch tokens with fc_norm)",
        _eva_large,
    ),
    (
        "vit_miil",
        r"vit_base_patch16_(?P<res>224)_miil",
        "vit_base_patch16_224_miil.in21k_ft_in1k",
        "ViT-B/16 of Alibaba MIIL (no q/k/v biases: ours stay zero)",
        _miil,
    ),
    (
        "vit_rpn",
        r"vit_base_patch16_rpn_(?P<res>224)",
        "vit_base_patch16_rpn_224.sw_in1k",
        "ViT-B/16 with residual post-norm blocks (timm's ResPostBlock; no class token, average "
        "pooling + fc_norm, no q/k/v biases)",
        _rpn,
    ),
    (
        "vit_plus",
        r"vit_base_patch(?P<patch>16|32)_plus_(?P<res>\d+)",
        "vit_base_patch16_plus_240",
        "ViT-B+ (width 896, LayerScale)",
        _plus,
    ),
    (
        "vit_36x1",
        r"vit_small_patch16_36x1_(?P<res>\d+)",
        "vit_small_patch16_36x1_224",
        "ViT-S with 36 blocks and LayerScale",
        _deep_small,
    ),
    (
        "vit_18x2",
        r"vit_(?P<size>small|base)_patch(?P<patch>16)_18x2_(?P<res>\d+)",
        "vit_base_patch16_18x2_224",
        "ViTs of 18 blocks with 2 parallel attention and MLP branches (ParallelThingsBlock)",
        _parallel,
    ),
    (
        "deit",
        r"deit_(?P<size>tiny|small|base)_patch(?P<patch>16)_(?P<res>\d+)",
        "deit_small_patch16_224.fb_in1k",
        "DeiT",
        _vit,
    ),
    (
        "deit_distilled",
        r"deit_(?P<size>tiny|small|base)_distilled_patch(?P<patch>16)_(?P<res>\d+)",
        "deit_base_distilled_patch16_384.fb_in1k",
        "distilled DeiT (distillation token and head)",
        _distilled,
    ),
    (
        "deit3",
        r"deit3_(?P<size>small|medium|base|large|huge)_patch(?P<patch>\d+)_(?P<res>\d+)",
        "deit3_base_patch16_224.fb_in22k_ft_in1k",
        "DeiT III (LayerScale, position embedding on patch tokens only)",
        _deit3,
    ),
    (
        "vit_gap",
        r"vit_(?P<size>medium|betwixt|base|huge|giant)_patch(?P<patch>\d+)_gap_(?P<res>\d+)",
        "vit_medium_patch16_gap_256.sw_in12k_ft_in1k",
        "global-average-pooled ViT without class token (final norm before pooling)",
        _gap,
    ),
    (
        "vit_registers",
        r"vit_(?P<size>wee|little|medium|mediumd|betwixt|base|so150m|so150m2)_patch(?P<patch>16)"
        r"_reg(?P<reg>\d+)_(?P<pool>gap|map)_(?P<res>\d+)",
        "vit_betwixt_patch16_reg4_gap_256.sbb_in12k_ft_in1k",
        "ViTs with register tokens and fc_norm (timm's sbb / so150m models)",
        _registers,
    ),
    (
        "dinov2",
        r"vit_(?P<size>small|base|large|giant)_patch14_dinov2",
        "vit_base_patch14_dinov2.lvd142m",
        "DINOv2, 518 px, LayerScale (giant: SwiGLU MLP)",
        _dinov2,
    ),
    (
        "dinov2_registers",
        r"vit_(?P<size>small|base|large|giant)_patch14_reg(?P<reg>4)_dinov2",
        "vit_small_patch14_reg4_dinov2.lvd142m",
        "DINOv2 with 4 register tokens",
        _dinov2,
    ),
    (
        "clip",
        rf"vit_(?P<size>{_SIZE})_patch(?P<patch>\d+)(?P<plus>_plus)?_clip_(?P<res>\d+)",
        "vit_base_patch16_clip_224.openai",
        "CLIP / OpenCLIP image towers (pre-norm, LayerNorm epsilon 1e-5)",
        _clip,
    ),
    (
        "clip_quickgelu",
        rf"vit_(?P<size>{_SIZE})_patch(?P<patch>\d+)(?P<plus>_plus)?_clip_(?P<quick>quickgelu_)"
        r"(?P<res>\d+)",
        "vit_base_patch32_clip_quickgelu_224.openai",
        "CLIP towers with QuickGELU",
        _clip,
    ),
    (
        "siglip_gap",
        r"vit_(?P<size>base|large|so400m|giantopt)_patch(?P<patch>\d+)_siglip_(?P<gap>gap_)"
        r"(?P<res>\d+)",
        "vit_base_patch16_siglip_gap_224.webli",
        "SigLIP / SigLIP 2 image towers with average pooling",
        _siglip,
    ),
    (
        "siglip",
        r"vit_(?P<size>base|large|so400m|giantopt)_patch(?P<patch>\d+)_siglip_(?P<res>\d+)",
        "vit_so400m_patch14_siglip_384.webli",
        "SigLIP / SigLIP 2 image towers with their attention-pooling (MAP) head",
        _siglip,
    ),
    (
        "beit",
        r"beit(?P<v2>v2)?_(?P<size>base|large)_patch(?P<patch>16)_(?P<res>\d+)",
        "beitv2_base_patch16_224.in1k_ft_in22k_in1k",
        "BEiT and BEiT v2 (relative position bias per block, q/v-only biases, LayerScale, "
        "average of the patch tokens with fc_norm; fixed image size)",
        _beit,
    ),
    (
        "relpos",
        r"vit_(?P<shared>s)?relpos_(?P<size>small|medium|base)_patch(?P<patch>16|32)"
        r"(?P<plus>_plus)?(?P<cls>_cls|_clsgap)?(?P<rpn>_rpn)?_(?P<res>\d+)",
        "vit_relpos_medium_patch16_224.sw_in1k",
        "timm's relative-position ViTs (RelPosMlp bias per block, shared in vit_srelpos_*; no "
        "position embedding; LayerScale, or residual post-norm blocks in *_rpn_*; fixed image "
        "size)",
        _relpos,
    ),
    (
        "hybrid",
        r"(?P<arch>" + "|".join(HYBRIDS) + r")_(?P<res>\d+)",
        "vit_base_r50_s16_384.orig_in21k_ft_in1k",
        "R50 / R26 / R+Ti hybrids (timm's ResNetV2 stem)",
        _hybrid,
    ),
)

# Names timm has that keras_vit does not implement, and why (checked before the families).
# Names of the family keras_vit refuses, with why: none (a name of timm's ViT modules that no
# family reads is refused by keras_vit.weights.timm.names as such).
UNSUPPORTED = ()
