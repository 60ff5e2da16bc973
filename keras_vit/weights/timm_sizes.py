"""timm's size words -> keras_vit variants: the rule every timm names module shares."""

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
