"""`TokenGrid`: a ViT's patch tokens as a `(B, h, w, D)` feature map."""

import keras
from keras import ops

from keras_vit.layers._checks import check_non_negative_int, check_positive_int_pair

__all__ = ["TokenGrid"]


@keras.saving.register_keras_serializable(package="keras_vit")
class TokenGrid(keras.layers.Layer):
    """Drops the prefix tokens and lays the patch tokens out on their grid.

    The grid is read at run time from the tensor the patch encoder embedded (the images, or a
    hybrid stem's feature map): `(H / ph, W / pw)`, so models with `dynamic_image_size` give
    maps of the size of each input.

    Args:
        patch_size: int or (height, width). The patch encoder's patch size.
        num_prefix_tokens: int. Leading class, distillation and register tokens to drop.
            Defaults to 0.

    Call arguments:
        tokens: `(B, prefix + h * w, D)` tokens.
        reference: `(B, H, W, C)` the patch encoder's input.

    Returns:
        `(B, H / ph, W / pw, D)`.

    Example:

    >>> import numpy as np
    >>> grid = TokenGrid(8, num_prefix_tokens=1)
    >>> tuple(grid(np.zeros((2, 7, 4), "float32"), np.zeros((2, 16, 24, 3), "float32")).shape)
    (2, 2, 3, 4)
    """

    def __init__(self, patch_size, num_prefix_tokens=0, **kwargs):
        super().__init__(**kwargs)
        self.patch_size = check_positive_int_pair(patch_size, "patch_size")
        self.num_prefix_tokens = check_non_negative_int(num_prefix_tokens, "num_prefix_tokens")

    def call(self, tokens, reference):
        shape = ops.shape(reference)
        rows, cols = shape[1] // self.patch_size[0], shape[2] // self.patch_size[1]
        static = (tokens.shape[1], reference.shape[1], reference.shape[2])
        if None not in static:
            patches = static[0] - self.num_prefix_tokens
            grid = (static[1] // self.patch_size[0], static[2] // self.patch_size[1])
            if patches != grid[0] * grid[1]:
                raise ValueError(
                    f"Layer '{self.name}' lays patch tokens on the image's {grid[0]}x{grid[1]} "
                    f"grid, but received {patches} patch tokens: tokens were dropped on the way "
                    "(patch dropout runs with training=True). Call the feature extractor with "
                    "training=False, or build the model with patch_dropout_rate=0. Received: "
                    f"tokens shape={tuple(tokens.shape)}"
                )
        patches = tokens[:, self.num_prefix_tokens :]
        return ops.reshape(patches, (ops.shape(tokens)[0], rows, cols, tokens.shape[-1]))

    def compute_output_shape(self, tokens_shape, reference_shape):
        rows, cols = reference_shape[1], reference_shape[2]
        rows = None if rows is None else rows // self.patch_size[0]
        cols = None if cols is None else cols // self.patch_size[1]
        return (tokens_shape[0], rows, cols, tokens_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update({"patch_size": self.patch_size, "num_prefix_tokens": self.num_prefix_tokens})
        return config
