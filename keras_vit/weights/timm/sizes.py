"""timm's size words -> keras_vit variants: the rule every timm names module shares; timm's
ResNetV2 hybrids (`HYBRIDS`: name -> our variant code) and their stem numerics."""

# timm's size words -> our size codes (the numbers are in `keras_vit.models.variants.SIZES`,
# where timm's sizes without a code of their own are listed under timm's word).
SIZE_CODES = {
    "tiny": "Ti",
    "small": "S",
    "medium": "M",
    "base": "B",
    "large": "L",
    "huge": "H",
    "so400m": "So400m",
    "giant": "g",
    "gigantic": "G",
    **{
        word: word
        for word in (
            "xsmall", "wee", "little", "mediumd", "betwixt", "base_plus", "so150m", "so150m2",
            "giantopt",
        )
    },
}  # fmt: skip


def sizes(size, patch):
    """`ViT` arguments of timm's size word and patch: our variant code, timm's exact GELU."""
    return dict(
        variant=f"{SIZE_CODES[size]}/{patch}",
        approximate_gelu=False,  # timm's nn.GELU is the exact erf GELU
    )


# timm's ResNetV2 stems: the hybrid models and our variant codes for them.
HYBRIDS = {
    "vit_tiny_r_s16_p8": "R+Ti/16",
    "vit_small_r26_s32": "R26+S/32",
    "vit_base_r26_s32": "R26+B/32",
    "vit_base_r50_s16": "R50+B/16",
    "vit_large_r50_s32": "R50+L/32",
}
# timm's hybrid stem numerics (`_resnetv2` in timm's vision_transformer_hybrid.py).
TIMM_RESNET = dict(
    resnet_conv_epsilon=1e-8, resnet_conv_epsilon_mode="variance", resnet_norm_epsilon=1e-5
)
