"""Decomposed relative positions (MViTv2, ViTDet, SAM): an attention bias from two axial tables.

A query at `(i, j)` and a key at `(m, n)` of a grid get the bias
`q . R_h[i - m] + q . R_w[j - n]`: one learned `(2h - 1, C)` table of height offsets, one
`(2w - 1, C)` of width offsets, each dotted with the (unscaled) query. A table made for another
grid is resized along its length first, linearly (`F.interpolate(mode="linear")`, as timm's
`get_rel_pos`), and offsets between grids of different sizes are rescaled to the larger one.
`decomposed_relative_bias` computes the `(B, heads, Nq, Nk)` bias; the grids are static, so
the resize and the offsets are constant NumPy arrays.

Reference: Li et al., 2022, "MViTv2", Sec. 3.2; timm's `get_decomposed_rel_pos_bias`.
"""

import numpy as np
from keras import ops

from keras_vit.layers._checks import check_positive_int

__all__ = ["decomposed_relative_bias", "linear_resize_matrix"]


def linear_resize_matrix(in_length, out_length):
    """The `(out_length, in_length)` matrix of PyTorch's 1-D linear resize (half-pixel centres,
    `align_corners=False`, no antialiasing): `resized = M @ table`.

    Example:

    >>> linear_resize_matrix(2, 4).tolist()
    [[1.0, 0.0], [0.75, 0.25], [0.25, 0.75], [0.0, 1.0]]
    """
    in_length = check_positive_int(in_length, "in_length")
    out_length = check_positive_int(out_length, "out_length")
    matrix = np.zeros((out_length, in_length), "float64")
    scale = in_length / out_length
    for i in range(out_length):
        source = max((i + 0.5) * scale - 0.5, 0.0)
        low = min(int(np.floor(source)), in_length - 1)
        high = min(low + 1, in_length - 1)
        fraction = source - low
        matrix[i, low] += 1.0 - fraction
        matrix[i, high] += fraction
    return matrix.astype("float32")


def offset_index(q_size, k_size):
    """`(q_size, k_size)` int32 rows of a `(2 * max(q, k) - 1)` table for each query / key pair
    (timm's `get_rel_pos`, in float32 as timm computes it, then truncated)."""
    q_size, k_size = int(q_size), int(k_size)
    q_coords = np.arange(q_size, dtype="float32")[:, None] * np.float32(max(k_size / q_size, 1.0))
    k_coords = np.arange(k_size, dtype="float32")[None, :] * np.float32(max(q_size / k_size, 1.0))
    offsets = (q_coords - k_coords) + np.float32((k_size - 1) * max(q_size / k_size, 1.0))
    return offsets.astype("int32")


def axial_rows(table, q_size, k_size):
    """`(q_size, k_size, C)`: the rows of one axis' table for each query / key position,
    the table resized to `2 * max(q, k) - 1` rows first if it has another length."""
    length = 2 * max(int(q_size), int(k_size)) - 1
    if table.shape[0] != length:
        resize = linear_resize_matrix(table.shape[0], length)
        table = ops.matmul(ops.cast(resize, table.dtype), table)
    return ops.take(table, offset_index(q_size, k_size), axis=0)


def decomposed_relative_bias(query, table_h, table_w, q_size, k_size):
    """The decomposed relative-position bias of `query` over a key grid.

    Args:
        query: `(B, Nq, heads, C)` queries (before the logit scale), `Nq = qh * qw` in
            row-major order.
        table_h, table_w: `(Lh, C)`, `(Lw, C)` tables of height and width offsets.
        q_size: `(qh, qw)` of the query grid; k_size: `(kh, kw)` of the key grid.

    Returns:
        `(B, heads, Nq, Nk)`, to add to the attention logits.

    Example:

    >>> import numpy as np
    >>> q = np.ones((1, 4, 1, 2), "float32")
    >>> table = np.arange(6.0, dtype="float32").reshape(3, 2)
    >>> bias = decomposed_relative_bias(q, table, table, (2, 2), (2, 2))
    >>> tuple(bias.shape), float(np.asarray(bias)[0, 0, 0, 0])
    ((1, 1, 4, 4), 10.0)
    """
    (qh, qw), (kh, kw) = q_size, k_size
    rows_h = axial_rows(table_h, qh, kh)  # (qh, kh, C)
    rows_w = axial_rows(table_w, qw, kw)  # (qw, kw, C)
    heads, channels = query.shape[2], query.shape[3]
    grid = ops.reshape(query, (-1, qh, qw, heads, channels))
    rel_h = ops.einsum("bhwnc,hkc->bnhwk", grid, ops.cast(rows_h, query.dtype))
    rel_w = ops.einsum("bhwnc,wkc->bnhwk", grid, ops.cast(rows_w, query.dtype))
    bias = ops.expand_dims(rel_h, -1) + ops.expand_dims(rel_w, -2)  # (B, n, qh, qw, kh, kw)
    return ops.reshape(bias, (-1, heads, qh * qw, kh * kw))
