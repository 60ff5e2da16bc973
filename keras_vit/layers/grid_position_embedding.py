"""`GridPositionEmbedding`: a learned absolute position embedding added to a token grid.

`x + table` for a `(B, h, w, D)` grid and a learned `(1, h, w, D)` table (ViTDet's and SAM's
`pos_embed`, timm's `VisionTransformerSAM` with `use_abs_pos=True`). A checkpoint's table of
another grid is resampled when it is loaded (`resample_grid_table`: bicubic with
antialiasing, as timm's `resample_abs_pos_embed_nhwc`).
"""

import keras
import numpy as np

from keras_vit.layers._checks import check_positive_int_pair
from keras_vit.layers._same_shape import SameShape
from keras_vit.layers.position_embedding import resample_position_embedding

__all__ = ["GridPositionEmbedding", "resample_grid_table"]


@keras.saving.register_keras_serializable(package="keras_vit")
class GridPositionEmbedding(SameShape, keras.layers.Layer):
    """Adds a learned `(1, h, w, D)` position table to a `(B, h, w, D)` token grid.

    Args:
        grid_size: int or `(h, w)`. The grid the table covers (the input's).

    Example:

    >>> import numpy as np
    >>> layer = GridPositionEmbedding(grid_size=(2, 3))
    >>> tuple(layer(np.zeros((1, 2, 3, 8), "float32")).shape)
    (1, 2, 3, 8)
    """

    CONFIG_KEYS = ("grid_size",)

    def __init__(self, grid_size, **kwargs):
        super().__init__(**kwargs)
        self.grid_size = check_positive_int_pair(grid_size, "grid_size")

    def build(self, input_shape):
        shape = tuple(input_shape)
        if len(shape) != 4 or tuple(shape[1:3]) != self.grid_size or shape[-1] is None:
            raise ValueError(
                f"{self.name} expects a (B, {self.grid_size[0]}, {self.grid_size[1]}, D) grid. "
                f"Received: input_shape={shape}"
            )
        self.table = self.add_weight(
            name="table",
            shape=(1, *self.grid_size, shape[-1]),
            initializer=keras.initializers.TruncatedNormal(stddev=0.02),
        )
        self.built = True

    def call(self, inputs):
        return inputs + keras.ops.cast(self.table, inputs.dtype)


def resample_grid_table(table, grid_size):
    """A `(1, h, w, D)` table resampled to `grid_size` (bicubic, antialiased: timm's
    `resample_abs_pos_embed_nhwc`), as a NumPy array."""
    table = np.asarray(table)
    height, width = check_positive_int_pair(grid_size, "grid_size")
    if tuple(table.shape[1:3]) == (height, width):
        return table
    flat = table.reshape(1, -1, table.shape[-1])
    resampled = resample_position_embedding(
        flat, (height, width), 0, old_grid=tuple(table.shape[1:3]), interpolation="bicubic"
    )
    return np.asarray(resampled).reshape(1, height, width, table.shape[-1])
