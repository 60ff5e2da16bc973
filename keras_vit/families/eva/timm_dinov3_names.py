"""timm's `eva.py` families built on DINOv3's recipe that keras_vit reads: LingBot, Sapiens2.

Pure data, as `keras_vit.families.eva.timm_names` (whose private `_layout` / `_qkv_fused` / ...
keys these use too; `keras_vit.weights.timm.names` turns `FAMILY_SPECS` into its `Family`
entries), read from timm 1.0.31's `timm/models/eva.py` model functions:

- LingBot-Vision `vit_{small,base,large,giant}_patch16_lingbot`: DINOv3's blocks and RoPE
  (`rope_type='dinov3'`, temperature 100, rotate-half: the loader reorders each head's query /
  key channels), class token + 4 registers, no absolute position embedding, LayerScale,
  LayerNorm epsilon 1e-5, the class token after the final norm (`global_pool='token'`, no
  `fc_norm`), q/v biases (giant: none, and a SwiGLU MLP rounded up to a multiple of 8); 512 px
  by default, no head.
- Sapiens2 `vit_{base,large,huge,giant,5b}_patch16_sapiens2`: grouped-query attention
  (timm's `num_kv_heads`: multi-head in the first and last 8 blocks, `num_key_value_heads`
  key / value heads in between; our `num_key_value_heads` per block), separate q / k / v
  projections with biases (timm's `AttentionRope`, `qkv_fused=False`), RMSNorm (epsilon 1e-6)
  everywhere with RMS QK-norms, a packed SwiGLU MLP (`GluMlp`, gate first), LayerScale on the
  attention branch only (`attention_only_layer_scale`), DINOv3's RoPE (its training-time
  coordinate rescaling is off at eval), class token + 8 registers, class-token output after
  the final norm; 1024 x 768 by default, no head.
"""

__all__ = ["DEFAULT_CLASSES", "FAMILY_SPECS"]

# Our size code and what differs from its row (giant: 1536 wide, 40 deep, 24 heads).
_SIZES = {
    "small": ("S", {}),
    "base": ("B", {}),
    "large": ("L", {}),
    "giant": ("g", dict(hidden_dim=1536, num_heads=24)),
    "huge": ("H", {}),
    "5b": ("H", dict(hidden_dim=2432, num_layers=56, num_heads=32)),
}
# Sapiens2's key / value heads in its grouped-query blocks (timm's `_sapiens2_args`).
_SAPIENS2_KV_HEADS = {"base": 6, "large": 8, "huge": 8, "giant": 12, "5b": 16}


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


def _sapiens2(g):
    size = g["size"]
    return {
        **_dinov3_like(size),
        "image_size": (1024, 768),
        "num_register_tokens": 8,
        "layer_scale_init_value": 1.0,
        "attention_only_layer_scale": True,
        "norm": "rmsnorm",
        "qk_norm": True,
        "mlp": "swiglu",
        "_attention": "rope",  # AttentionRope: q / k / v projections, all with biases
        "_qkv_fused": False,
        "_mlp_packed": True,  # GluMlp: fc1 = gate rows, then up rows
        "_mlp_ratio": 4.0,
        "_kv_heads": (_SAPIENS2_KV_HEADS[size], 8),  # grouped in all but 8 blocks at each end
    }


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
    (
        "sapiens2",
        r"vit_(?P<size>base|large|huge|giant|5b)_patch16_sapiens2",
        "vit_large_patch16_sapiens2.fb",
        "Sapiens2 (grouped-query attention between 8 multi-head blocks at each end, RMSNorm "
        "with QK-norm, packed SwiGLU, attention-only LayerScale, DINOv3's RoPE, 8 registers; "
        "1024 x 768 by default, any size with dynamic_image_size)",
        _sapiens2,
    ),
)

# timm's default pretrained tags have no head.
DEFAULT_CLASSES = {f"vit_{size}_patch16_lingbot": 0 for size in ("small", "base", "large", "giant")}
DEFAULT_CLASSES.update({f"vit_{size}_patch16_sapiens2": 0 for size in _SAPIENS2_KV_HEADS})
