"""PI-resize: a patch-embedding kernel for another patch size (FlexiViT, Beyer et al., 2023).

A patch `x` of `(h, w)` pixels resized to `(H, W)` is `B x` for a fixed resize matrix `B`
(`(H * W, h * w)`). FlexiViT's PI-resize picks the new kernel `w_new = pinv(B)^T w`, which keeps
every token unchanged when the patch is enlarged (`<x, w> = <B x, w_new>` for all `x`) and is the
least-squares choice when it shrinks (Sec. 3.4 of the paper). timm's
`timm.layers.resample_patch_embed` computes the same: `B` from `F.interpolate` on basis images
(`align_corners=False`), its pseudo-inverse in float32, applied to the `(D, C, h * w)` kernel.

PyTorch's (and PIL's) resizes are separable, so `B` is the Kronecker product of one matrix per
axis and so is its pseudo-inverse: `pinv(B_h (x) B_w) = pinv(B_h) (x) pinv(B_w)`. This module builds
the two per-axis matrices (float64, NumPy) and applies them with one `einsum`, which is what the
FlexiViT model does inside `fit` (`keras.ops`, one pair of constant matrices per patch size).

Per-axis resize matrices, output `i`, input `j`, `scale = n_in / n_out` (PyTorch, checked
against `F.interpolate` in the tests):

- `"bilinear"`, `antialias=True` (FlexiViT's and timm's default): PIL's triangle filter
  `max(0, 1 - |j + 0.5 - scale * (i + 0.5)| / max(scale, 1))`, clipped to the input and
  normalised per output;
- `"bilinear"`, `antialias=False`: the half-pixel source `(i + 0.5) * scale - 0.5`, clamped at 0,
  between its two neighbours (the last input repeated);
- `"bicubic"`: `keras_vit.layers.bicubic.resize_matrix` (Keys' cubic, A = -0.5 antialiased as
  PIL, A = -0.75 plain).
When enlarging, the antialiased and plain bilinear matrices are the same.
"""

import numpy as np
from keras import ops

from keras_vit.layers import bicubic
from keras_vit.layers._checks import check_bool, check_positive_int_pair

__all__ = ["resample_patch_embedding"]

PATCH_INTERPOLATIONS = ("bilinear", "bicubic")


def _triangle(x):
    return np.maximum(0.0, 1.0 - np.abs(x))


def linear_resize_matrix(in_size, out_size, antialias=True):
    """The `(out_size, in_size)` matrix of PyTorch's bilinear resize along one axis.

    Args:
        in_size: int. Input length.
        out_size: int. Output length.
        antialias: bool. PyTorch's `antialias` argument. Defaults to True.

    Returns:
        float64 NumPy array whose rows sum to 1; the identity when the sizes are equal.

    Example:

    >>> linear_resize_matrix(2, 4).tolist()
    [[1.0, 0.0], [0.75, 0.25], [0.25, 0.75], [0.0, 1.0]]
    >>> (linear_resize_matrix(4, 2) * 7).round(6).tolist()  # shrinking: a wider triangle
    [[3.0, 3.0, 1.0, 0.0], [0.0, 1.0, 3.0, 3.0]]
    """
    in_size, out_size = int(in_size), int(out_size)
    if in_size <= 0 or out_size <= 0:
        raise ValueError(
            f"Resize sizes must be positive. Received: in_size={in_size}, out_size={out_size}"
        )
    if in_size == out_size:
        return np.eye(in_size)
    scale = in_size / out_size
    if antialias:
        center = scale * (np.arange(out_size, dtype="float64") + 0.5)
        source = np.arange(in_size, dtype="float64") + 0.5
        weights = _triangle((source[None, :] - center[:, None]) / max(scale, 1.0))
        return weights / weights.sum(axis=1, keepdims=True)
    source = np.maximum((np.arange(out_size, dtype="float64") + 0.5) * scale - 0.5, 0.0)
    low = np.minimum(np.floor(source).astype("int64"), in_size - 1)
    high = np.minimum(low + 1, in_size - 1)
    frac = source - low
    matrix = np.zeros((out_size, in_size), "float64")
    rows = np.arange(out_size)
    np.add.at(matrix, (rows, low), 1.0 - frac)
    np.add.at(matrix, (rows, high), frac)
    return matrix


def resize_matrix(in_size, out_size, interpolation="bilinear", antialias=True):
    """The per-axis resize matrix `(out_size, in_size)` of `interpolation` (float64 NumPy)."""
    if interpolation not in PATCH_INTERPOLATIONS:
        raise ValueError(
            f"interpolation must be one of {PATCH_INTERPOLATIONS}. "
            f"Received: interpolation={interpolation!r}"
        )
    if interpolation == "bicubic":
        return bicubic.resize_matrix(in_size, out_size, antialias=antialias)
    return linear_resize_matrix(in_size, out_size, antialias=antialias)


def pi_resize_matrices(old_size, new_size, interpolation="bilinear", antialias=True):
    """The two per-axis PI-resize matrices from patch size `old_size` to `new_size`.

    Args:
        old_size: int or (height, width). The kernel's patch size.
        new_size: int or (height, width). The target patch size.
        interpolation: `"bilinear"` or `"bicubic"`. Defaults to `"bilinear"`.
        antialias: bool. Defaults to True.

    Returns:
        `(rows, columns)`: float64 arrays `(old_h, new_h)` and `(old_w, new_w)`, the
        pseudo-inverses of the per-axis resize matrices, transposed; the new kernel is
        `einsum("hH,wW,hwcd->HWcd", rows, columns, kernel)`.
    """
    old_h, old_w = check_positive_int_pair(old_size, "old_size")
    new_h, new_w = check_positive_int_pair(new_size, "new_size")
    rows = np.linalg.pinv(resize_matrix(old_h, new_h, interpolation, antialias))
    columns = np.linalg.pinv(resize_matrix(old_w, new_w, interpolation, antialias))
    return rows, columns


def _check_kernel_shape(shape):
    if len(shape) != 4:
        raise ValueError(
            "kernel must have shape (patch_height, patch_width, channels, hidden_dim). "
            f"Received: kernel.shape={tuple(shape)}"
        )


def resample_patch_embedding(kernel, patch_size, interpolation="bilinear", antialias=True):
    """Resizes a patch-embedding kernel to another patch size by PI-resize (FlexiViT).

    The kernel is in the official (and `PatchEncoder`) layout `(ph, pw, C, D)`. The result
    equals timm's `resample_patch_embed(kernel_oihw, patch_size, interpolation=...,
    antialias=...)` transposed back to this layout (timm computes in float32, this in
    float64). Enlarging the patch is exact: a patch resized to `patch_size` with the same
    resize gives the same embedding. Equal sizes return the kernel unchanged.

    Args:
        kernel: array `(ph, pw, C, D)`.
        patch_size: int or (height, width). The new patch size.
        interpolation: `"bilinear"` (FlexiViT, the default) or `"bicubic"` (timm's default).
            Defaults to `"bilinear"`.
        antialias: bool. The resize's antialiasing (matters when shrinking; timm and
            FlexiViT: True). Defaults to True.

    Returns:
        NumPy array `(new_ph, new_pw, C, D)` in the kernel's float dtype.

    Example:

    >>> kernel = np.random.rand(8, 8, 3, 16).astype("float32")
    >>> resample_patch_embedding(kernel, 16).shape
    (16, 16, 3, 16)
    >>> resample_patch_embedding(kernel, (4, 6), interpolation="bicubic").shape
    (4, 6, 3, 16)

    Reference:
        Beyer et al., 2023, "FlexiViT: One Model for All Patch Sizes", Sec. 3.4.
    """
    kernel = np.asarray(kernel)
    _check_kernel_shape(kernel.shape)
    new_size = check_positive_int_pair(patch_size, "patch_size")
    antialias = check_bool(antialias, "antialias")
    old_size = tuple(kernel.shape[:2])
    if old_size == new_size:
        return kernel
    rows, columns = pi_resize_matrices(old_size, new_size, interpolation, antialias)
    dtype = kernel.dtype if np.issubdtype(kernel.dtype, np.floating) else np.dtype("float32")
    out = np.einsum("hH,wW,hwcd->HWcd", rows, columns, kernel.astype("float64"))
    return out.astype(dtype)


def resample_patch_embedding_ops(kernel, patch_size, interpolation="bilinear", antialias=True):
    """`resample_patch_embedding` with `keras.ops` on a kernel tensor (or variable).

    The matrices depend only on the (static) sizes and are constants in NumPy float64, cast to
    float32; the product runs in float32 and is cast back to the kernel's dtype, so a model
    resizes its kernel inside `fit` (gradients flow to the base kernel).

    Args:
        kernel: tensor `(ph, pw, C, D)` with static `ph`, `pw`.
        patch_size: int or (height, width). The new patch size.
        interpolation: `"bilinear"` or `"bicubic"`. Defaults to `"bilinear"`.
        antialias: bool. Defaults to True.

    Returns:
        Tensor `(new_ph, new_pw, C, D)` in the kernel's dtype.
    """
    _check_kernel_shape(kernel.shape)
    new_size = check_positive_int_pair(patch_size, "patch_size")
    old_size = (int(kernel.shape[0]), int(kernel.shape[1]))
    if old_size == new_size:
        return kernel
    rows, columns = pi_resize_matrices(old_size, new_size, interpolation, antialias)
    values = ops.cast(kernel, "float32")
    out = ops.einsum("hH,hwcd->Hwcd", ops.convert_to_tensor(rows.astype("float32")), values)
    out = ops.einsum("wW,Hwcd->HWcd", ops.convert_to_tensor(columns.astype("float32")), out)
    return ops.cast(out, kernel.dtype)
