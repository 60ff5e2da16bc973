"""`PositionTable`: the position-embedding methods of `PatchEncoder`.

Reading the patch rows of the table at the layer's own grid or another (resampled as timm's
`dynamic_img_size`, or a new `"sincos2d"` table), and resampling or loading a learned table
from another grid (checkpoint loaders, fine-tuning at another resolution). A mixin of
`keras_vit.layers.PatchEncoder`, which holds the table and its options (`position_embedding`,
`position_embeddings`, `grid_size`, `hidden_dim`, `num_prefix_positions`, the
`position_embedding_*` resize options).
"""

import keras
import numpy as np
from keras import ops

from keras_vit.layers import bicubic, naflex_position
from keras_vit.layers import position_embedding as pe


class PositionTable:
    """The position-embedding methods of a patch encoder (see the module docstring)."""

    def patch_position_embedding(self, grid_size=None):
        """The position embedding of the patch tokens `(1, rows * columns, D)`, or None.

        Args:
            grid_size: optional `(rows, columns)` (ints or scalar tensors); the layer's own
                grid when None. Another grid resamples the learned table as timm's
                `dynamic_img_size` does (antialiased bicubic) and computes a new
                `"sincos2d"` table.
        """
        if self.position_embedding is None:
            return None
        own = grid_size is None or all(
            isinstance(g, int) and g == o for g, o in zip(grid_size, self.grid_size, strict=True)
        )
        if self.position_embedding == "sincos2d":
            if own:
                return ops.convert_to_tensor(self._sincos_table)
            return pe.sincos_2d_position_embedding_ops(grid_size, self.hidden_dim)
        table = self.position_embeddings[:, self.num_prefix_positions :]
        if own:
            return table
        grid = ops.reshape(table, (self.grid_size[0], self.grid_size[1], self.hidden_dim))
        resize = (
            self.position_embedding_interpolation,
            self.position_embedding_antialias,
            self.position_embedding_align_corners,
        )
        if resize == ("bicubic", True, False):
            grid = bicubic.resize_bicubic_ops(grid, grid_size)
        else:
            grid = naflex_position.resize_table(grid, grid_size, *resize)
        return ops.reshape(grid, (1, -1, self.hidden_dim))

    def resampled_position_embedding(self, grid_size, interpolation="linear"):
        """Returns this layer's learned position embedding resampled to `grid_size` (NumPy).

        Args:
            grid_size: (rows, columns) target grid.
            interpolation: `"linear"` (the official loader) or `"bicubic"` (timm). Defaults
                to `"linear"`.

        Returns:
            float32 `(1, num_prefix_positions + rows * columns, D)`; the prefix rows are kept.
        """
        self._require_learned()
        return pe.resample_position_embedding(
            keras.ops.convert_to_numpy(self.position_embeddings),
            grid_size,
            num_prefix_tokens=self.num_prefix_positions,
            old_grid=self.grid_size,
            interpolation=interpolation,
        )

    def load_position_embedding(self, posemb, source_grid=None, interpolation="linear"):
        """Assigns a learned position embedding from another grid, resampling it.

        Args:
            posemb: array `(1, prefix + gh * gw, D)` with as many prefix rows as this
                layer's table (`num_prefix_positions`: 0 without prefix rows, 1 for a
                class token, more with distillation or register tokens).
            source_grid: optional (gh, gw); a square grid is inferred when None.
            interpolation: `"linear"` (the official loader) or `"bicubic"` (timm).
                Defaults to `"linear"`.
        """
        self._require_learned()
        posemb = np.asarray(posemb)
        if posemb.ndim != 3 or posemb.shape[-1] != self.hidden_dim:
            raise ValueError(
                f"position embedding must have shape (1, tokens, {self.hidden_dim}). "
                f"Received: shape={posemb.shape}"
            )
        resampled = pe.resample_position_embedding(
            posemb,
            self.grid_size,
            self.num_prefix_positions,
            old_grid=source_grid,
            interpolation=interpolation,
        )
        self.position_embeddings.assign(resampled)

    def _require_learned(self):
        if not self.built or self.position_embedding != "learned":
            raise ValueError(
                f"Layer '{self.name}' has no learned position embedding to resample "
                f"(built={self.built}, position_embedding={self.position_embedding!r})."
            )
