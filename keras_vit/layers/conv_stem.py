"""The convolutional stem of timm's `vit_base_mci_224` (MobileCLIP's image tower), functional.

timm's `ConvStem` (vision_transformer_hybrid.py) as `vit_base_mci_224` builds it: three
non-overlapping convolutions (kernel = stride 4, 2, 2; no padding), the first two without bias
and followed by BatchNorm (epsilon 1e-5) and exact (erf) GELU, the last with a bias and
nothing after it, whose output is the token embedding (timm's `HybridEmbed(proj=False)`). The
last convolution is a patch embedding with patch size = its stride on the second one's feature
map, so here the stem is the first convolutions with their norms and activations, and the
model's `PatchEncoder` (patch size 2, its bias) is timm's last convolution.

Layer names: `stem_conv{i}`, `stem_bn{i}`, `stem_gelu{i}` (timm's `backbone.{i-1}.conv`,
`backbone.{i-1}.bn`).

Reference:
    Vasu et al., 2024, "MobileCLIP: Fast Image-Text Models through Multi-Modal Reinforced
    Training"; timm's vision_transformer_hybrid.py.
"""

import keras

from keras_vit.layers.resnet_d import BATCH_NORM_EPSILON, batch_norm

__all__ = ["conv_stem"]


def conv_stem(x, stem_widths, stem_strides, *, norm_epsilon=BATCH_NORM_EPSILON, dtype=None):
    """Non-overlapping conv -> BatchNorm -> GELU layers on the functional tensor `x`.

    Args:
        x: functional `(B, H, W, C)` tensor.
        stem_widths: sequence of int. Output channels of each convolution (`(192,)` for
            `vit_base_mci_224`, whose third convolution is the patch embedding).
        stem_strides: sequence of int, as long as `stem_widths`. Kernel size and stride of
            each convolution (`(4, 2)` for `vit_base_mci_224`).
        norm_epsilon: float. BatchNorm epsilon. Defaults to 1e-5 (timm's).
        dtype: optional dtype policy of every layer. Defaults to None (the global policy).

    Returns:
        The `(B, H / prod(stem_strides), W / prod(stem_strides), stem_widths[-1])` feature
        map.

    Example:

    >>> import keras
    >>> conv_stem(keras.Input((32, 32, 3)), (8, 8), (4, 2)).shape
    (None, 4, 4, 8)
    """
    for i, (width, stride) in enumerate(zip(stem_widths, stem_strides, strict=True), start=1):
        x = keras.layers.Conv2D(
            width, stride, strides=stride, use_bias=False, name=f"stem_conv{i}", dtype=dtype
        )(x)
        x = batch_norm(f"stem_bn{i}", epsilon=norm_epsilon, dtype=dtype)(x)
        x = keras.layers.Activation("gelu", name=f"stem_gelu{i}", dtype=dtype)(x)
    return x
