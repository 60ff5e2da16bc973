"""Rotary position embeddings of NaFlex batches: one table row per token, from its coordinates.

A NaFlex batch mixes images of different patch grids (`keras_vit.models.naflex`). timm's
`NaFlexVit(pos_embed='rope')` builds the rotary table of each image's own grid `(h, w)` (its
largest `patch_coord` + 1) and puts it on the image's first `h * w` tokens (padding gets
zeros). Every table of `keras_vit.layers.rotary` / `rotary_mixed` is a function of a token's
row and column position and, where the variant rescales positions (EVA-02's
`reference_grid_size`, DINOv3's patch centres on [-1, 1]), of its image's grid size; so here
each token's sines and cosines are computed from its own `(y, x)` and its image's `(h, w)` with
`keras.ops` (no loop over images; any grid known only at run time). That equals timm's tables
on the batches its NaFlex loader (and `keras_vit.data.naflex_batch`) makes: each image's valid
tokens first, in row-major order. Padding tokens get the table of position `(0, 0)`: finite,
and harmless, since their keys are masked and nothing reads their outputs.
"""

import keras
from keras import ops

from keras_vit.layers._shared_arguments import declared_defaults, shows_keywords
from keras_vit.layers.naflex_position import image_grids
from keras_vit.layers.rotary import (
    RotaryEmbedding2D,
    dinov3_angles,
    dinov3_denominators,
    token_table,
)
from keras_vit.layers.rotary_mixed import MixedRotaryEmbedding, mixed_token_table

__all__ = ["NaFlexMixedRotaryEmbedding", "NaFlexRotaryEmbedding"]


def token_positions(patch_coord, patch_valid):
    """float32 `(B, N)` rows and columns of each token (padding: 0), and its image's grid
    `(B, N)` rows and columns (the largest valid coordinate + 1)."""
    rows, columns = image_grids(patch_coord, patch_valid)
    valid = ops.cast(patch_valid, "bool")[..., None]
    coord = ops.cast(patch_coord, "int32")
    coord = ops.cast(ops.where(valid, coord, ops.zeros_like(coord)), "float32")
    y, x = coord[..., 0], coord[..., 1]
    n_rows = ops.broadcast_to(ops.cast(rows, "float32")[:, None], ops.shape(y))
    n_columns = ops.broadcast_to(ops.cast(columns, "float32")[:, None], ops.shape(x))
    return y, x, n_rows, n_columns


def _check_inputs(patch_coord_shape, name):
    if len(patch_coord_shape) != 3 or patch_coord_shape[-1] not in (None, 2):
        raise ValueError(
            f"{name} expects patch_coord (batch, tokens, 2) and patch_valid (batch, tokens). "
            f"Received: patch_coord shape={tuple(patch_coord_shape)}"
        )


@keras.saving.register_keras_serializable(package="keras_vit")
class NaFlexRotaryEmbedding(RotaryEmbedding2D):
    """EVA-02's, RoPE-ViT's axial or DINOv3's 2-D RoPE for each token of a NaFlex batch.

    The tables of `keras_vit.layers.RotaryEmbedding2D` (same arguments, same numbers for a
    token at the same place of the same grid), computed per token from `patch_coord` and each
    image's grid (`patch_valid` says which tokens count), as timm's `NaFlexVit` with
    `rope_type='axial'` (`grid_indexing="ij"`: our `"eva02"`; `"xy"`: our `"axial"`) or
    `'dinov3'` does. The attention layers rotate each image's patch queries and keys by its
    own rows (`MultiHeadSelfAttention(...)(tokens, rotary_embedding=...)`).

    Args:
        head_dim: int. The attention's per-head width, divisible by 4.
        temperature: float. Defaults to 10000.
        reference_grid_size: optional int or `(H, W)`: each image's positions are rescaled so
            that its grid spans this one (timm's `rope_ref_feat_shape`). Defaults to None.
        grid_offset: float. Defaults to 0.
        grid_indexing: `"ij"` (rows first) or `"xy"` (columns first). Defaults to `"ij"`.
        kind: `"eva02"` (integer positions) or `"dinov3"` (each image's patch centres on
            [-1, 1]). Defaults to `"eva02"`.
        normalize_coords: DINOv3's denominator: `"separate"`, `"min"` or `"max"` of each
            image's `(h, w)`. Defaults to `"separate"`.

    Call arguments:
        patch_coord: integer `(B, N, 2)` `(y, x)` grid positions.
        patch_valid: boolean `(B, N)`.

    Returns:
        float32 `(B, N, 1, 2 * head_dim)`: sines then cosines (the `1` broadcasts over heads).

    Example:

    >>> import numpy as np
    >>> coord = np.array([[[0, 0], [0, 1], [1, 0], [1, 1]]], "int32")
    >>> rope = NaFlexRotaryEmbedding(head_dim=8)
    >>> tuple(rope(coord, np.ones((1, 4), bool)).shape)
    (1, 4, 1, 16)

    Reference:
        Dehghani et al., 2023 (NaViT); Fang et al., 2023 (EVA-02), Sec. 2; timm `naflexvit.py`.
    """

    # `RotaryEmbedding2D`'s arguments and defaults but `patch_size` (the coordinates are patch
    # indices already), taken by keyword.
    @shows_keywords(declared_defaults(RotaryEmbedding2D.__init__, leave_out=("patch_size",)))
    def __init__(self, head_dim, **kwargs):
        super().__init__(head_dim, **kwargs)

    def call(self, patch_coord, patch_valid):
        y, x, n_rows, n_columns = token_positions(patch_coord, patch_valid)
        if self.kind == "dinov3":
            size_h, size_w = dinov3_denominators(n_rows, n_columns, self.normalize_coords)
            offset = 0.5 + self.grid_offset
            rows, cols = dinov3_angles(y + offset, size_h), dinov3_angles(x + offset, size_w)
            table = token_table(rows, cols, self.head_dim, self.temperature, periods=True)
        else:
            rows, cols = y + self.grid_offset, x + self.grid_offset
            if self.reference_grid_size is not None:
                ref_h, ref_w = self.reference_grid_size
                rows, cols = rows / n_rows * float(ref_h), cols / n_columns * float(ref_w)
            table = token_table(rows, cols, self.head_dim, self.temperature, self.grid_indexing)
        return table[:, :, None, :]

    def build(self, patch_coord_shape, patch_valid_shape=None):
        _check_inputs(patch_coord_shape, self.name)
        self.built = True

    def compute_output_shape(self, patch_coord_shape, patch_valid_shape=None):
        return (*patch_coord_shape[:2], 1, 2 * self.head_dim)

    def get_config(self):
        config = super().get_config()
        del config["patch_size"]  # (the coordinates are patch indices already)
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class NaFlexMixedRotaryEmbedding(MixedRotaryEmbedding):
    """RoPE-ViT's mixed RoPE for each token of a NaFlex batch: one table per block and image.

    `keras_vit.layers.MixedRotaryEmbedding`'s learned `frequencies` `(2, num_layers,
    num_heads, head_dim / 2)` (the same weight: timm's `rope.freqs`), the angles
    `x * fx + y * fy` of each token's own column `x` and row `y` (`patch_coord`), as timm's
    `NaFlexVit(rope_type='mixed', rope_grid_indexing='xy')` (timm's `'ij'` swaps the two
    frequency rows: the checkpoint loader swaps them back).

    Args:
        num_layers: int. Blocks (one table each).
        num_heads: int. Attention heads.
        head_dim: int. Per-head width, divisible by 4.
        temperature: float. Of the initial magnitudes. Defaults to 10 (timm's).

    Call arguments:
        patch_coord: integer `(B, N, 2)` `(y, x)` grid positions.
        patch_valid: boolean `(B, N)`.

    Returns:
        A list of `num_layers` float32 tensors `(B, N, num_heads, 2 * head_dim)`.

    Example:

    >>> import numpy as np
    >>> rope = NaFlexMixedRotaryEmbedding(num_layers=2, num_heads=3, head_dim=8)
    >>> coord = np.zeros((1, 5, 2), "int32")
    >>> [tuple(t.shape) for t in rope(coord, np.ones((1, 5), bool))]
    [(1, 5, 3, 16), (1, 5, 3, 16)]

    Reference:
        Heo et al., 2024 (arXiv 2403.13298), Sec. 3.3; timm `naflexvit.py`.
    """

    def __init__(self, num_layers, num_heads, head_dim, temperature=10.0, **kwargs):
        super().__init__(num_layers, num_heads, head_dim, temperature=temperature, **kwargs)

    def build(self, patch_coord_shape, patch_valid_shape=None):
        _check_inputs(patch_coord_shape, self.name)
        super().build(patch_coord_shape)

    def call(self, patch_coord, patch_valid):
        y, x, _, _ = token_positions(patch_coord, patch_valid)
        return [
            mixed_token_table(x, y, self.frequencies[:, layer]) for layer in range(self.num_layers)
        ]

    def compute_output_shape(self, patch_coord_shape, patch_valid_shape=None):
        shape = (*patch_coord_shape[:2], self.num_heads, 2 * self.head_dim)
        return [shape] * self.num_layers

    def get_config(self):
        config = super().get_config()
        del config["patch_size"]  # (the coordinates are patch indices already)
        return config
