"""timm's parallel-scaling and differential-attention ViT names keras_vit reads.

Pure data, as `keras_vit.weights.timm.names` (which turns `FAMILY_SPECS` into its `Family`
entries), read from timm 1.0.31's `vision_transformer.py` model functions:

- `vit_{base,large,huge}_patch*_xp_*`: `block_fn=ParallelScalingBlock`, `norm_layer=RmsNorm`,
  `qk_norm=True`, `qkv_bias=False` (timm's `mlp_bias` instead of an `in_proj` bias),
  `pre_norm=True`, `no_embed_class=True`, class-token pooling;
- `vit_pwee_patch16_reg1_gap_256`: the ParallelScalingBlock in timm's `wee` SBB ViT (16 blocks,
  one register, average pooling with `fc_norm`, LayerScale);
- `vit_dwee_*`, `vit_dlittle_*`: timm's `Block` with `attn_layer='diff'` (`DiffAttention`);
- `vit_dpwee_*`: `block_fn=DiffParallelScalingBlock` (differential attention in the parallel
  block, one fused output projection).

The loader's tables for these blocks are in `keras_vit.weights.timm.parallel`.
"""

from keras_vit.weights.timm.sizes import sizes

__all__ = ["DEFAULT_CLASSES", "FAMILY_SPECS"]


def _xp(g):
    return {
        **sizes(g["size"], g["patch"]),
        "block_kind": "parallel_scaling",
        "norm": "rmsnorm",  # timm's RmsNorm, epsilon 1e-6
        "qk_norm": True,
        "pre_norm": True,
        "prefix_position_embedding": False,  # no_embed_class
        "_qkv_bias": False,  # timm's mlp_bias, no q/k/v bias
        "_patch_bias": False,  # timm: no patch-embedding bias with pre_norm
        "_mlp_ratio": 4.0,
    }


def _sbb(g):
    """timm's SBB `wee` / `little` ViTs with a parallel block and / or differential attention."""
    kind = g["kind"]
    args = {
        **sizes(g["size"], g["patch"]),
        "pooling": "gap",
        "class_token": False,
        "num_register_tokens": int(g["reg"]),
        "prefix_position_embedding": False,
        "fc_norm": True,
        "layer_scale_init_value": 1e-5,
        "_mlp_ratio": {"wee": 5.0, "little": 5.6}[g["size"]],  # timm: int(hidden * ratio)
    }
    if "p" in kind:  # vit_pwee / vit_dpwee: 16 blocks
        args.update(block_kind="parallel_scaling", num_layers=16)
    if "d" in kind:
        args["attention_type"] = "differential"
    return args


# (name, pattern, example, description, arguments): `timm_names.Family` fields.
FAMILY_SPECS = (
    (
        "vit_xp",
        r"vit_(?P<size>base|large|huge)_patch(?P<patch>\d+)_xp_(?P<res>\d+)",
        "vit_base_patch16_xp_224",
        "ViTs with timm's ParallelScalingBlock (ViT-22B's parallel attention and MLP, one "
        "fused input projection), RMSNorm, QK-norm, pre-norm, no q/k/v biases",
        _xp,
    ),
    (
        "vit_parallel_diff",
        r"vit_(?P<kind>dp|d|p)(?P<size>wee|little)_patch(?P<patch>16)_reg(?P<reg>1)"
        r"_(?P<pool>gap)_(?P<res>\d+)",
        "vit_dpwee_patch16_reg1_gap_256.sbb_in1k",
        "timm's SBB register ViTs with ParallelScalingBlocks (pwee), differential attention "
        "(dwee, dlittle) or both (dpwee)",
        _sbb,
    ),
)

DEFAULT_CLASSES = {}
