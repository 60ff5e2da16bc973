"""timm's `eva.py` families built on DINOv3's recipe that keras_vit reads: LingBot, Sapiens2.

Pure data, as `keras_vit.weights.timm_eva_names` (whose private `_layout` / `_qkv_fused` / ...
keys these use too; `keras_vit.weights.timm_names` turns `FAMILY_SPECS` into its `Family`
entries), read from timm 1.0.31's `timm/models/eva.py` model functions:

- LingBot-Vision `vit_{small,base,large,giant}_patch16_lingbot`: DINOv3's blocks and RoPE
  (`rope_type='dinov3'`, temperature 100, rotate-half: the loader reorders each head's query /
  key channels), class token + 4 registers, no absolute position embedding, LayerScale,
  LayerNorm epsilon 1e-5, the class token after the final norm (`global_pool='token'`, no
  `fc_norm`), q/v biases (giant: none, and a SwiGLU MLP rounded up to a multiple of 8); 512 px
  by default, no head.
"""

__all__ = ["DEFAULT_CLASSES", "FAMILY_SPECS"]

# Our size code and what differs from its row (giant: 1536 wide, 40 deep, 24 heads).
_SIZES = {
    "small": ("S", {}),
    "base": ("B", {}),
    "large": ("L", {}),
    "giant": ("g", dict(hidden_dim=1536, num_heads=24)),
}


def _dinov3_like(size):
    """What LingBot and Sapiens2 share with DINOv3 (`timm_eva_names._dinov3`)."""
    code, overrides = _SIZES[size]
    return {
        "variant": f"{code}/16",
        **overrides,
        "approximate_gelu": False,  # timm's nn.GELU
        "pooling": "token",  # global_pool='token' after the final norm (use_fc_norm=False)
        "class_token": True,
        "position_embedding": None,  # use_abs_pos_emb=False
        "rotary_embedding": "dinov3",
        "rotary_temperature": 100.0,
        "_layout": "eva",
    }


def _lingbot(g):
    size = g["size"]
    args = {
        **_dinov3_like(size),
        "image_size": 512,  # timm's pretrained input size (any size works: no pos_embed)
        "num_register_tokens": 4,
        "layer_scale_init_value": 1e-5,
        "layer_norm_epsilon": 1e-5,
        "key_bias": False,  # EvaAttention: q_bias, v_bias (a zero k_bias buffer)
        "_qkv_fused": True,
        "_qkv_bias": size != "giant",
        "_mlp_ratio": 4.0,
    }
    if size == "giant":  # swiglu_mlp=True, swiglu_align_to=8: unpacked fc1_g / fc1_x
        args.update(mlp="swiglu", _mlp_packed=False, _mlp_align=8, _mlp_ratio=4 * 2 / 3)
    return args


# (name, pattern, example, description, arguments): `timm_names.Family` fields.
FAMILY_SPECS = (
    (
        "lingbot",
        r"vit_(?P<size>small|base|large|giant)_patch16_lingbot",
        "vit_base_patch16_lingbot.robbyant",
        "LingBot-Vision (DINOv3's RoPE, blocks and 4 registers; class-token output; giant: "
        "SwiGLU, no q/v biases; 512 px by default, any size with dynamic_image_size)",
        _lingbot,
    ),
)

# timm's default pretrained tags have no head.
DEFAULT_CLASSES = {f"vit_{size}_patch16_lingbot": 0 for size in _SIZES}
