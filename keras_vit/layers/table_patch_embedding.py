"""`TablePatchEmbedding`: a linear patch projection plus a 2-D position-embedding table.

Gemma 4's vision tower (timm's `Gemma4PatchEmbed`) flattens each patch channels first
(`C, P, P`), projects it without a bias, and adds one learned row per column and one per row
of a `(2, table_size, D)` table (`table[0][x] + table[1][y]`): the table covers any grid up to
`table_size` patches a side, with no resampling.
"""

import keras
from keras import ops

from keras_vit.layers._checks import check_positive_int, check_positive_int_pair
from keras_vit.layers.sharding import WIDTH

__all__ = ["TablePatchEmbedding", "grid_coordinates"]


def grid_coordinates(height, width):
    """The `(rows, cols)` of a `height x width` grid's tokens in row-major order, `(N,)` each."""
    rows = ops.repeat(ops.arange(height, dtype="int32"), width)
    cols = ops.tile(ops.arange(width, dtype="int32"), (height,))
    return rows, cols


@keras.saving.register_keras_serializable(package="keras_vit")
class TablePatchEmbedding(keras.layers.Layer):
    """Images `(B, H, W, C)` -> patch tokens `(B, H/P * W/P, D)` with table positions.

    Args:
        hidden_dim: int. Token width D.
        patch_size: int or `(height, width)`.
        table_size: int. Rows of the position table per axis (the largest grid side).
            Defaults to 10240.

    Call arguments:
        inputs: `(B, H, W, C)`, H and W multiples of the patch size.

    Returns:
        `(B, N, D)`, tokens in row-major order.

    Example:

    >>> import numpy as np
    >>> layer = TablePatchEmbedding(hidden_dim=8, patch_size=4, table_size=16)
    >>> tuple(layer(np.zeros((1, 16, 8, 3), "float32")).shape)
    (1, 8, 8)
    """

    # Tensor-parallel roles of the projections (keras_vit.layers.sharding).
    sharding_roles = {"kernel|position_table": WIDTH}

    def __init__(self, hidden_dim, patch_size, table_size=10240, **kwargs):
        super().__init__(**kwargs)
        self.hidden_dim = check_positive_int(hidden_dim, "hidden_dim")
        self.patch_size = check_positive_int_pair(patch_size, "patch_size")
        self.table_size = check_positive_int(table_size, "table_size")

    def _grid(self, input_shape):
        shape = tuple(input_shape)
        if len(shape) != 4 or None in shape[1:]:
            raise ValueError(
                f"{self.name} expects (B, H, W, C) images of a known size. Received: {shape}"
            )
        (height, width), (ph, pw) = shape[1:3], self.patch_size
        if height % ph or width % pw:
            raise ValueError(
                f"{self.name}: image size must be a multiple of the patch size. Received: "
                f"image size={(height, width)}, patch_size={self.patch_size}"
            )
        if max(height // ph, width // pw) > self.table_size:
            raise ValueError(
                f"{self.name}: a grid of {(height // ph, width // pw)} patches needs "
                f"table_size >= {max(height // ph, width // pw)}. Received: "
                f"table_size={self.table_size}"
            )
        return height // ph, width // pw

    def build(self, input_shape):
        self._grid(input_shape)
        ph, pw = self.patch_size
        self.kernel = self.add_weight(
            shape=(input_shape[-1] * ph * pw, self.hidden_dim),
            initializer=keras.initializers.TruncatedNormal(stddev=0.02),
            name="kernel",
        )
        self.position_table = self.add_weight(
            shape=(2, self.table_size, self.hidden_dim),
            initializer=keras.initializers.TruncatedNormal(stddev=0.02),
            name="position_table",
        )
        self.built = True

    def call(self, inputs):
        height, width = self._grid(inputs.shape)
        (ph, pw), channels = self.patch_size, inputs.shape[-1]
        x = ops.reshape(inputs, (-1, height, ph, width, pw, channels))
        x = ops.transpose(x, (0, 1, 3, 5, 2, 4))  # (B, h, w, C, ph, pw): channels first
        x = ops.reshape(x, (-1, height * width, channels * ph * pw))
        x = ops.matmul(x, ops.cast(self.kernel, x.dtype))
        rows, cols = grid_coordinates(height, width)
        table = ops.cast(self.position_table, x.dtype)
        positions = ops.take(table[0], cols, axis=0) + ops.take(table[1], rows, axis=0)
        return x + positions[None]

    def compute_output_shape(self, input_shape):
        height, width = self._grid(input_shape)
        return (input_shape[0], height * width, self.hidden_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "hidden_dim": self.hidden_dim,
                "patch_size": self.patch_size,
                "table_size": self.table_size,
            }
        )
        return config
