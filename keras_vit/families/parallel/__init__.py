"""timm's parallel-scaling and differential-attention ViTs (vit_*_xp_*, vit_*_diff_*)."""

from keras_vit.families.parallel import timm_names
from keras_vit.weights.registry import ModelFamily, register

FAMILY = register(
    ModelFamily(
        name="parallel",
        description=" ".join(__doc__.split()),
        timm_specs=(*timm_names.FAMILY_SPECS,),
        timm_default_classes={**timm_names.DEFAULT_CLASSES},
    )
)
