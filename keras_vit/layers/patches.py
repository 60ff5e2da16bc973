"""`Patches`: cut an image batch into flattened, non-overlapping patches."""

import keras
from keras import ops

from keras_vit.layers._checks import check_image_shape, check_positive_int_pair

__all__ = ["Patches"]


@keras.saving.register_keras_serializable(package="keras_vit")
class Patches(keras.layers.Layer):
    """Splits images into non-overlapping square or rectangular patches.

    Patches are returned in row-major order over the patch grid and each patch
    is flattened in (row, column, channel) order, so the official ViT
    `embedding/kernel` of shape `(ph, pw, C, D)` reshaped to `(ph * pw * C, D)`
    multiplies the output directly.

    Args:
        patch_size: int or tuple of 2 ints. Patch height and width.

    Call arguments:
        images: float tensor `(B, H, W, C)`; `H` and `W` must be divisible by
            the patch height and width.

    Returns:
        Tensor `(B, (H / ph) * (W / pw), ph * pw * C)`.

    Example:

    >>> import numpy as np
    >>> tuple(Patches(4)(np.zeros((2, 8, 12, 3), "float32")).shape)
    (2, 6, 48)

    Reference:
        Dosovitskiy et al., 2021, Sec. 3.1, Eq. 1.
    """

    def __init__(self, patch_size, **kwargs):
        super().__init__(**kwargs)
        self.patch_size = check_positive_int_pair(patch_size, "patch_size")

    def build(self, input_shape):
        check_image_shape(input_shape, self.patch_size, name=self.name)
        self.built = True

    def call(self, images):
        shape = check_image_shape(images.shape, self.patch_size, name=self.name)
        ph, pw = self.patch_size
        height, width, channels = shape[1], shape[2], shape[3]
        if height is None or width is None:
            height, width = ops.shape(images)[1], ops.shape(images)[2]
        gh, gw = height // ph, width // pw
        batch = ops.shape(images)[0]  # no -1: an empty batch has no size to infer it from
        x = ops.reshape(images, (batch, gh, ph, gw, pw, channels))
        x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
        return ops.reshape(x, (batch, gh * gw, ph * pw * channels))

    def compute_output_shape(self, input_shape):
        check_image_shape(input_shape, self.patch_size, name=self.name)
        batch, height, width, channels = input_shape
        ph, pw = self.patch_size
        num = None if height is None or width is None else (height // ph) * (width // pw)
        return (batch, num, ph * pw * channels)

    def get_config(self):
        config = super().get_config()
        config.update({"patch_size": self.patch_size})
        return config
