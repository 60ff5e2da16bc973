"""ViTs on a convolutional stem: timm's ResNet-D hybrids and MobileCLIP (vit_*_resnet*,
vit_*_mci_*).
"""

from keras_vit.families.stems import timm_names
from keras_vit.weights.registry import ModelFamily, register

FAMILY = register(
    ModelFamily(
        name="stems",
        description=" ".join(__doc__.split()),
        timm_specs=(*timm_names.FAMILY_SPECS,),
        timm_default_classes={**timm_names.DEFAULT_CLASSES},
    )
)
