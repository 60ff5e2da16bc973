"""timm's FlexiViT and NaFlex ViT names keras_vit reads (`flexivit_*`, `naflexvit_*`).

Pure data, as `keras_vit.families.eva.timm_names`: `FAMILY_SPECS` (turned into
`keras_vit.weights.timm.names.Family` entries). From timm 1.0.31's `flexivit_*` model functions
(`vision_transformer.py`: patch 16, 240 px, position embedding on the patches only) and
`naflexvit.py`'s `NaFlexVitCfg`s (no class token, a 16 x 16 position table, NaFlex dict input).
"""

__all__ = ["FAMILY_SPECS", "NAFLEX_PATTERN"]

from keras_vit.weights.timm.sizes import sizes as _timm_sizes

# The variant numbers of timm's NaFlex sizes and the per-name options (`NaFlexVitCfg`s of
# timm's naflexvit.py, timm 1.0.31). Position tables: 16 x 16 (256 px at patch 16).
_KINDS = {
    "gap": dict(pooling="gap", fc_norm=True, num_register_tokens=4, layer_scale_init_value=1e-5),
    "par_gap": dict(
        pooling="gap",
        fc_norm=True,
        num_register_tokens=4,
        layer_scale_init_value=1e-5,
        position_embedding_aspect_preserving=True,
    ),
    "parfac_gap": dict(
        pooling="gap",
        fc_norm=True,
        num_register_tokens=4,
        layer_scale_init_value=1e-5,
        position_embedding_aspect_preserving=True,
        position_embedding="factorized",
    ),
    "map": dict(pooling="map", num_register_tokens=1, layer_scale_init_value=1e-5),
    "reg1_gap": dict(
        pooling="gap",
        fc_norm=True,
        num_register_tokens=1,
        layer_scale_init_value=1e-5,
        _qkv_bias=False,
    ),
    "reg1_map": dict(
        pooling="map", num_register_tokens=1, layer_scale_init_value=1e-5, _qkv_bias=False
    ),
    "siglip": dict(
        pooling="map", approximate_gelu=True, position_embedding_interpolation="bilinear"
    ),
}
NAFLEX_PATTERN = (
    r"naflexvit_(?P<size>base|so150m2|so400m)_patch(?P<patch>16)_"
    r"(?P<kind>gap|par_gap|parfac_gap|map|reg1_gap|reg1_map|siglip)"
)


def _naflex(g):
    """timm's `NaFlexVit` names (naflexvit.py): no class token, position table 16 x 16."""
    args = {**_timm_sizes(g["size"], g["patch"]), "class_token": False, "naflex": True}
    args.update(_KINDS[g["kind"]])
    args["image_size"] = 16 * int(g["patch"])  # timm's 16 x 16 position table
    return args




def _flexivit(g):
    """FlexiViT (timm's `flexivit_*`): patch 16, 240 px, position embedding on patches only.

    A checkpoint read at another image size: the position embedding resized bilinearly without
    antialiasing, as timm's loader does for FlexiViT (`_create_vision_transformer`'s 'flexi'
    checkpoint filter; its other ViTs: bicubic, antialiased).
    """
    sizes = _timm_sizes(g["size"], 16)
    resize = dict(interpolation="bilinear", antialias=False)
    return {**sizes, "prefix_position_embedding": False, "image_size": 240,
            "_position_resize": resize}  # fmt: skip


FAMILY_SPECS = (
    (
        "flexivit",
        r"flexivit_(?P<size>small|base|large)",
        "flexivit_base.1200ep_in1k",
        "FlexiViT (one set of weights for any patch size: keras_vit.with_patch_size)",
        _flexivit,
    ),
    (
        "naflexvit",
        NAFLEX_PATTERN,
        "naflexvit_base_patch16_gap.e300_s576_in1k",
        "NaFlex ViTs and SigLIP 2 NaFlex towers (dict input: patches, patch_coord, patch_valid)",
        _naflex,
    ),
)
