"""`GridCellPooling`: average the patch tokens of each `k x k` cell of the grid.

Gemma 4's vision pooler (timm's `Gemma4VisionPooler`): the tokens of a `h x w` grid (row-major)
become `h/k * w/k` soft tokens (row-major over the cells), each the mean of its cell, times
`sqrt(D)` with `scale_by_root_width`. Computed in float32.
"""

import math

import keras
from keras import ops

from keras_vit.layers._checks import check_bool, check_positive_int

__all__ = ["GridCellPooling"]


@keras.saving.register_keras_serializable(package="keras_vit")
class GridCellPooling(keras.layers.Layer):
    """Mean over `kernel_size x kernel_size` cells of a token grid.

    Args:
        kernel_size: int. The cell side, in tokens.
        scale_by_root_width: bool. Multiply by `sqrt(D)`. Defaults to True.

    Call arguments:
        inputs: `(B, h * w, D)`.
        grid_size: `(h, w)`, each a multiple of `kernel_size`.

    Returns:
        `(B, h/k * w/k, D)`.

    Example:

    >>> import numpy as np
    >>> pool = GridCellPooling(2)
    >>> tuple(pool(np.ones((1, 24, 4), "float32"), grid_size=(4, 6)).shape)
    (1, 6, 4)
    """

    def __init__(self, kernel_size, scale_by_root_width=True, **kwargs):
        super().__init__(**kwargs)
        self.kernel_size = check_positive_int(kernel_size, "kernel_size")
        self.scale_by_root_width = check_bool(scale_by_root_width, "scale_by_root_width")

    def _check(self, grid_size):
        k = self.kernel_size
        height, width = grid_size
        if height % k or width % k:
            raise ValueError(
                f"{self.name}: both grid sides must be multiples of kernel_size={k}. "
                f"Received: grid_size={tuple(grid_size)}"
            )
        return height, width

    def call(self, inputs, grid_size):
        height, width = self._check(grid_size)
        k, width_d = self.kernel_size, inputs.shape[-1]
        x = ops.cast(inputs, "float32")
        batch = ops.shape(x)[0]  # no -1: an empty batch has no size to infer it from
        x = ops.reshape(x, (batch, height // k, k, width // k, k, width_d))
        x = ops.mean(x, axis=(2, 4))
        x = ops.reshape(x, (batch, (height // k) * (width // k), width_d))
        if self.scale_by_root_width:
            x = x * math.sqrt(width_d)
        return ops.cast(x, inputs.dtype)

    def compute_output_shape(self, input_shape, grid_size=None):
        if grid_size is None:
            return (input_shape[0], None, input_shape[-1])
        height, width = self._check(grid_size)
        cells = (height // self.kernel_size) * (width // self.kernel_size)
        return (input_shape[0], cells, input_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(
            {"kernel_size": self.kernel_size, "scale_by_root_width": self.scale_by_root_width}
        )
        return config
