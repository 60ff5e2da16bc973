"""timm's Perception Encoder names keras_vit reads (`vit_pe_core_*`, `_lang_*`, `_spatial_*`).

Pure data, as `keras_vit.families.eva.timm_names`: `FAMILY_SPECS`, the class counts and
`UNSUPPORTED`. From timm 1.0.31's `vit_pe_*` model functions (`timm/models/eva.py`): an `Eva`
with `attn_type='rope'` (timm's `AttentionRope`: one `attn.qkv` with its full bias), EVA-02's
rotary table (`RotaryEmbeddingCat`) with `rope_grid_indexing='xy'` (our
`rotary_embedding="axial"`), positions rescaled to `ref_feat_shape` and shifted by
`rope_grid_offset` (1, 0 for the gigantic towers), a learned position embedding with a class
token row, `norm_pre` (our `pre_norm`) and no patch-embedding bias
(`bias=not use_pre_transformer_norm`), LayerNorm epsilon 1e-5, a GELU MLP, and neither a norm
after the blocks nor after the pooling (`use_post_transformer_norm=False`, `use_fc_norm=False`:
our `final_norm=False`); timm's default `global_pool='avg'` averages the patch tokens. The
core towers keep the final norm and pool with timm's `AttentionPoolLatent` (`global_pool='map'`):
8 heads of its own, MLP ratio 4, over all tokens, the class token included (our MAP head with
`map_num_heads=8`, `map_mlp_dim`, `map_prefix_tokens=True`).
"""

__all__ = ["DEFAULT_CLASSES", "FAMILY_SPECS"]

# size: (width, depth, heads, patch, mlp_ratio); lang towers have their own depths.
_SIZES = {
    "tiny": (192, 12, 3, 16, 4.0),
    "small": (384, 12, 6, 16, 4.0),
    "base": (768, 12, 12, 16, 4.0),
    "large": (1024, 24, 16, 14, 4.0),
    "gigantic": (1536, 50, 16, 14, 8960 / 1536),
}
_LANG_DEPTHS = {"large": 23, "gigantic": 47}
# Core towers: timm's ref_feat_shape (the pre-training grid) per size.
_CORE_REFERENCE = {"tiny": 24, "small": 24, "base": 14, "large": 24, "gigantic": 32}


def _pe(g):
    size, kind = g["size"], g["kind"]
    hidden, depth, heads, _, ratio = _SIZES[size]
    gigantic = size == "gigantic"
    args = {
        "variant": "B/16",  # the numbers below replace the table's
        "hidden_dim": hidden,
        "num_layers": _LANG_DEPTHS[size] if kind == "lang" else depth,
        "num_heads": heads,
        "patch_size": int(g["patch"]),
        "approximate_gelu": False,  # timm's nn.GELU
        "layer_norm_epsilon": 1e-5,
        "class_token": not gigantic,
        "pooling": "gap",
        "pre_norm": True,
        "final_norm": False,
        "rotary_embedding": "axial",  # RotaryEmbeddingCat with rope_grid_indexing='xy'
        "rotary_reference_grid": (32, 32) if kind != "core" else (_CORE_REFERENCE[size],) * 2,
        "rotary_grid_offset": 0.0 if gigantic else 1.0,
        "_layout": "eva",
        "_attention": "rope",
        "_qkv_fused": True,
        "_patch_bias": False,
        "_mlp_ratio": ratio,
    }
    if kind == "core":  # final norm, then timm's AttentionPoolLatent over every token
        args.update(
            final_norm=True,
            pooling="map",
            map_num_heads=8,
            map_prefix_tokens=True,
            _map_mlp_ratio=4.0,
        )
    elif kind == "lang" or gigantic:
        args["layer_scale_init_value"] = 0.1
    return args


# (name, pattern, example, description, arguments): `timm_names.Family` fields.
FAMILY_SPECS = (
    (
        "pe",
        r"vit_pe_(?P<kind>core|lang|spatial)_(?P<size>tiny|small|base|large|gigantic)"
        r"_patch(?P<patch>14|16)_(?P<res>224|336|384|448|512)",
        "vit_pe_spatial_base_patch16_512.fb",
        "Meta's Perception Encoder (RoPE with 'xy' indexing, pre-norm; core: attention-pool "
        "head; lang, spatial: no final norm, average pooling)",
        _pe,
    ),
)

# timm's PE lang / spatial checkpoints have no head (num_classes=0); the core towers' `head` is
# their output projection into the CLIP embedding (timm's num_classes: its width).
DEFAULT_CLASSES = {
    **{f"vit_pe_spatial_{s}_patch16_512": 0 for s in ("tiny", "small", "base")},
    **{f"vit_pe_{k}_{s}_patch14_448": 0
       for k in ("lang", "spatial") for s in ("large", "gigantic")},  # fmt: skip
    "vit_pe_core_tiny_patch16_384": 512,
    "vit_pe_core_small_patch16_384": 512,
    "vit_pe_core_base_patch16_224": 1024,
    "vit_pe_core_large_patch14_336": 1024,
    "vit_pe_core_gigantic_patch14_448": 1280,
}
