"""Position-embedding helpers: grid resampling (official and timm) and 2-D sin-cos tables.

The NumPy functions serve checkpoint loading; `sincos_2d_position_embedding_ops` computes a table
for a grid known only at run time (`dynamic_image_size`).
"""

import math

import numpy as np
import scipy.ndimage
from keras import ops

from keras_vit.layers import bicubic
from keras_vit.layers._checks import check_bool, check_non_negative_int, check_positive_int_pair
from keras_vit.layers.naflex_position import axis_weights

__all__ = ["resample_position_embedding", "sincos_2d_position_embedding"]

INTERPOLATIONS = ("linear", "bicubic", "bilinear")


def infer_grid(num_tokens, grid_size=None):
    """Returns the (height, width) grid of `num_tokens` patch tokens.

    With `grid_size=None` the grid must be square (what the official loader assumes).
    """
    if grid_size is not None:
        grid = check_positive_int_pair(grid_size, "grid_size")
        if grid[0] * grid[1] != num_tokens:
            raise ValueError(
                f"grid_size {grid} does not hold {num_tokens} position embeddings. "
                f"Received: grid_size={grid_size}, number of patch tokens={num_tokens}"
            )
        return grid
    side = math.isqrt(num_tokens)
    if side * side != num_tokens:
        raise ValueError(
            f"Cannot infer a square grid from {num_tokens} patch position embeddings; "
            f"pass the source grid explicitly. Received: number of patch tokens={num_tokens}"
        )
    return (side, side)


def resample_position_embedding(
    posemb,
    new_grid,
    num_prefix_tokens=1,
    old_grid=None,
    interpolation="linear",
    antialias=True,
    align_corners=False,
):
    """Resamples a learned position embedding to another patch grid.

    The prefix rows (class token, and distillation or register tokens where the table
    covers them) are split off and kept, the remaining rows are reshaped to their grid
    and resized, and the prefix rows are put back. With `interpolation="linear"` this is
    exactly the official `vit_jax` checkpoint loader: `scipy.ndimage.zoom(..., order=1)`,
    one zoom factor per axis. With `"bicubic"` it is timm's `resample_abs_pos_embed`:
    PyTorch's `F.interpolate(mode="bicubic", antialias=True, align_corners=False)`
    (see `keras_vit.layers.bicubic`); with `antialias=False` it is Hugging Face's ViT
    (`interpolate_pos_encoding=True`). `"bilinear"` is `F.interpolate(mode="bilinear")` with
    `antialias` and `align_corners` (timm's RADIO loader: neither antialias nor, for some
    names, `align_corners=False`), the weights of `keras_vit.layers.naflex_position`. Equal
    grids are returned unchanged.

    Args:
        posemb: array `(1, num_prefix_tokens + gh * gw, D)` (or without the leading 1).
        new_grid: int or (height, width). Target patch grid.
        num_prefix_tokens: int. Rows before the grid (1 for a class token, 0 for
            none or for a table that covers the patches only, more with distillation
            or register tokens). Defaults to 1.
        old_grid: optional (height, width) of the source grid; inferred as a square
            when None.
        interpolation: `"linear"` (official loader), `"bicubic"` (timm) or `"bilinear"`
            (PyTorch's). Defaults to `"linear"`.
        antialias: bool. With `"bicubic"` or `"bilinear"`: PyTorch's `antialias` argument,
            True for timm, False for Hugging Face. Defaults to True.
        align_corners: bool. With `"bilinear"` and `antialias=False`: PyTorch's
            `align_corners`. Defaults to False.

    Returns:
        float32 NumPy array `(1, num_prefix_tokens + new_h * new_w, D)`.

    Example:

    >>> posemb = np.zeros((1, 1 + 4 * 4, 8), "float32")  # class token + a 4x4 grid
    >>> resample_position_embedding(posemb, (6, 8)).shape
    (1, 49, 8)
    >>> resample_position_embedding(posemb, (2, 3), interpolation="bicubic").shape
    (1, 7, 8)
    """
    if interpolation not in INTERPOLATIONS:
        raise ValueError(
            f"interpolation must be one of {INTERPOLATIONS}. "
            f"Received: interpolation={interpolation!r}"
        )
    num_prefix_tokens = check_non_negative_int(num_prefix_tokens, "num_prefix_tokens")
    antialias = check_bool(antialias, "antialias")
    align_corners = check_bool(align_corners, "align_corners")
    posemb = np.asarray(posemb)
    if posemb.ndim == 2:
        posemb = posemb[None]
    if posemb.ndim != 3 or posemb.shape[0] != 1:
        raise ValueError(
            "posemb must have shape (1, tokens, hidden_dim). "
            f"Received: posemb.shape={posemb.shape}"
        )
    new_grid = check_positive_int_pair(new_grid, "new_grid")
    prefix, grid = posemb[:, :num_prefix_tokens], posemb[0, num_prefix_tokens:]
    old_grid = infer_grid(grid.shape[0], old_grid)
    if tuple(old_grid) == tuple(new_grid):
        return posemb.astype("float32")
    grid = grid.reshape(old_grid[0], old_grid[1], -1)
    if interpolation == "bicubic":
        grid = bicubic.resize_bicubic(grid, new_grid, antialias=antialias)
    elif interpolation == "bilinear":
        grid = _resize_bilinear(grid, old_grid, new_grid, antialias, align_corners)
    else:
        zoom = (new_grid[0] / old_grid[0], new_grid[1] / old_grid[1], 1)
        grid = scipy.ndimage.zoom(grid, zoom, order=1)
    if grid.shape[:2] != tuple(new_grid):  # guard against float rounding in zoom
        raise ValueError(
            f"Resampling produced a grid of {grid.shape[:2]}, expected {tuple(new_grid)}."
        )
    grid = grid.reshape(1, new_grid[0] * new_grid[1], -1)
    return np.concatenate([prefix, grid], axis=1).astype("float32")


def _resize_bilinear(grid, old_grid, new_grid, antialias, align_corners):
    """`(h, w, D)` -> `(new_h, new_w, D)` by PyTorch's separable bilinear weights."""
    def weights(n, in_size):
        index = np.arange(n)
        rows = axis_weights(index, np.full(n, n), in_size, "bilinear", antialias, align_corners)
        return ops.convert_to_numpy(rows).astype("float64")

    wy, wx = weights(new_grid[0], old_grid[0]), weights(new_grid[1], old_grid[1])
    return np.einsum("ia,jb,abd->ijd", wy, wx, grid.astype("float64"))


def sincos_2d_position_embedding(grid_size, hidden_dim, temperature=10_000.0):
    """Fixed 2-D sine-cosine position embedding `(1, gh * gw, hidden_dim)` (big_vision layout).

    The first quarter of the channels is `sin(x * omega)`, then `cos(x * omega)`,
    `sin(y * omega)` and `cos(y * omega)`, with `omega = 1 / temperature**(k / (D/4 - 1))`.

    Example:

    >>> table = sincos_2d_position_embedding((2, 3), 8)
    >>> table.shape, table[0, 0].tolist()
    ((1, 6, 8), [0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0])
    """
    gh, gw = check_positive_int_pair(grid_size, "grid_size")
    if hidden_dim % 4 != 0:
        raise ValueError(
            "hidden_dim must be divisible by 4 for the sincos2d position embedding. "
            f"Received: hidden_dim={hidden_dim}"
        )
    y, x = np.mgrid[:gh, :gw]
    quarter = hidden_dim // 4
    omega = np.arange(quarter, dtype="float64") / max(quarter - 1, 1)
    omega = 1.0 / (temperature**omega)
    y = np.einsum("m,d->md", y.reshape(-1).astype("float64"), omega)
    x = np.einsum("m,d->md", x.reshape(-1).astype("float64"), omega)
    pe = np.concatenate([np.sin(x), np.cos(x), np.sin(y), np.cos(y)], axis=1)
    return pe[None].astype("float32")


def sincos_2d_position_embedding_ops(grid_size, hidden_dim, temperature=10_000.0, dtype="float32"):
    """`sincos_2d_position_embedding` with `keras.ops`, for a grid known only at run time.

    Args:
        grid_size: `(rows, columns)`, Python ints or scalar tensors.
        hidden_dim: int, divisible by 4.
        temperature: float. Defaults to 10000.
        dtype: str. Defaults to `"float32"`.

    Returns:
        `(1, rows * columns, hidden_dim)` tensor, equal to the NumPy table.
    """
    rows, cols = grid_size
    quarter = hidden_dim // 4
    omega = np.arange(quarter, dtype="float64") / max(quarter - 1, 1)
    omega = ops.convert_to_tensor((1.0 / temperature**omega).astype("float32"), dtype=dtype)
    y = ops.expand_dims(ops.cast(ops.arange(rows), dtype), 1) * omega  # (rows, quarter)
    x = ops.expand_dims(ops.cast(ops.arange(cols), dtype), 1) * omega  # (cols, quarter)
    zero = ops.expand_dims(ops.zeros_like(y[:, :1]), 1)
    zero = zero + ops.expand_dims(ops.zeros_like(x[:, :1]), 0)  # (rows, cols, 1)
    x = ops.expand_dims(x, 0) + zero  # (rows, cols, quarter)
    y = ops.expand_dims(y, 1) + zero
    table = ops.concatenate([ops.sin(x), ops.cos(x), ops.sin(y), ops.cos(y)], axis=-1)
    return ops.reshape(table, (1, -1, hidden_dim))
