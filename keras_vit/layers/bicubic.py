"""PyTorch's bicubic resize (timm's and Hugging Face's position-embedding resampling), as matrices.

timm resamples a learned position embedding with
`F.interpolate(grid, size, mode="bicubic", antialias=True, align_corners=False)`, at load time
(`checkpoint_filter_fn`) and, with `dynamic_img_size=True`, at every call. That kernel is
separable and PIL-style: output index `i` of an axis of `n_in -> n_out` samples sits at
`center = scale * (i + 0.5)` with `scale = n_in / n_out`; input index `j` gets the weight
`cubic((j + 0.5 - center) / max(scale, 1))` (support widened by `scale` when shrinking: the
antialiasing), the window is clipped to the input and each output's weights are normalised to
sum to 1 (so the borders differ from plain bicubic, which repeats the edge, even when
enlarging). The cubic is Keys' with `A = -0.5` (PyTorch uses -0.5 for `antialias=True`, as PIL).

Hugging Face's ViT (`interpolate_pos_encoding=True`) uses the plain kernel, `antialias=False`:
output `i` samples the input at `(i + 0.5) * scale - 0.5` with Keys' cubic, `A = -0.75`, on the
4 nearest inputs, indices outside the input repeating the edge (NumPy only: it is needed at load
time). Both kernels are checked against `F.interpolate` in the tests.

A resize is then two matrix products, `W_h @ grid @ W_w^T`. `resize_matrix` builds one matrix in
NumPy (float64, for load-time conversion) and `resize_matrix_ops` (antialiased) with
`keras.ops` from a runtime output size (a Python int or a scalar tensor), so that a model
resamples its position embedding inside `fit`, `predict`, a JAX `jit` or a TensorFlow
SavedModel whose image size is unknown when it is traced.
"""

import numpy as np
from keras import ops

CUBIC_A = -0.5  # PyTorch's (and PIL's) coefficient for antialiased bicubic
PLAIN_CUBIC_A = -0.75  # PyTorch's coefficient for bicubic without antialiasing


def _cubic(x, a=CUBIC_A, backend=np):
    x = backend.abs(x)
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    far = (((x - 5.0) * x + 8.0) * x - 4.0) * a
    return backend.where(x <= 1.0, near, backend.where(x < 2.0, far, 0.0 * x))


def resize_matrix(in_size, out_size, antialias=True):
    """The `(out_size, in_size)` matrix of PyTorch's bicubic resize along one axis.

    Args:
        in_size: int. Input length.
        out_size: int. Output length.
        antialias: bool. PyTorch's `antialias` argument: True for timm, False for Hugging
            Face's ViT. Defaults to True.

    Returns:
        float64 NumPy array whose rows sum to 1; the identity when the sizes are equal.

    Example:

    >>> m = resize_matrix(4, 8)
    >>> m.shape, bool(np.allclose(m.sum(1), 1))
    ((8, 4), True)
    >>> bool(np.array_equal(resize_matrix(3, 3), np.eye(3)))
    True
    >>> bool(np.allclose(resize_matrix(4, 8, antialias=False).sum(1), 1))
    True
    """
    in_size, out_size = int(in_size), int(out_size)
    if in_size <= 0 or out_size <= 0:
        raise ValueError(
            f"Resize sizes must be positive. Received: in_size={in_size}, out_size={out_size}"
        )
    scale = in_size / out_size
    if not antialias:
        return _plain_matrix(in_size, out_size, scale)
    stretch = max(scale, 1.0)
    center = scale * (np.arange(out_size, dtype="float64") + 0.5)
    x = (np.arange(in_size, dtype="float64")[None, :] + 0.5 - center[:, None]) / stretch
    weights = _cubic(x)
    return weights / weights.sum(axis=1, keepdims=True)


def _plain_matrix(in_size, out_size, scale):
    """PyTorch's bicubic without antialiasing: 4 taps, edge indices repeated."""
    if in_size == out_size:
        return np.eye(in_size)
    source = (np.arange(out_size, dtype="float64") + 0.5) * scale - 0.5
    base = np.floor(source)
    t = source - base
    matrix = np.zeros((out_size, in_size), "float64")
    rows = np.arange(out_size)
    for k, offset in enumerate((t + 1.0, t, 1.0 - t, 2.0 - t)):
        columns = np.clip(base.astype("int64") - 1 + k, 0, in_size - 1)
        np.add.at(matrix, (rows, columns), _cubic(offset, PLAIN_CUBIC_A))
    return matrix


def resize_matrix_ops(in_size, out_size, dtype="float32"):
    """`resize_matrix` with `keras.ops`: `out_size` may be a scalar tensor known only at run time.

    Args:
        in_size: int. Input length (static).
        out_size: int or scalar integer tensor. Output length.
        dtype: str. Computation and result dtype. Defaults to `"float32"`.

    Returns:
        `(out_size, in_size)` tensor.
    """
    out_float = ops.cast(out_size, dtype)
    scale = ops.divide(ops.cast(in_size, dtype), out_float)
    stretch = ops.maximum(scale, ops.cast(1.0, dtype))
    center = scale * (ops.cast(ops.arange(out_size), dtype) + 0.5)
    source = ops.cast(ops.arange(in_size), dtype) + 0.5
    x = (ops.expand_dims(source, 0) - ops.expand_dims(center, 1)) / stretch
    weights = _cubic(x, backend=ops)
    return weights / ops.sum(weights, axis=1, keepdims=True)


def resize_bicubic(grid, new_size, antialias=True):
    """Resizes a `(h, w, C)` NumPy array to `(H, W, C)` as PyTorch's bicubic does.

    Equal to `F.interpolate(grid, (H, W), mode="bicubic", antialias=antialias,
    align_corners=False)` on the channels-first array (within float rounding; computed in
    float64). `antialias=True` (the default) is timm's resampling, False Hugging Face's.

    Example:

    >>> resize_bicubic(np.ones((4, 4, 2)), (6, 3)).round(6).tolist()[0][0]
    [1.0, 1.0]
    """
    grid = np.asarray(grid, dtype="float64")
    if grid.ndim != 3:
        raise ValueError(f"grid must have shape (h, w, C). Received: grid.shape={grid.shape}")
    rows = resize_matrix(grid.shape[0], new_size[0], antialias)
    cols = resize_matrix(grid.shape[1], new_size[1], antialias)
    return np.einsum("Hh,hwc,Ww->HWc", rows, grid, cols)


def resize_bicubic_ops(grid, new_size):
    """`resize_bicubic` with `keras.ops` on a `(h, w, C)` tensor of static `h`, `w`.

    Args:
        grid: `(h, w, C)` tensor with static `h` and `w`.
        new_size: `(H, W)`, Python ints or scalar tensors.

    Returns:
        `(H, W, C)` tensor in `grid`'s dtype (float32 for the weights' computation).
    """
    h, w = int(grid.shape[0]), int(grid.shape[1])
    dtype = "float32"
    rows = resize_matrix_ops(h, new_size[0], dtype)  # (H, h)
    cols = resize_matrix_ops(w, new_size[1], dtype)  # (W, w)
    values = ops.cast(grid, dtype)
    out = ops.einsum("Hh,hwc->Hwc", rows, values)
    out = ops.einsum("Ww,Hwc->HWc", cols, out)
    return ops.cast(out, grid.dtype)
