"""The size table and variant codes: `"B/16"`, `"S/32"`, `"R50+B/16"`, `"mu/8"`, ...

Variants are data: one table (`SIZES`, the package's only size table) maps a
size code to its numbers (Table 1 of the paper, Ti and S from DeiT / AugReg,
big_vision's M, So400m, g and G, the other sizes of timm under timm's words,
and a tiny `"mu"` for tests), and a code `"SIZE/PATCH"` picks a size and a
patch size. Hybrid codes
`"R{depth}+SIZE/STRIDE"` put a BiT ResNet stem in front; the official ones are
listed explicitly because their names do not always spell their stride.
"""

import re

# code: (num_layers, hidden_dim, mlp_dim, num_heads); where from, and timm's word for it.
_SIZE_TABLE = {
    "mu": (2, 32, 64, 2),  # tiny, for tests
    "Ti": (12, 192, 768, 3),  # DeiT / AugReg; timm "tiny"
    "S": (12, 384, 1536, 6),  # DeiT / AugReg; timm "small"
    "M": (12, 512, 2048, 8),  # big_vision; timm "medium"
    "B": (12, 768, 3072, 12),  # the paper's Table 1; timm "base"
    "L": (24, 1024, 4096, 16),  # Table 1; timm "large"
    "H": (32, 1280, 5120, 16),  # Table 1; timm "huge"
    "So400m": (27, 1152, 4304, 16),  # SigLIP's shape-optimised; timm "so400m"
    "g": (40, 1408, 6144, 16),  # big_vision giant; timm "giant"
    "G": (48, 1664, 8192, 16),  # big_vision gigantic; timm "gigantic"
    # timm's other sizes (timm's vision_transformer.py), under timm's own words.
    "xsmall": (10, 256, 1024, 4),
    "wee": (14, 256, 1280, 4),
    "little": (14, 320, 1792, 5),
    "mediumd": (20, 512, 2048, 8),
    "betwixt": (12, 640, 2560, 10),
    "base_plus": (12, 896, 3584, 14),
    "so150m": (18, 896, 2304, 14),
    "so150m2": (21, 832, 2176, 13),
    "giantopt": (40, 1536, 6144, 16),
}
SIZE_FIELDS = ("num_layers", "hidden_dim", "mlp_dim", "num_heads")
SIZES = {code: dict(zip(SIZE_FIELDS, row, strict=True)) for code, row in _SIZE_TABLE.items()}

# ResNet units per stage for each stem depth code (BiT ResNetV2, bottleneck units).
RESNET_DEPTHS = {
    "R": (),  # root only (conv 7x7/2 + max-pool 3x3/2): stride 4
    "R26": (2, 2, 2, 2),
    "R50": (3, 4, 6, 3),
    "R101": (3, 4, 23, 3),
}

# The official hybrids (vit_jax/configs/models.py). `patch_size` is the patch on
# the ResNet feature map; R50+B/16 folds ResNet-50's 4th stage into its 3rd
# (3, 4, 9) to keep stride 16; R+Ti/16 has total stride 32 despite its name.
OFFICIAL_HYBRIDS = {
    "R50+B/16": dict(size="B", resnet_units=(3, 4, 9), patch_size=1),
    "R50+L/32": dict(size="L", resnet_units=(3, 4, 6, 3), patch_size=1),
    "R26+S/32": dict(size="S", resnet_units=(2, 2, 2, 2), patch_size=1),
    "R26+B/32": dict(size="B", resnet_units=(2, 2, 2, 2), patch_size=1),
    "R+Ti/16": dict(size="Ti", resnet_units=(), patch_size=8),
}

_SIZE_CODE = r"(?P<size>[A-Za-z][A-Za-z0-9_]*)"
_PLAIN = re.compile(rf"^{_SIZE_CODE}/(?P<patch>\d+)$")
_HYBRID = re.compile(rf"^(?P<depth>R\d*)\+{_SIZE_CODE}/(?P<stride>\d+)$")


def resnet_stride(resnet_units):
    """Total stride of a BiT ResNet stem: 4 for the root, x2 for every stage after the first."""
    return 4 * 2 ** max(len(resnet_units) - 1, 0)


def _size(code, variant):
    if code not in SIZES:
        raise ValueError(
            f"Unknown model size {code!r} in variant {variant!r}. "
            f"Expected one of {sorted(SIZES)} (e.g. 'B/16', 'R50+B/16')."
        )
    return dict(SIZES[code])


def parse_variant(variant):
    """Decodes a variant code into builder keyword arguments.

    Args:
        variant: str. `"SIZE/PATCH"` (e.g. `"B/16"`, `"Ti/16"`, `"mu/4"`) or a
            hybrid `"R{depth}+SIZE/STRIDE"` (e.g. `"R50+B/16"`, `"R26+S/32"`).

    Returns:
        dict with `num_layers`, `hidden_dim`, `mlp_dim`, `num_heads`,
        `patch_size`, and for hybrids `resnet_units`.

    Example:

    >>> parse_variant("B/16")["hidden_dim"]
    768
    >>> parse_variant("R50+B/16")["resnet_units"]
    (3, 4, 9)
    """
    if not isinstance(variant, str):
        raise ValueError(f"variant must be a string like 'B/16'. Received: variant={variant!r}")
    if variant in OFFICIAL_HYBRIDS:
        spec = OFFICIAL_HYBRIDS[variant]
        config = _size(spec["size"], variant)
        config.update(patch_size=spec["patch_size"], resnet_units=spec["resnet_units"])
        return config
    match = _PLAIN.match(variant)
    if match:
        config = _size(match["size"], variant)
        patch = int(match["patch"])
        if patch <= 0:
            raise ValueError(f"Patch size must be positive. Received: variant={variant!r}")
        config["patch_size"] = patch
        return config
    match = _HYBRID.match(variant)
    if match:
        depth = match["depth"]
        if depth not in RESNET_DEPTHS:
            raise ValueError(
                f"Unknown ResNet stem {depth!r} in variant {variant!r}. "
                f"Expected one of {sorted(RESNET_DEPTHS)}."
            )
        config = _size(match["size"], variant)
        units = RESNET_DEPTHS[depth]
        stride = int(match["stride"])
        stem = resnet_stride(units)
        if stride <= 0 or stride % stem:
            raise ValueError(
                f"The total stride in {variant!r} must be a multiple of the {depth} stem's "
                f"stride. Received: stride={stride}, stem stride={stem}"
            )
        config.update(patch_size=stride // stem, resnet_units=units)
        return config
    raise ValueError(
        f"Unknown variant code. Expected 'SIZE/PATCH' with SIZE in {sorted(SIZES)} "
        f"(e.g. 'B/16') or a hybrid like 'R50+B/16'. Received: variant={variant!r}"
    )


def model_name(variant):
    """Keras model name of a code: `"B/16"` -> `"vit_b16"`, `"R50+B/16"` -> `"vit_r50_b16"`."""
    return "vit_" + variant.lower().replace("+", "_").replace("/", "")
