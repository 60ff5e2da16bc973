"""SAM's image encoder (timm's samvit_*: windowed and global attention with decomposed relative
positions, a conv neck): a model of its own kind (`SAMImageEncoder`), read by the family's own
timm reader."""

from keras_vit.families.sam import timm_names
from keras_vit.weights.registry import ModelFamily, register

FAMILY = register(
    ModelFamily(
        name="sam",
        description=" ".join(__doc__.split()),
        timm_specs=timm_names.FAMILY_SPECS,
        timm_default_classes=timm_names.DEFAULT_CLASSES,
        timm_headless=timm_names.HEADLESS,
        timm_reader="keras_vit.families.sam.timm:from_timm_sam",
        timm_patterns=(timm_names.PATTERN,),
    )
)
