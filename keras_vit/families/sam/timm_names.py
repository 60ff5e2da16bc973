"""timm's SAM image encoder names (`samvit_*`, timm 1.0.31's `vision_transformer_sam.py`): pure
data (`SAMConfig` arguments).

`samvit_{base,large,huge}_patch16`: SAM's encoders at 1024 px (14 x 14 windows, four global
blocks, decomposed relative positions, a learned position grid, the 256-wide conv neck, no
head); `samvit_base_patch16_224`: the same blocks at 224 px without the position grid and with
a LayerNorm neck and timm's 1000-class head. Read by the family's own reader
(`keras_vit.families.sam.timm.from_timm_sam`).
"""

__all__ = ["DEFAULT_CLASSES", "FAMILY_SPECS", "HEADLESS", "PATTERN", "SIZES"]

# size: (hidden_dim, num_layers, num_heads, global_attention_indexes)
SIZES = {
    "base": (768, 12, 12, (2, 5, 8, 11)),
    "large": (1024, 24, 16, (5, 11, 17, 23)),
    "huge": (1280, 32, 16, (7, 15, 23, 31)),
}
PATTERN = r"samvit_(?P<size>base|large|huge)_patch(?P<patch>16)(?:_(?P<res>224))?"


def sam_arguments(groups):
    """`SAMConfig` arguments of a parsed `samvit_*` name (plus its `image_size`)."""
    hidden, layers, heads, global_blocks = SIZES[groups["size"]]
    small = groups.get("res") == "224"  # samvit_base_patch16_224: timm's classifier
    return {
        "image_size": 224 if small else 1024,
        "patch_size": 16,
        "hidden_dim": hidden,
        "num_layers": layers,
        "num_heads": heads,
        "mlp_dim": 4 * hidden,
        "window_size": 14,
        "global_attention_indexes": global_blocks,
        "absolute_position": not small,
        "neck_dim": None if small else 256,
        "_layout": "sam",
    }


FAMILY_SPECS = (
    (
        "samvit",
        PATTERN,
        "samvit_base_patch16.sa1b",
        "SAM's image encoder (windowed and global attention blocks with decomposed relative "
        "positions, a learned position grid, a conv neck; samvit_base_patch16_224: a classifier)",
        sam_arguments,
    ),
)
HEADLESS = ("samvit",)  # SAM's pretrained configs have num_classes=0
DEFAULT_CLASSES = {"samvit_base_patch16_224": 1000}
