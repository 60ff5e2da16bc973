"""timm's AIMv2 model names keras_vit reads (`aimv2_*`, timm's `vision_transformer.py`).

Pure data, as `keras_vit.families.eva.timm_names`: `FAMILY_SPECS` (turned into
`keras_vit.weights.timm.names.Family` entries) and the class counts. From timm 1.0.31's
`aimv2_*` model functions: a `VisionTransformer` with `class_token=False`, `global_pool='avg'`
(final norm before the pooling, `fc_norm=False`), `RmsNorm` (epsilon 1e-5) for every norm and for
`embed_norm_layer` (a norm on the patch embeddings: our `patch_norm`), timm's unpacked `SwiGLU`
MLP (`fc1_g`, `fc1_x`, `fc2`, SiLU gate) and no q/k/v, attention-projection or MLP biases
(`qkv_bias=False`, `proj_bias=False`: ours stay zero). Private keys for the loader
(`keras_vit.weights.timm.reader`): `_qkv_bias`, `_proj_bias` (attention output and MLP biases),
`_mlp_packed` (False: `fc1_g` / `fc1_x`), `_mlp_ratio` (timm's `int(hidden * mlp_ratio)`).
"""

__all__ = ["DEFAULT_CLASSES", "FAMILY_SPECS"]

# timm's AIMv2 sizes: (width, heads, mlp_ratio); 24 blocks, patch 14 for all.
_AIMV2_SIZES = {
    "large": (1024, 8, 2.75),
    "huge": (1536, 12, 2.6667),
    "1b": (2048, 16, 2.75),
    "3b": (3072, 24, 2.6667),
}


def _aimv2(g):
    hidden, heads, ratio = _AIMV2_SIZES[g["size"]]
    return {
        "variant": "L/14",  # the numbers below replace the table's
        "hidden_dim": hidden,
        "num_heads": heads,
        "num_layers": 24,
        "class_token": False,
        "pooling": "gap",
        "mlp": "swiglu",
        "norm": "rmsnorm",
        "patch_norm": True,
        "layer_norm_epsilon": 1e-5,
        "_qkv_bias": False,
        "_proj_bias": False,
        "_mlp_packed": False,
        "_mlp_ratio": ratio,
    }


# (name, pattern, example, description, arguments): `timm_names.Family` fields.
FAMILY_SPECS = (
    (
        "aimv2",
        r"aimv2_(?P<size>large|huge|1b|3b)_patch(?P<patch>14)_(?P<res>224|336|448)",
        "aimv2_large_patch14_224.apple_pt",
        "Apple's AIMv2 image encoders (RMSNorm, patch-embedding norm, SwiGLU, no biases, "
        "average pooling)",
        _aimv2,
    ),
)

# timm's AIMv2 checkpoints have no classifier (num_classes=0).
DEFAULT_CLASSES = {
    f"aimv2_{size}_patch14_{res}": 0 for size in _AIMV2_SIZES for res in (224, 336, 448)
}
