"""timm's RADIO, TIPSv2, InternViT-300M and test-model names keras_vit reads.

Pure data, as `keras_vit.families.eva.timm_names`: `FAMILY_SPECS` (turned into
`keras_vit.weights.timm.names.Family` entries) and `DEFAULT_CLASSES`. From timm 1.0.31's
`vision_transformer.py`, `naflexvit.py` and `vision_transformer_relpos.py`; every name is timm's
`VisionTransformer` (or `NaFlexVit`, `VisionTransformerRelPos`) with options keras_vit has:

- NVIDIA C-RADIO backbones `vit_{base,large,huge,giant}_patch16_radio_v3`,
  `vit_{so400m,huge}_patch16_radio_v4`: a class token and 7 (v3) or 9 (v4) registers (RADIO's
  extra per-teacher summary tokens), the position embedding on the patches only
  (`no_embed_class`), no final norm (`final_norm=False`), class-token pooling, LayerScale
  (1e-5) on base and large only, 512 px; a checkpoint's table of another grid (RADIO stores
  128 x 128) is resized as timm's `checkpoint_filter_fn` does for these names: bilinear, no
  antialiasing, `align_corners` True for v3 base and huge (`_RADIO_ALIGN_CORNERS`), False
  otherwise. The C-RADIO NaFlex models `naflexvit_*_radio_*` are the same blocks as NaFlex
  models: the 128 x 128 table resized per image to the square of its longer side (bilinear,
  no antialiasing, the same `align_corners` per name) and cropped top-left.
- TIPSv2 `vit_*_patch14_reg1_tipsv2`: DINOv2-style (class token, 1 register, position embedding
  on the patches, LayerScale 1.0; giant: width 1536 with the packed SwiGLU MLP), 448 px.
- `vit_intern300m_patch14_448`: LayerScale 0.1, no final norm, 448 px, any image size.
- timm's test models `test_vit` .. `test_vit4` (160 px; `test_vit3`: MAP over every token,
  timm's `pool_include_prefix`; `test_vit4`: RMSNorm) and `test_vit_relpos`.
"""

__all__ = ["DEFAULT_CLASSES", "FAMILY_SPECS"]

# RADIO: size word -> (width, depth, heads, LayerScale); C-RADIOv4 SO400M is SigLIP's shape.
_RADIO = {
    "base": ("B/16", 768, 12, 12, 1e-5),
    "large": ("L/16", 1024, 24, 16, 1e-5),
    "huge": ("H/16", 1280, 32, 16, None),
    "giant": ("B/16", 1536, 40, 24, None),
    "so400m": ("So400m/16", 1152, 27, 16, None),
}
# timm's _RADIO_ALIGN_CORNERS (vision_transformer.py) and the naflexvit_*_radio_* cfgs.
_RADIO_ALIGN_CORNERS = {("base", "v3"), ("huge", "v3")}
_RADIO_TABLE = 128  # RADIO's stored position grid (2048 px at patch 16)


def _radio_common(g):
    variant, hidden, depth, heads, scale = _RADIO[g["size"]]
    args = {
        "variant": variant,
        "hidden_dim": hidden,
        "num_layers": depth,
        "num_heads": heads,
        "approximate_gelu": False,  # timm's nn.GELU
        "class_token": True,
        "num_register_tokens": 7 if g["version"] == "v3" else 9,
        "final_norm": False,
        "pooling": "token",
        "layer_scale_init_value": scale,
    }
    # timm: int(width * mlp_ratio), also for a width override.
    args["_mlp_ratio"] = 4304 / 1152 if g["size"] == "so400m" else 4.0
    return args, (g["size"], g["version"]) in _RADIO_ALIGN_CORNERS


def _radio(g):
    """`vit_*_patch16_radio_v*`: timm's VisionTransformer at 512 px."""
    args, align_corners = _radio_common(g)
    resize = dict(interpolation="bilinear", antialias=False, align_corners=align_corners)
    args.update(prefix_position_embedding=False, image_size=512, _position_resize=resize)
    return args


def _naflex_radio(g):
    """`naflexvit_*_patch16_radio_v*`: timm's NaFlexVit with `_radio_vit_cfg`."""
    args, align_corners = _radio_common(g)
    args.update(
        naflex=True,
        image_size=_RADIO_TABLE * 16,  # the 128 x 128 table at patch 16
        position_embedding_interpolation="bilinear",
        position_embedding_antialias=False,
        position_embedding_align_corners=align_corners,
        position_embedding_aspect_preserving=True,
    )
    return args


def _tipsv2(g):
    """`vit_*_patch14_reg1_tipsv2`: DINOv2-style, 1 register, LayerScale 1.0, 448 px."""
    size = g["size"]
    variant = {"base": "B/14", "large": "L/14", "so400m": "So400m/14", "giant": "B/14"}[size]
    args = {
        "variant": variant,
        "approximate_gelu": False,
        "class_token": True,
        "num_register_tokens": 1,
        "prefix_position_embedding": False,
        "layer_scale_init_value": 1.0,
        "image_size": 448,
        "_mlp_ratio": 4304 / 1152 if size == "so400m" else 4.0,  # timm: int(width * ratio)
    }
    if size == "giant":  # DINOv2 giant's SwiGLUPacked: fc1 int(1536 * 5.33334) = 2 x 4096
        args.update(
            hidden_dim=1536,
            num_layers=40,
            num_heads=24,
            mlp="swiglu",
            _mlp_ratio=2.66667 * 2,
            _mlp_ratio_packed=True,
        )
    return args


def _intern(g):
    """`vit_intern300m_patch14_448`: ViT-L/14, LayerScale 0.1, no final norm, any size."""
    return {
        "variant": "L/14",
        "approximate_gelu": False,
        "layer_scale_init_value": 0.1,
        "final_norm": False,
        "image_size": 448,
        "dynamic_image_size": True,  # timm's dynamic_img_size=True
        "_mlp_ratio": 4.0,
    }


# timm's test models: (width, depth, heads, mlp_ratio) and options. test_vit2..4: one register,
# no class token, LayerScale 1e-5.
_REG1 = dict(class_token=False, num_register_tokens=1, layer_scale_init_value=1e-5)
_GAP = dict(pooling="gap", fc_norm=True, dynamic_image_size=True)
_TEST = {
    "": ((64, 6, 2, 3), dict(dynamic_image_size=True)),
    "2": ((64, 8, 2, 3), {**_REG1, **_GAP}),
    # timm's pool_include_prefix=True: the MAP head pools the register token too.
    "3": ((96, 9, 3, 2), {**_REG1, "pooling": "map", "map_prefix_tokens": True}),
    "4": ((96, 9, 3, 3), {**_REG1, **_GAP, "norm": "rmsnorm"}),
    "_relpos": (
        (96, 9, 3, 2),
        dict(
            class_token=False,
            position_embedding=None,
            relative_position_bias="mlp",
            pooling="gap",
            fc_norm=True,
            layer_scale_init_value=1e-6,  # VisionTransformerRelPos's default init_values
            _qkv_bias=False,
        ),
    ),
}


def _test(g):
    (hidden, depth, heads, ratio), options = _TEST[g["kind"]]
    return {
        "variant": "B/16",  # the numbers below replace the table's
        "hidden_dim": hidden,
        "num_layers": depth,
        "num_heads": heads,
        "approximate_gelu": False,
        "image_size": 160,  # timm's pretrained cfg input size
        "_mlp_ratio": float(ratio),
        **options,
    }


# (name, pattern, example, description, arguments): `timm_names.Family` fields.
FAMILY_SPECS = (
    (
        "radio",
        r"vit_(?P<size>base|large|huge|giant|so400m)_patch16_radio_(?P<version>v3|v4)",
        "vit_base_patch16_radio_v3.c_radio",
        "NVIDIA C-RADIOv3 / v4 backbones (class token + 7 or 9 registers, position embedding "
        "on the patches, no final norm; the 128 x 128 table resized bilinearly)",
        _radio,
    ),
    (
        "naflexvit_radio",
        r"naflexvit_(?P<size>base|large|huge|giant|so400m)_patch16_radio_(?P<version>v3|v4)",
        "naflexvit_base_patch16_radio_v3.c_radio",
        "C-RADIO as NaFlex models (the 128 x 128 table resized per image to its longer side's "
        "square, bilinear, and cropped top-left)",
        _naflex_radio,
    ),
    (
        "tipsv2",
        r"vit_(?P<size>base|large|so400m|giant)_patch14_reg1_tipsv2",
        "vit_base_patch14_reg1_tipsv2.webli",
        "TIPSv2 image towers (DINOv2-style with 1 register, LayerScale 1.0; giant: SwiGLU)",
        _tipsv2,
    ),
    (
        "intern_vit",
        r"vit_intern300m_patch14_448",
        "vit_intern300m_patch14_448.ogvl_dist",
        "InternViT-300M (LayerScale 0.1, no final norm, any image size)",
        _intern,
    ),
    (
        "test_vit",
        r"test_vit(?P<kind>|2|3|4|_relpos)",
        "test_vit.r160_in1k",
        "timm's tiny test models (registers, GAP + fc_norm, MAP over every token, RMSNorm, "
        "relative position MLP)",
        _test,
    ),
)

_SIZES = ("base", "large", "huge", "giant", "so400m")
_RADIO_NAMES = [f"vit_{s}_patch16_radio_v3" for s in _SIZES[:4]] + [
    f"vit_{s}_patch16_radio_v4" for s in ("so400m", "huge")
]
# RADIO, TIPSv2 and InternViT checkpoints are backbones (timm's num_classes=0).
DEFAULT_CLASSES = {
    **{name: 0 for name in _RADIO_NAMES},
    **{"naflex" + name: 0 for name in _RADIO_NAMES},
    **{f"vit_{s}_patch14_reg1_tipsv2": 0 for s in ("base", "large", "so400m", "giant")},
    "vit_intern300m_patch14_448": 0,
}
