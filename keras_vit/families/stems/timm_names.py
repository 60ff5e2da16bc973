"""timm's hybrids with a ResNet-D or MobileCLIP stem that keras_vit reads.

Pure data, as `keras_vit.families.eva.timm_names`: `FAMILY_SPECS` (turned into
`keras_vit.weights.timm.names.Family` entries) and `DEFAULT_CLASSES`. From timm 1.0.31's
vision_transformer_hybrid.py: `vit_small_resnet26d_224`, `vit_small_resnet50d_s16_224`,
`vit_base_resnet26d_224`, `vit_base_resnet50d_224` (a `features_only` `resnet26d` /
`resnet50d` up to stage 4, or stage 3 for `_s16`; the "small" ones are 768 wide, 8 blocks of
8 heads, MLP ratio 3; no pretrained weights in timm) and `vit_base_mci_224` (MobileCLIP's
`ConvStem`: 4x4/4 and 2x2/2 conv -> BatchNorm -> GELU, then a 2x2/2 conv that is the patch
embedding; no class-token position embedding; 512 outputs).
"""

__all__ = ["DEFAULT_CLASSES", "FAMILY_SPECS"]

# Units per stage of timm's features_only backbones (out_indices [4], or [3] for _s16).
_RESNET_D_UNITS = {
    ("26", ""): (2, 2, 2, 2),
    ("50", ""): (3, 4, 6, 3),
    ("50", "_s16"): (3, 4, 6),
}
_RESNET_D_SIZES = {
    "small": dict(num_layers=8, num_heads=8, _mlp_ratio=3.0),
    "base": dict(_mlp_ratio=4.0),
}

DEFAULT_CLASSES = {"vit_base_mci_224": 512}


def _resnet_d(g):
    return {
        "variant": "B/1",
        **_RESNET_D_SIZES[g["size"]],
        "resnet_units": _RESNET_D_UNITS[(g["depth"], g["s16"] or "")],
        "stem": "resnet_d",
        "approximate_gelu": False,
    }


def _mci(g):
    return {
        "variant": "B/2",  # the stem's third convolution: 2x2/2, 192 -> 768, with bias
        "stem": "conv",
        "stem_widths": (192, 192),
        "stem_strides": (4, 2),
        "prefix_position_embedding": False,  # timm's no_embed_class=True
        "approximate_gelu": False,
        "_mlp_ratio": 4.0,
    }


# (name, pattern, example, description, arguments) of `keras_vit.weights.timm.names.Family`.
FAMILY_SPECS = (
    (
        "resnet_d",
        r"vit_(?P<size>small|base)_resnet(?P<depth>26|50)d(?P<s16>_s16)?_(?P<res>224)",
        "vit_base_resnet50d_224",
        "ViT behind timm's ResNet-D (deep root, BatchNorm, average-pool shortcuts)",
        _resnet_d,
    ),
    (
        "mci",
        r"vit_base_mci_(?P<res>224)",
        "vit_base_mci_224.apple_mclip",
        "MobileCLIP's ViT-B image tower (conv -> BatchNorm -> GELU stem)",
        _mci,
    ),
)
