"""The named hybrid builders: a BiT ResNetV2 stem feeding the plain ViT (`ViTR50B16`, ...).

The paper's Hybrid Architecture (Sec. 3.1): the patch embedding is applied to
patches of a CNN feature map instead of raw pixels. The stem is the ResNet of
the official models (`keras_vit.layers.resnet`, with `keras_vit.layers.StdConv2D`);
its feature map goes into the same `PatchEncoder` (patch size 1 for the
official R50/R26 models) and the same encoder and heads as `keras_vit.ViT`,
which builds hybrids from hybrid codes (`ViT("R50+B/16")`); the builders here
are one line each on top of it.

Layer names follow the official checkpoint one to one: `conv_root`, `gn_root`,
`block{s}_unit{u}_conv{1,2,3}`, `block{s}_unit{u}_gn{1,2,3}`,
`block{s}_unit1_conv_proj`, `block{s}_unit1_gn_proj` (official
`block{s}/unit{u}/conv1/kernel` etc.), then the plain ViT's.
"""

from keras_vit.models.vit import named_builder

__all__ = ["ViTR26B32", "ViTR26S32", "ViTR50B16", "ViTR50L32", "ViTRTi16"]

ViTR50B16 = named_builder("R50+B/16", __name__)
ViTR26S32 = named_builder("R26+S/32", __name__)
ViTR26B32 = named_builder("R26+B/32", __name__)
ViTRTi16 = named_builder("R+Ti/16", __name__)
ViTR50L32 = named_builder("R50+L/32", __name__)
