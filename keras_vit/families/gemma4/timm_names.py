"""timm's Gemma 4 vision tower names (`gemma4_vit_*`, timm 1.0.31's `gemma4_vit.py`): pure data.

`gemma4_vit_167m` (E2B/E4B tower: clamped projections) and `gemma4_vit_570m` (26B/31B tower:
output standardisation), each as timm's classifier (token mean, an RMSNorm without scale, no
head by default) and as the VLM encoder (`_enc`: the `3 x 3` soft pooler times `sqrt(D)`).
The arguments are `Gemma4Config`'s (`keras_vit.families.gemma4.config`), read by the family's
own reader (`keras_vit.families.gemma4.timm.from_timm_gemma4`).
"""

__all__ = ["DEFAULT_CLASSES", "FAMILY_SPECS", "HEADLESS", "PATTERN", "SIZES"]

# size: (hidden_dim, num_layers, num_heads, head_dim, mlp_dim, clip, standardize)
SIZES = {
    "167m": (768, 16, 12, 64, 3072, True, False),
    "570m": (1152, 27, 16, 72, 4304, False, True),
}
PATTERN = r"gemma4_vit_(?P<size>167m|570m)(?P<enc>_enc)?"


def gemma4_arguments(groups):
    """`Gemma4Config` arguments of a parsed `gemma4_vit_*` name (plus its `image_size`)."""
    hidden, layers, heads, head_dim, mlp, clip, standardize = SIZES[groups["size"]]
    encoder = bool(groups.get("enc"))
    return {
        "image_size": 768,
        "patch_size": 16,
        "hidden_dim": hidden,
        "num_layers": layers,
        "num_heads": heads,
        "head_dim": head_dim,
        "mlp_dim": mlp,
        "clip": clip,
        # timm's classifier keeps the encoder's std buffers but never applies them.
        "standardize": standardize and encoder,
        "pooling": "soft" if encoder else "avg",
        "final_norm": not encoder,
        "_layout": "gemma4",
        "_classifier": not encoder,
    }


FAMILY_SPECS = (
    (
        "gemma4",
        PATTERN,
        "gemma4_vit_167m_enc.gemma4_e4b_it",
        "Gemma 4's VLM vision towers (sandwich-norm blocks, q/k/v RMSNorms, split 2-D RoPE, "
        "a 2-D position table, k x k soft pooler; classifier or encoder)",
        gemma4_arguments,
    ),
)
HEADLESS = ("gemma4",)  # every name's pretrained config has num_classes=0
DEFAULT_CLASSES = {}
