"""2-D axial rotary position embeddings (RoPE) of EVA-02, RoPE-ViT and DINOv3.

EVA-02 and RoPE-ViT (timm's `RotaryEmbeddingCat`) differ only in the order of the axes in each
token's angles: EVA-02's rows then columns (timm's `grid_indexing="ij"`), RoPE-ViT's columns
then rows (`"xy"`, with temperature 100). DINOv3 (timm's `RotaryEmbeddingDinoV3`, eval mode)
puts the patch centres on [-1, 1] and uses angles `2 pi * position / period`. All three are the
same axial table of per-axis angles (`_axial_table`), rotating interleaved pairs
(`apply_rotary_embedding`). `keras_vit.layers.rotary_mixed` shares the grid positions for
RoPE-ViT's mixed variant.
"""

import math

import keras
from keras import ops

from keras_vit.layers._checks import check_positive_int, check_positive_int_pair

__all__ = [
    "RotaryEmbedding2D",
    "apply_rotary_embedding",
    "dinov3_rotary_embedding_2d",
    "rotary_embedding_2d",
]


def _check_head_dim(head_dim):
    check_positive_int(head_dim, "head_dim")
    if head_dim % 4:
        raise ValueError(
            "2-D rotary embeddings need a head width divisible by 4 (a quarter of it per axis "
            f"for sine and cosine). Received: head_dim={head_dim}"
        )
    return head_dim


GRID_INDEXINGS = ("ij", "xy")
# The tables `RotaryEmbedding2D` computes: integer positions (EVA-02, RoPE-ViT) or DINOv3's.
KINDS = ("eva02", "dinov3")
# DINOv3's coordinate normalisation: each axis by its own size, or both by the min / max.
NORMALIZE_COORDS = ("separate", "min", "max")


def check_grid_indexing(grid_indexing):
    if grid_indexing not in GRID_INDEXINGS:
        raise ValueError(
            f"grid_indexing must be one of {GRID_INDEXINGS}. "
            f"Received: grid_indexing={grid_indexing!r}"
        )
    return grid_indexing


def grid_positions(grid_size, reference_grid_size=None, grid_offset=0.0):
    """The float32 row and column positions `(H,)`, `(W,)` of a grid (timm's `_build_grid`).

    `arange(H) + grid_offset` and `arange(W) + grid_offset`, rescaled by `reference / size`
    per axis when `reference_grid_size` is set. `grid_size` holds ints or scalar tensors.
    """
    height, width = grid_size
    rows = ops.cast(ops.arange(height), "float32") + grid_offset
    cols = ops.cast(ops.arange(width), "float32") + grid_offset
    if reference_grid_size is not None:
        ref_h, ref_w = reference_grid_size
        rows = rows / ops.cast(height, "float32") * float(ref_h)
        cols = cols / ops.cast(width, "float32") * float(ref_w)
    return rows, cols


def rotary_embedding_2d(
    grid_size,
    head_dim,
    temperature=10000.0,
    reference_grid_size=None,
    grid_offset=0.0,
    grid_indexing="ij",
):
    """The `(H * W, 2 * head_dim)` sines then cosines of EVA-02's axial 2-D RoPE on a grid.

    timm's `RotaryEmbeddingCat(in_pixels=False)` (`build_rotary_pos_embed`): `head_dim / 4`
    frequencies `temperature ** (-i / (head_dim / 4))`; positions `arange(H) + grid_offset`
    (rows) and `arange(W) + grid_offset` (columns), rescaled by `reference / size` per axis when
    `reference_grid_size` is set (EVA-02 fine-tuned at another size keeps its pre-training
    positions); each token's angles are its row angles then its column angles, each repeated
    twice (the interleaved pairs `(x0, x1), (x2, x3), ...` that `apply_rotary_embedding`
    rotates). With `grid_indexing="xy"` (RoPE-ViT, timm's `rope_grid_indexing='xy'`) the
    column angles come first, then the row angles. Row-major tokens, as the patch encoder
    flattens them.

    Args:
        grid_size: `(H, W)`: ints, or scalar tensors (a grid known only at run time).
        head_dim: int. The per-head width, divisible by 4.
        temperature: float. Defaults to 10000.
        reference_grid_size: optional `(H, W)` the positions are rescaled to. Defaults to None.
        grid_offset: float added to the integer positions. Defaults to 0.
        grid_indexing: `"ij"` (rows first) or `"xy"` (columns first). Defaults to `"ij"`.

    Returns:
        float32 tensor `(H * W, 2 * head_dim)`: `concat([sin, cos], -1)`.

    Example:

    >>> tuple(rotary_embedding_2d((2, 3), head_dim=8).shape)
    (6, 16)
    """
    _check_head_dim(head_dim)
    check_grid_indexing(grid_indexing)
    rows, cols = grid_positions(grid_size, reference_grid_size, grid_offset)
    return _axial_table(rows, cols, grid_size, head_dim, temperature, grid_indexing)


def dinov3_rotary_embedding_2d(
    grid_size, head_dim, temperature=100.0, normalize_coords="separate", grid_offset=0.0
):
    """The `(H * W, 2 * head_dim)` sines then cosines of DINOv3's 2-D RoPE on a grid (eval).

    timm's `RotaryEmbeddingDinoV3` without its training-time augmentations (shift, jitter,
    rescale: off in eval mode) and transformers' `DINOv3ViTRopePositionEmbedding`: patch
    centres `(arange(H) + 0.5 + grid_offset) / denominator` mapped to `[-1, 1]` (`2 c - 1`),
    the denominator being each axis's own size (`"separate"`) or `min(H, W)` / `max(H, W)`;
    angles `2 pi * c / period` with periods `temperature ** (i / (head_dim / 4))` (the EVA-02
    frequencies, so `_axial_table` is shared; rows first, timm's `"ij"`). DINOv3 rotates the
    two halves of a head (`x[:d/2]` with `x[d/2:]`); this table is laid out for the
    interleaved pairs of `apply_rotary_embedding`, which is the same attention once the query
    and key channels of each head are reordered `(0, d/2, 1, d/2 + 1, ...)` (what the
    checkpoint loaders do).

    Args:
        grid_size: `(H, W)`: ints, or scalar tensors (a grid known only at run time).
        head_dim: int. The per-head width, divisible by 4.
        temperature: float. The period base (timm's `rope_temperature`). Defaults to 100.
        normalize_coords: `"separate"`, `"min"` or `"max"`. Defaults to `"separate"`.
        grid_offset: float added to the patch centres before normalising. Defaults to 0.

    Returns:
        float32 tensor `(H * W, 2 * head_dim)`: `concat([sin, cos], -1)`.

    Example:

    >>> tuple(dinov3_rotary_embedding_2d((2, 3), head_dim=8).shape)
    (6, 16)
    """
    _check_head_dim(head_dim)
    if normalize_coords not in NORMALIZE_COORDS:
        raise ValueError(
            f"normalize_coords must be one of {NORMALIZE_COORDS}. "
            f"Received: normalize_coords={normalize_coords!r}"
        )
    size_h, size_w = dinov3_denominators(*grid_size, normalize_coords)
    rows, cols = grid_positions(grid_size, None, 0.5 + grid_offset)
    rows, cols = dinov3_angles(rows, size_h), dinov3_angles(cols, size_w)
    return _axial_table(rows, cols, grid_size, head_dim, temperature, periods=True)


def dinov3_denominators(height, width, normalize_coords):
    """DINOv3's per-axis denominators of the patch centres (float32 of H and W, any shape)."""
    size_h, size_w = ops.cast(height, "float32"), ops.cast(width, "float32")
    if normalize_coords == "min":
        size_h = size_w = ops.minimum(size_h, size_w)
    elif normalize_coords == "max":
        size_h = size_w = ops.maximum(size_h, size_w)
    return size_h, size_w


def dinov3_angles(centres, size):
    """`2 pi * (2 * centres / size - 1)`: patch centres on [-1, 1], as angles (DINOv3)."""
    return 2.0 * math.pi * (2.0 * (centres / size) - 1.0)


def _axial_table(rows, cols, grid_size, head_dim, temperature, grid_indexing="ij", periods=False):
    """The `token_table` of a grid's row and column positions `(H,)`, `(W,)`, row-major."""
    height, width = grid_size
    rows = ops.broadcast_to(rows[:, None], (height, width))
    cols = ops.broadcast_to(cols[None, :], (height, width))
    rows, cols = ops.reshape(rows, (-1,)), ops.reshape(cols, (-1,))
    return token_table(rows, cols, head_dim, temperature, grid_indexing, periods)


def token_table(rows, cols, head_dim, temperature, grid_indexing="ij", periods=False):
    """Sines then cosines `(..., 2 * head_dim)` of each token's row and column position `(...)`.

    Frequencies `temperature ** (-i / (head_dim / 4))`: positions times `1 / temperature **
    (i / (head_dim / 4))` (EVA-02, RoPE-ViT), or divided by the period `temperature ** (...)`
    with `periods` (DINOv3: the same numbers, rounded as timm rounds them). Each token's
    angles are its row angles then its column angles (`"xy"`: columns first), each repeated
    twice (the interleaved pairs `(x0, x1), (x2, x3), ...` that `apply_rotary_embedding`
    rotates). The positions may be a grid's (`_axial_table`) or each token's own (NaFlex:
    `keras_vit.layers.naflex_rotary`).
    """
    num_bands = head_dim // 4
    exponent = ops.arange(num_bands, dtype="float32") / float(num_bands)
    if periods:
        period = ops.power(float(temperature), exponent)
        row_angles = rows[..., None] / period  # (..., bands)
        col_angles = cols[..., None] / period
    else:
        bands = 1.0 / ops.power(float(temperature), exponent)
        row_angles = rows[..., None] * bands  # (..., bands)
        col_angles = cols[..., None] * bands
    axes = [row_angles, col_angles] if grid_indexing == "ij" else [col_angles, row_angles]
    angles = ops.repeat(ops.concatenate(axes, -1), 2, axis=-1)  # (..., head_dim): f0 f0 f1 f1
    return ops.concatenate([ops.sin(angles), ops.cos(angles)], axis=-1)


def apply_rotary_embedding(x, embedding):
    """Rotates the interleaved pairs of `x` `(..., N, head_dim)` by a `rotary_embedding_2d`.

    `x * cos + rot(x) * sin` with `rot([x0, x1, x2, x3, ...]) = [-x1, x0, -x3, x2, ...]`
    (timm's `apply_rot_embed_cat(x, emb)`); the rotation is computed in the embedding's float32
    and cast back to `x`'s dtype.

    Args:
        x: tensor `(..., N, head_dim)`.
        embedding: tensor `(N, 2 * head_dim)`, broadcast against `x`'s leading axes.

    Returns:
        A tensor of `x`'s shape and dtype.
    """
    sin, cos = ops.split(embedding, 2, axis=-1)
    dtype = x.dtype
    x = ops.cast(x, sin.dtype)
    shape = ops.shape(x)
    pairs = ops.reshape(x, (*shape[:-1], x.shape[-1] // 2, 2))  # no -1: an empty batch
    rotated = ops.reshape(ops.stack([-pairs[..., 1], pairs[..., 0]], axis=-1), shape)
    return ops.cast(x * cos + rotated * sin, dtype)


def feature_grid(inputs, patch_size, name):
    """The token grid `(H / ph, W / pw)` of a `(B, H, W, C)` feature map (scalar tensors)."""
    shape = ops.shape(inputs)
    if len(shape) != 4:
        raise ValueError(
            f"{name} expects a (batch, height, width, channels) feature map. "
            f"Received: shape={tuple(shape)}"
        )
    return (shape[1] // patch_size[0], shape[2] // patch_size[1])


def grid_tokens(input_shape, patch_size):
    """The token count of a `(B, H, W, C)` shape's grid, or None when H or W is unknown."""
    height, width = input_shape[1], input_shape[2]
    if height is None or width is None:
        return None
    return (height // patch_size[0]) * (width // patch_size[1])


@keras.saving.register_keras_serializable(package="keras_vit")
class RotaryEmbedding2D(keras.layers.Layer):
    """EVA-02's (or RoPE-ViT's axial, or DINOv3's) 2-D RoPE for the grid of a feature map.

    No weights: the sines and cosines (`rotary_embedding_2d`) follow the grid `(H, W)` of the
    `(B, H, W, C)` feature map it is called on, so one model serves every image size
    (`dynamic_image_size`). The attention layers rotate their patch queries and keys by it
    (`MultiHeadSelfAttention(...)(tokens, rotary_embedding=...)`).

    Args:
        head_dim: int. The attention's per-head width, divisible by 4.
        temperature: float. Defaults to 10000.
        reference_grid_size: optional int or `(H, W)`: positions are rescaled so that every
            grid spans this one (timm's `ref_feat_shape`; EVA-02: the pre-training grid 16 x 16).
            Defaults to None.
        grid_offset: float. Defaults to 0.
        patch_size: int or `(height, width)`: the grid is `(H / ph, W / pw)` of the input, so
            the layer can read the images (or a hybrid stem's map) the patch encoder embeds.
            Defaults to 1 (the input is the patch grid).
        grid_indexing: `"ij"` (EVA-02: row angles, then column angles) or `"xy"` (RoPE-ViT:
            columns first; timm's `rope_grid_indexing`). Defaults to `"ij"`.
        kind: `"eva02"` (integer positions: EVA-02, RoPE-ViT) or `"dinov3"`
            (`dinov3_rotary_embedding_2d`: patch centres in [-1, 1], angles
            `2 pi * position / period`; `"ij"`, no `reference_grid_size`). Defaults to
            `"eva02"`.
        normalize_coords: DINOv3's denominator of the patch centres: `"separate"` (each
            axis by its own size), `"min"` or `"max"` (of H and W). Only with
            `kind="dinov3"`. Defaults to `"separate"`.

    Call arguments:
        inputs: `(B, H, W, C)` feature map (only its shape is read).

    Returns:
        float32 `(H / ph * W / pw, 2 * head_dim)`: sines then cosines.

    Example:

    >>> import numpy as np
    >>> rope = RotaryEmbedding2D(head_dim=8, reference_grid_size=16)
    >>> tuple(rope(np.zeros((1, 4, 4, 16), "float32")).shape)
    (16, 16)

    Reference:
        Su et al., 2021 (RoFormer), Sec. 3.4; Fang et al., 2023 (EVA-02), Sec. 2;
        Heo et al., 2024 (RoPE-ViT, arXiv 2403.13298), Sec. 3.2 (RoPE-Axial).
    """

    def __init__(
        self,
        head_dim,
        temperature=10000.0,
        reference_grid_size=None,
        grid_offset=0.0,
        patch_size=1,
        grid_indexing="ij",
        kind="eva02",
        normalize_coords="separate",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.head_dim = _check_head_dim(head_dim)
        self.grid_indexing = check_grid_indexing(grid_indexing)
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}. Received: kind={kind!r}")
        self.kind = kind
        if normalize_coords not in NORMALIZE_COORDS:
            raise ValueError(
                f"normalize_coords must be one of {NORMALIZE_COORDS}. "
                f"Received: normalize_coords={normalize_coords!r}"
            )
        if kind != "dinov3" and normalize_coords != "separate":
            raise ValueError(
                "normalize_coords is DINOv3's option and needs kind='dinov3'. "
                f"Received: kind={kind!r}, normalize_coords={normalize_coords!r}"
            )
        self.normalize_coords = normalize_coords
        if kind == "dinov3" and (reference_grid_size is not None or grid_indexing != "ij"):
            raise ValueError(
                "DINOv3's RoPE normalises every grid to [-1, 1], rows first: it takes no "
                "reference_grid_size and grid_indexing 'ij'. Received: kind='dinov3', "
                f"reference_grid_size={reference_grid_size!r}, grid_indexing={grid_indexing!r}"
            )
        if (
            isinstance(temperature, bool)
            or not isinstance(temperature, (int, float))
            or (temperature <= 0)
        ):
            raise ValueError(f"temperature must be positive. Received: temperature={temperature!r}")
        self.temperature = float(temperature)
        if reference_grid_size is not None:
            reference_grid_size = check_positive_int_pair(
                reference_grid_size, "reference_grid_size"
            )
        self.reference_grid_size = reference_grid_size
        if isinstance(grid_offset, bool) or not isinstance(grid_offset, (int, float)):
            raise ValueError(f"grid_offset must be a float. Received: grid_offset={grid_offset!r}")
        self.grid_offset = float(grid_offset)
        self.patch_size = check_positive_int_pair(patch_size, "patch_size")

    def call(self, inputs):
        grid = feature_grid(inputs, self.patch_size, self.name)
        if self.kind == "dinov3":
            return dinov3_rotary_embedding_2d(
                grid, self.head_dim, self.temperature, self.normalize_coords, self.grid_offset
            )
        return rotary_embedding_2d(
            grid,
            self.head_dim,
            self.temperature,
            self.reference_grid_size,
            self.grid_offset,
            self.grid_indexing,
        )

    def compute_output_shape(self, input_shape):
        return (grid_tokens(input_shape, self.patch_size), 2 * self.head_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "head_dim": self.head_dim,
                "temperature": self.temperature,
                "reference_grid_size": self.reference_grid_size,
                "grid_offset": self.grid_offset,
                "patch_size": self.patch_size,
                "grid_indexing": self.grid_indexing,
                "kind": self.kind,
                "normalize_coords": self.normalize_coords,
            }
        )
        return config
