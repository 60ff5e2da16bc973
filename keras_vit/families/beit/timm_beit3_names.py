"""timm's BEiT-3 model names keras_vit reads (`beit3_*`, timm's `VisionTransformer`).

Pure data, as `keras_vit.families.eva.timm_names` (`keras_vit.weights.timm.names` turns
`FAMILY_SPECS` into its `Family` entries). timm 1.0.31 maps BEiT-3's vision tower onto its
`VisionTransformer` with `scale_attn_norm=True` (a LayerNorm over the concatenated heads before
the attention's output projection: our `attention_inner_norm`) and `scale_mlp_norm=True` (a
LayerNorm of the MLP's hidden activations before `fc2`: our `mlp_inner_norm` with the GELU
MLP), LayerNorm epsilon 1e-5, a class token and average pooling of the patch tokens with
`fc_norm`. The checkpoint names are timm's `VisionTransformer` ones plus `attn.norm` and
`mlp.norm` (`keras_vit.weights.timm.reader`).
"""

__all__ = ["FAMILY_SPECS"]

# timm's beit3_* sizes -> our size codes (giant: 1408 wide, 40 deep, 16 heads, as "g").
_SIZES = {"base": "B", "large": "L", "giant": "g"}


def _beit3(g):
    return {
        "variant": f"{_SIZES[g['size']]}/{g['patch']}",
        "approximate_gelu": False,  # timm's nn.GELU
        "layer_norm_epsilon": 1e-5,
        "attention_inner_norm": True,  # scale_attn_norm
        "mlp_inner_norm": True,  # scale_mlp_norm
        "pooling": "gap",  # global_pool='avg': the patch tokens' mean, then fc_norm
        "class_token": True,
        "fc_norm": True,
        # timm's mlp_ratio (giant: int(1408 * 4.3637) = 6144), also for a hidden_dim override.
        "_mlp_ratio": 4.3637 if g["size"] == "giant" else 4.0,
    }


# (name, pattern, example, description, arguments): `timm_names.Family` fields.
FAMILY_SPECS = (
    (
        "beit3",
        r"beit3_(?P<size>base|large|giant)_patch(?P<patch>14|16)_(?P<res>224|336)",
        "beit3_base_patch16_224.in22k_ft_in1k",
        "BEiT-3 vision towers (LayerNorm over the heads before the attention output and inside "
        "the GELU MLP, epsilon 1e-5; average pooling with fc_norm)",
        _beit3,
    ),
)
