"""PyTorch's bicubic resize in NumPy: how timm and Hugging Face resample position embeddings.

Both resample a learned position embedding with `torch.nn.functional.interpolate(grid, size,
mode="bicubic", align_corners=False)`: timm (`resample_abs_pos_embed`, at load time) with
`antialias=True`, Hugging Face's ViT (`interpolate_pos_encoding=True`) without. The two kernels
differ, and neither is the official loader's `scipy.ndimage.zoom(order=1)`
(`keras_vit.layers.position_embedding`), so checkpoints of these libraries are resampled here,
exactly as their own code does (checked against `F.interpolate` in the tests):

- `antialias=False`: output index `i` samples the input at `(i + 0.5) * in / out - 0.5` with
  Keys' cubic convolution, `A = -0.75`, on the 4 nearest inputs; indices outside the input
  repeat the edge.
- `antialias=True` (PIL-style): output `i` is centred at `(i + 0.5) * scale`,
  `scale = in / out`; input `j` gets the weight `cubic((j + 0.5 - center) / max(scale, 1))`
  with `A = -0.5` (the support widens by `scale` when shrinking), the window is clipped to the
  input and the weights are normalised to sum to 1.

The resize is separable: one `(out, in)` matrix per axis, applied in float64.

Note: keras_vit's `dynamic_image_size` (another module) computes the antialiased resize inside
the model; this module is the load-time copy of the same kernel in NumPy. `resample_grid` is
the one function the loaders call.
"""

import math

import numpy as np

from keras_vit.layers import position_embedding as pe
from keras_vit.layers._checks import check_positive_int_pair


def _cubic(x, a):
    x = np.abs(x)
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    far = ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    return np.where(x <= 1.0, near, np.where(x < 2.0, far, 0.0))


def bicubic_matrix(in_size, out_size, antialias):
    """The `(out_size, in_size)` float64 matrix of PyTorch's bicubic resize along one axis.

    Args:
        in_size: int. Input length.
        out_size: int. Output length.
        antialias: bool. PyTorch's `antialias` argument.

    Returns:
        np.ndarray `(out_size, in_size)`; `matrix @ x` resizes `x` along its first axis.

    Example:

    >>> bicubic_matrix(4, 4, antialias=True).round(6).tolist() == np.eye(4).tolist()
    True
    """
    scale = in_size / out_size
    matrix = np.zeros((out_size, in_size), "float64")
    if not antialias:
        for i in range(out_size):
            source = (i + 0.5) * scale - 0.5
            base = math.floor(source)
            t = source - base
            weights = _cubic(np.array([t + 1.0, t, 1.0 - t, 2.0 - t]), -0.75)
            for k, weight in enumerate(weights):
                matrix[i, min(max(base - 1 + k, 0), in_size - 1)] += weight
        return matrix
    support = 2.0 * scale if scale >= 1.0 else 2.0
    inverse = 1.0 / scale if scale >= 1.0 else 1.0
    for i in range(out_size):
        center = scale * (i + 0.5)
        low = max(int(center - support + 0.5), 0)
        high = min(int(center + support + 0.5), in_size)
        taps = np.arange(low, high)
        weights = _cubic((taps - center + 0.5) * inverse, -0.5)
        total = weights.sum()
        matrix[i, low:high] = weights / total if total != 0 else weights
    return matrix


def resample_grid(grid, new_size, antialias):
    """Resizes a `(h, w, C)` grid to `new_size` as PyTorch's bicubic `F.interpolate` does.

    Args:
        grid: array `(h, w, C)`.
        new_size: int or (height, width).
        antialias: bool. True for timm, False for Hugging Face's ViT.

    Returns:
        float32 np.ndarray `(height, width, C)`.

    Example:

    >>> resample_grid(np.ones((4, 4, 2)), (6, 8), antialias=True).shape
    (6, 8, 2)
    """
    height, width = check_positive_int_pair(new_size, "new_size")
    grid = np.asarray(grid, "float64")
    rows = bicubic_matrix(grid.shape[0], height, antialias)
    columns = bicubic_matrix(grid.shape[1], width, antialias)
    return np.einsum("ih,hwc,jw->ijc", rows, grid, columns).astype("float32")


def resample_position_embedding(posemb, new_grid, num_prefix_tokens, antialias, old_grid=None):
    """A `(1, prefix + h * w, D)` position embedding on another patch grid, bicubic as PyTorch.

    The prefix rows (class, register or distillation tokens) are kept as they are.

    Args:
        posemb: array `(1, num_prefix_tokens + h * w, D)`.
        new_grid: int or (height, width).
        num_prefix_tokens: int. Rows before the grid.
        antialias: bool. True for timm, False for Hugging Face's ViT.
        old_grid: optional (h, w); a square grid is inferred when None.

    Returns:
        float32 np.ndarray `(1, num_prefix_tokens + height * width, D)`.
    """
    posemb = np.asarray(posemb)
    new_grid = check_positive_int_pair(new_grid, "new_grid")
    prefix, rows = posemb[:, :num_prefix_tokens], posemb[0, num_prefix_tokens:]
    old_grid = pe.infer_grid(rows.shape[0], old_grid)
    if tuple(old_grid) == tuple(new_grid):
        return posemb.astype("float32")
    grid = resample_grid(rows.reshape(*old_grid, -1), new_grid, antialias)
    grid = grid.reshape(1, new_grid[0] * new_grid[1], -1)
    return np.concatenate([prefix.astype("float32"), grid], axis=1)
