"""Per-image position embeddings of NaFlex batches: resize weights computed per token.

A NaFlex batch mixes images of different patch grids. timm's `NaFlexEmbeds` resizes its learned
`(gh, gw)` position-embedding table to each image's own grid `(h, w)` (read from the image's
largest `patch_coord` + 1) with `F.interpolate` and adds the result to the image's tokens in
row-major order; the factorised variant resizes a `(gh,)` row table and a `(gw,)` column table
with 1-D linear interpolation and adds them. With `aspect_preserving` (timm's
`pos_embed_ar_preserving`) both axes are resized to the longer side `max(h, w)` and the top-left
`(h, w)` block is kept.

Every resize here is separable: output index `i` of an axis of output length `n` is a weighted
sum of the `in_size` table rows, with weights that depend only on `(i, n, in_size)`. So instead
of one `F.interpolate` per distinct grid, `axis_weights` computes each token's weight vector
from its own coordinate and its image's length with `keras.ops` (no loop over images, any grid
known only at run time, inside `fit`, a JAX `jit` or a SavedModel), and a token's embedding is
`sum_ab wy[a] table[a, b] wx[b]`. The tokens are gathered by their coordinates, which equals
timm's row-major addition for the batches its loader makes (and our `naflex_batch`).

The weights are PyTorch's (`F.interpolate`, `align_corners=False` unless asked):

- antialiased (`antialias=True`, timm's default): PIL-style kernels centred at
  `scale * (i + 0.5)`, `scale = in_size / n`, stretched by `max(scale, 1)` and normalised:
  the triangle for `"bilinear"`, Keys' cubic with `A = -0.5` for `"bicubic"`
  (`keras_vit.layers.bicubic`);
- plain bilinear: the source `(i + 0.5) * scale - 0.5` (clamped at 0) between its two
  neighbours; with `align_corners=True` the source is `i * (in_size - 1) / (n - 1)`;
- plain bicubic: Keys' cubic with `A = -0.75` on the 4 nearest rows, edges repeated.

All are the identity when `n == in_size` (timm then uses the table as it is).
"""

from keras import ops

from keras_vit.layers import bicubic

INTERPOLATIONS = ("bicubic", "bilinear")


def _one_hot(index, size, dtype):
    return ops.one_hot(ops.clip(index, 0, size - 1), size, dtype=dtype)


def axis_weights(
    index, length, in_size, interpolation="bicubic", antialias=True, align_corners=False
):
    """Resize weights `(..., in_size)` of output `index` for an axis resized to `length`.

    Args:
        index: integer tensor: output positions.
        length: integer tensor of `index`'s shape: the output length of each position's axis.
        in_size: int. The table's length along the axis.
        interpolation: `"bicubic"` or `"bilinear"`. Defaults to `"bicubic"`.
        antialias: bool. PyTorch's `antialias`. Defaults to True.
        align_corners: bool. PyTorch's `align_corners` (plain kernels only). Defaults to False.

    Returns:
        float32 tensor `index.shape + (in_size,)`: the row of the `(length, in_size)` resize
        matrix at `index`.
    """
    dtype = "float32"
    i = ops.cast(index, dtype)
    n = ops.cast(length, dtype)
    source = ops.cast(ops.arange(in_size), dtype)
    scale = ops.cast(in_size, dtype) / ops.maximum(n, 1.0)
    if antialias:
        if align_corners:
            raise ValueError(
                "align_corners=True is only supported without antialiasing (as timm's models "
                "use it). Received: antialias=True, align_corners=True"
            )
        stretch = ops.maximum(scale, 1.0)
        center = scale * (i + 0.5)
        x = (source + 0.5 - center[..., None]) / stretch[..., None]
        if interpolation == "bicubic":
            weights = bicubic._cubic(x, backend=ops)
        else:
            weights = ops.maximum(1.0 - ops.abs(x), 0.0)
        return weights / ops.sum(weights, axis=-1, keepdims=True)
    if align_corners:
        ratio = ops.where(n > 1.0, (in_size - 1.0) / ops.maximum(n - 1.0, 1.0), 0.0)
        position = i * ratio
    else:
        position = (i + 0.5) * scale - 0.5
    if interpolation == "bilinear":
        position = ops.maximum(position, 0.0)
        low = ops.floor(position)
        frac = (position - low)[..., None]
        low = ops.cast(low, "int32")
        high = ops.minimum(low + 1, in_size - 1)
        return _one_hot(low, in_size, dtype) * (1.0 - frac) + _one_hot(high, in_size, dtype) * frac
    base = ops.floor(position)
    t = (position - base)[..., None]
    base = ops.cast(base, "int32")
    weights = 0.0
    for k, offset in enumerate((t + 1.0, t, 1.0 - t, 2.0 - t)):
        tap = bicubic._cubic(offset, bicubic.PLAIN_CUBIC_A, backend=ops)
        weights = weights + _one_hot(base - 1 + k, in_size, dtype) * tap
    return weights


def image_grids(patch_coord, patch_valid):
    """Each image's patch grid `(B,)` rows and `(B,)` columns: its largest valid coordinate + 1."""
    coord = ops.cast(patch_coord, "int32")
    valid = ops.cast(patch_valid, "bool")[..., None]
    coord = ops.where(valid, coord, ops.zeros_like(coord))
    grid = ops.max(coord, axis=1) + 1  # (B, 2)
    return grid[:, 0], grid[:, 1]


def naflex_position_embedding(
    table,
    patch_coord,
    patch_valid,
    interpolation="bicubic",
    antialias=True,
    align_corners=False,
    aspect_preserving=False,
):
    """The position embedding `(B, N, D)` of each token of a NaFlex batch.

    Args:
        table: `(gh, gw, D)` learned table (static `gh`, `gw`), or a pair `(rows (gh, D),
            columns (gw, D))` for factorised embeddings (resized with linear interpolation,
            no antialiasing, as timm does, whatever `interpolation` says).
        patch_coord: integer `(B, N, 2)` `(y, x)` grid positions.
        patch_valid: boolean `(B, N)`; padding tokens get zeros.
        interpolation, antialias, align_corners: the resize (see `axis_weights`).
        aspect_preserving: bool. Resize both axes to the longer side and keep the top-left
            block (timm's `pos_embed_ar_preserving`). Defaults to False.

    Returns:
        float32 `(B, N, D)`.
    """
    rows, columns = image_grids(patch_coord, patch_valid)
    if aspect_preserving:
        rows = columns = ops.maximum(rows, columns)
    valid = ops.cast(patch_valid, "bool")
    coord = ops.cast(patch_coord, "int32")
    coord = ops.where(valid[..., None], coord, ops.zeros_like(coord))  # padding: any coordinates
    y, x = coord[..., 0], coord[..., 1]
    n_rows = ops.broadcast_to(rows[:, None], ops.shape(y))
    n_columns = ops.broadcast_to(columns[:, None], ops.shape(x))
    if isinstance(table, (tuple, list)):
        table_y, table_x = (ops.cast(t, "float32") for t in table)
        wy = axis_weights(y, n_rows, int(table_y.shape[0]), "bilinear", antialias=False)
        wx = axis_weights(x, n_columns, int(table_x.shape[0]), "bilinear", antialias=False)
        out = ops.einsum("bni,id->bnd", wy, table_y) + ops.einsum("bnj,jd->bnd", wx, table_x)
    else:
        table = ops.cast(table, "float32")
        gh, gw = int(table.shape[0]), int(table.shape[1])
        options = dict(interpolation=interpolation, antialias=antialias)
        options["align_corners"] = align_corners
        wy = axis_weights(y, n_rows, gh, **options)
        wx = axis_weights(x, n_columns, gw, **options)
        out = ops.einsum("bnj,bnjd->bnd", wx, ops.einsum("bni,ijd->bnjd", wy, table))
    return ops.where(valid[..., None], out, ops.zeros_like(out))


def resize_table(table, grid, interpolation="bicubic", antialias=True, align_corners=False):
    """A `(gh, gw, D)` table resized to one `grid` `(rows, columns)` (ints or scalar tensors).

    PyTorch's `F.interpolate` of the table (see `axis_weights`) as two resize matrices: what a
    `PatchEncoder` with `dynamic_image_size` and a resize other than timm's default antialiased
    bicubic (Qwen3-VL's bilinear with `align_corners=True`) computes at every call.
    """
    gh, gw = int(table.shape[0]), int(table.shape[1])
    rows, columns = grid
    wy = axis_weights(
        ops.arange(rows), ops.full((rows,), rows), gh, interpolation, antialias, align_corners
    )
    wx = axis_weights(
        ops.arange(columns), ops.full((columns,), columns), gw, interpolation, antialias,
        align_corners,
    )  # fmt: skip
    return ops.einsum("ia,abd,jb->ijd", wy, ops.cast(table, "float32"), wx)
