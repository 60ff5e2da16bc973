"""BEiT's relative position bias: a learned table of per-head biases indexed by token offsets.

`RelativePositionBias` holds the table (timm's `relative_position_bias_table`,
`((2h - 1) (2w - 1) + 3, heads)` for an `h x w` grid and a class token) and returns the additive
attention bias `(1, heads, T, T)` (T = 1 + h w) that `MultiHeadSelfAttention(attention_bias=...)`
adds to the attention logits. `relative_position_index` is timm's `gen_relative_position_index`
and `resize_relative_position_table` timm's `resize_rel_pos_bias_table` (the table of another
grid, as timm resamples a checkpoint for another image size), both in NumPy;
`resize_relative_position_table_bilinear` is transformers' BEiT resize instead (bilinear on the
offset grid).
`RelativePositionMLP` is timm's `RelPosMlp` (the `vit_relpos_*` models): the biases of an MLP
of log-spaced offsets instead of a table.
"""

import keras
import numpy as np
from keras import ops

from keras_vit.layers._checks import (
    check_bool,
    check_non_negative_int,
    check_positive_int,
    check_positive_int_pair,
)
from keras_vit.layers.position_embedding import resample_position_embedding
from keras_vit.layers.sharding import HEADS, REPLICATED


def num_relative_distances(grid_size, class_token=True):
    """Rows of the table: every (row, column) offset, plus 3 for the class token's pairs."""
    h, w = grid_size
    return (2 * h - 1) * (2 * w - 1) + (3 if class_token else 0)


def relative_position_index(grid_size, class_token=True):
    """timm's `gen_relative_position_index`: the table row of every (query, key) pair.

    Args:
        grid_size: (rows, columns) of the patch grid.
        class_token: bool. A class token first: its rows use the last three table rows
            (class to patch, patch to class, class to class). Defaults to True.

    Returns:
        int32 array `(T, T)`, T = `rows * columns` (+ 1 with the class token).

    Example:

    >>> relative_position_index((1, 2))
    array([[5, 3, 3],
           [4, 1, 0],
           [4, 2, 1]], dtype=int32)
    """
    h, w = check_positive_int_pair(grid_size, "grid_size")
    rows, cols = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    coords = np.stack([rows.reshape(-1), cols.reshape(-1)])  # (2, h w), row-major
    offsets = coords[:, :, None] - coords[:, None, :]
    index = (offsets[0] + h - 1) * (2 * w - 1) + offsets[1] + w - 1
    if not class_token:
        return index.astype("int32")
    n = num_relative_distances((h, w))
    out = np.zeros((h * w + 1,) * 2, "int64")
    out[1:, 1:] = index
    out[0, :] = n - 3
    out[:, 0] = n - 2
    out[0, 0] = n - 1
    return out.astype("int32")


def _progression_positions(src, dst):
    """timm's log-spaced source positions covering a `dst`-wide window (BEiT's fine-tuning code)."""
    left, right = 1.01, 1.5
    while right - left > 1e-6:
        q = (left + right) / 2.0
        if (1.0 - q ** (src // 2)) / (1.0 - q) > dst // 2:
            right = q
        else:
            left = q
    distances, current = [], 1
    for i in range(src // 2):
        distances.append(current)
        current += q ** (i + 1)
    # float32, as timm's torch.tensor of the list
    return np.asarray([-d for d in reversed(distances)] + [0] + distances, "float32")


def _interpolate_linear(points, values, targets):
    """timm's `RegularGridInterpolator` (linear, edges held) at `targets` (2 arrays, same shape)."""
    indices, distances, overall = [], [], []
    for p, x in zip(points, targets, strict=True):
        p, x = p.astype("float64"), x.astype("float64")
        right = np.minimum(np.searchsorted(p, x, side="left"), len(p) - 1)
        left = np.clip(right - 1, 0, len(p) - 1)
        d_left = np.maximum(x - p[left], 0.0)
        d_right = np.maximum(p[right] - x, 0.0)
        both_zero = (d_left == 0) & (d_right == 0)
        d_left[both_zero] = 1.0
        d_right[both_zero] = 1.0
        indices.append((left, right))
        distances.append((d_left, d_right))
        overall.append(d_left + d_right)
    out = 0.0
    for a in (0, 1):
        for b in (0, 1):
            weight = distances[0][1 - a] * distances[1][1 - b]
            out = out + values[indices[0][a], indices[1][b]] * weight
    return out / (overall[0] * overall[1])


def resize_relative_position_table(table, grid_size, old_grid_size=None, class_token=True):
    """timm's `resize_rel_pos_bias_table`: a `(rows, heads)` table for another grid.

    The offsets of the old table sit at log-spaced positions that reach across the new
    window (BEiT's fine-tuning recipe); each head is interpolated linearly (timm's default,
    without scipy) at the new integer offsets; the class-token rows are kept.

    Args:
        table: array `(num_relative_distances(old grid), heads)`.
        grid_size: (rows, columns) of the new grid.
        old_grid_size: optional (rows, columns) of the table's grid. Defaults to the square
            grid its row count implies (as timm reads a checkpoint), or the new grid when
            the rows already fit it.
        class_token: bool. Whether the table has the 3 class-token rows. Defaults to True.

    Returns:
        float array `(num_relative_distances(grid_size), heads)`, in the table's dtype.

    Raises:
        ValueError: a table whose row count fits no grid.
    """
    table = np.asarray(table)
    h, w = check_positive_int_pair(grid_size, "grid_size")
    extra = 3 if class_token else 0
    dst = (2 * h - 1, 2 * w - 1)
    count = table.shape[0] - extra
    if old_grid_size is not None:
        oh, ow = check_positive_int_pair(old_grid_size, "old_grid_size")
        src = (2 * oh - 1, 2 * ow - 1)
    else:
        side = int(count**0.5)
        if side * side == count:
            src = (side, side)
        elif count == dst[0] * dst[1]:
            src = dst
        else:
            raise ValueError(
                f"Cannot tell the grid of a relative position table of {table.shape[0]} rows "
                "(not a square grid's): pass old_grid_size."
            )
    if src[0] * src[1] != count:
        raise ValueError(
            f"The table has {table.shape[0]} rows; a {old_grid_size} grid needs "
            f"{src[0] * src[1] + extra}. Received: table shape {table.shape}"
        )
    if src == dst:
        return table
    points = (_progression_positions(src[0], dst[0]), _progression_positions(src[1], dst[1]))
    ty, tx = dst[0] // 2, dst[1] // 2
    dy = np.arange(-ty, ty + 0.1, 1.0, dtype="float32")
    dx = np.arange(-tx, tx + 0.1, 1.0, dtype="float32")
    targets = np.meshgrid(dy, dx, indexing="ij")
    values = table[:count].astype("float64").reshape(src[0], src[1], -1)
    heads = [
        _interpolate_linear(points, values[:, :, i], targets).reshape(-1)
        for i in range(values.shape[-1])
    ]
    resized = np.stack(heads, axis=-1)
    if extra:
        resized = np.concatenate([resized, table[count:].astype("float64")], axis=0)
    return resized.astype(table.dtype)


def resize_relative_position_table_bilinear(table, grid_size, old_grid_size):
    """transformers' BEiT table for another window: a `(rows, heads)` table of `old_grid_size`
    -> one of `grid_size` (timm's resize is `resize_relative_position_table`).

    The `(2 oh - 1) * (2 ow - 1)` offset rows, as a `(2 oh - 1, 2 ow - 1)` map per head, are
    resized bilinearly to `(2h - 1, 2w - 1)` (PyTorch's `F.interpolate(mode="bilinear")`,
    `align_corners=False`, no antialias: `BeitRelativePositionBias.forward`); the 3 class-token
    rows at the end are kept.

    Args:
        table: array `(num_relative_distances(old_grid_size), heads)`.
        grid_size: (rows, columns) of the new grid.
        old_grid_size: (rows, columns) of the table's grid.

    Returns:
        float32 array `(num_relative_distances(grid_size), heads)`.

    Raises:
        ValueError: a table whose row count is not `old_grid_size`'s.

    Example:

    >>> table = np.arange(2 * (3 * 3 + 3), dtype="float32").reshape(12, 2)  # a 2 x 2 window
    >>> resize_relative_position_table_bilinear(table, (3, 3), (2, 2)).shape
    (28, 2)
    """
    h, w = check_positive_int_pair(grid_size, "grid_size")
    oh, ow = check_positive_int_pair(old_grid_size, "old_grid_size")
    table = np.asarray(table)
    src, dst = (2 * oh - 1, 2 * ow - 1), (2 * h - 1, 2 * w - 1)
    if table.ndim != 2 or table.shape[0] != src[0] * src[1] + 3:
        raise ValueError(
            f"A relative position table of a {oh} x {ow} window has {src[0] * src[1] + 3} rows. "
            f"Received: shape {table.shape}"
        )
    offsets = table[None, : src[0] * src[1]]
    resized = resample_position_embedding(
        offsets, dst, 0, old_grid=src, interpolation="bilinear", antialias=False
    )[0]
    return np.concatenate([resized, table[src[0] * src[1] :]]).astype("float32")


def _per_pair(table, index, tokens):
    """`(heads, tokens, tokens)`: the `(rows, heads)` table's row `index[i * tokens + j]`."""
    bias = ops.reshape(ops.take(table, index, axis=0), (tokens, tokens, -1))
    return ops.transpose(bias, (2, 0, 1))


class _RelativeBias(keras.layers.Layer):
    """Base of the relative position biases: called on the `(B, T, D)` tokens the bias is for
    (only their count is read, which must be `num_tokens`), returns the `(1, heads, T, T)`
    bias (`table_bias()[None]`)."""

    def call(self, inputs=None):
        tokens = None if inputs is None else inputs.shape[1]
        if tokens is not None and tokens != self.num_tokens:
            raise ValueError(
                f"{self.name}: the bias is for {self.num_tokens} tokens "
                f"({self._tokens_described()}). Received: {tokens} tokens"
            )
        return self.table_bias()[None]

    def compute_output_shape(self, input_shape=None):
        return (1, self.num_heads, self.num_tokens, self.num_tokens)


@keras.saving.register_keras_serializable(package="keras_vit")
class RelativePositionBias(_RelativeBias):
    """BEiT's relative position bias: `(1, heads, T, T)` from a learned table.

    The bias of query token i and key token j is `table[index[i, j]]`, one value per head,
    where `index` (`relative_position_index`) numbers the (row, column) offsets of two
    patches, and three more rows serve the class token (class to patch, patch to class,
    class to class), as timm's `RelativePositionBias` / BEiT's `Attention` (per block, or one
    shared by all blocks). The table starts at zero (timm).

    Args:
        num_heads: int. Attention heads (table columns).
        grid_size: int or (rows, columns). The patch grid.
        class_token: bool. The tokens start with a class token. Defaults to True.

    Call arguments:
        inputs: the `(B, T, D)` tokens the bias is for (only their count is read).

    Returns:
        `(1, heads, T, T)`.

    Example:

    >>> import numpy as np
    >>> layer = RelativePositionBias(num_heads=2, grid_size=(2, 3))
    >>> tuple(layer(np.zeros((1, 7, 8), "float32")).shape)
    (1, 2, 7, 7)
    >>> tuple(layer.relative_position_bias_table.shape)
    (18, 2)

    Reference:
        Bao et al., 2022, "BEiT: BERT Pre-Training of Image Transformers", Sec. 2.6.
    """

    # Tensor-parallel roles of the projections (keras_vit.layers.sharding).
    sharding_roles = {"relative_position_bias_table": HEADS}

    def __init__(self, num_heads, grid_size, class_token=True, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.grid_size = check_positive_int_pair(grid_size, "grid_size")
        self.class_token = check_bool(class_token, "class_token")
        self._index = relative_position_index(self.grid_size, self.class_token).reshape(-1)
        self.num_tokens = self.grid_size[0] * self.grid_size[1] + int(self.class_token)

    def build(self, input_shape=None):
        self.relative_position_bias_table = self.add_weight(
            name="relative_position_bias_table",
            shape=(num_relative_distances(self.grid_size, self.class_token), self.num_heads),
            initializer="zeros",
        )
        self.built = True

    def _tokens_described(self):
        return f"grid {self.grid_size}{' and a class token' if self.class_token else ''}"

    def table_bias(self):
        """`(heads, T, T)`: the table's row of each (query, key) pair."""
        return _per_pair(self.relative_position_bias_table, self._index, self.num_tokens)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "grid_size": self.grid_size,
                "class_token": self.class_token,
            }
        )
        return config


def relative_log_coordinates(grid_size):
    """timm's `gen_relative_log_coords(mode="cr")`: `sign(d) log(1 + |d|)` of every offset.

    Returns:
        float32 array `((2h - 1) (2w - 1), 2)`: (row, column) offsets, row-major.
    """
    h, w = check_positive_int_pair(grid_size, "grid_size")
    rows, cols = np.meshgrid(
        np.arange(-(h - 1), h, dtype="float32"), np.arange(-(w - 1), w, dtype="float32"),
        indexing="ij",
    )  # fmt: skip
    coords = np.stack([rows, cols], axis=-1).reshape(-1, 2)
    return (np.sign(coords) * np.log1p(np.abs(coords))).astype("float32")


@keras.saving.register_keras_serializable(package="keras_vit")
class RelativePositionMLP(_RelativeBias):
    """timm's `RelPosMlp` (`mode="cr"`): relative position biases from an MLP of log offsets.

    Every (row, column) offset of two patches, as `sign(d) log(1 + |d|)`, goes through
    `fc1` (ReLU) and `fc2` to one bias per head; the `(1, heads, T, T)` bias gathers them per
    (query, key) pair, with zeros for the prefix tokens (timm pads them), as timm's
    `vit_relpos_*` (per block) and `vit_srelpos_*` (shared) models. The offsets are the
    grid's, so the weights fit any image size.

    Args:
        num_heads: int. Attention heads (MLP outputs).
        grid_size: int or (rows, columns). The patch grid.
        hidden_dim: int. Hidden width of the MLP (timm's `rel_pos_dim`). Defaults to 128.
        num_prefix_tokens: int. Tokens before the patches (zero bias). Defaults to 0.

    Called as `RelativePositionBias` (on the tokens, for their count): `(1, heads, T, T)`.

    Example:

    >>> import numpy as np
    >>> layer = RelativePositionMLP(num_heads=2, grid_size=(2, 2), num_prefix_tokens=1)
    >>> tuple(layer(np.zeros((1, 5, 8), "float32")).shape)
    (1, 2, 5, 5)

    Reference:
        Liu et al., 2022, "Swin Transformer V2", Sec. 3.3 (log-spaced continuous position bias).
    """

    # Tensor-parallel roles of the projections (keras_vit.layers.sharding).
    sharding_roles = {"fc1|fc2": REPLICATED}

    def __init__(self, num_heads, grid_size, hidden_dim=128, num_prefix_tokens=0, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.grid_size = check_positive_int_pair(grid_size, "grid_size")
        self.hidden_dim = check_positive_int(hidden_dim, "hidden_dim")
        self.num_prefix_tokens = check_non_negative_int(num_prefix_tokens, "num_prefix_tokens")
        self._coords = relative_log_coordinates(self.grid_size)
        self._index = relative_position_index(self.grid_size, class_token=False).reshape(-1)
        self.num_tokens = self.grid_size[0] * self.grid_size[1] + num_prefix_tokens

    def build(self, input_shape=None):
        self.fc1 = keras.layers.Dense(
            self.hidden_dim, activation="relu", dtype=self.dtype_policy, name="fc1"
        )
        self.fc2 = keras.layers.Dense(self.num_heads, dtype=self.dtype_policy, name="fc2")
        self.fc1.build((None, 2))
        self.fc2.build((None, self.hidden_dim))
        self.built = True

    def _tokens_described(self):
        return f"grid {self.grid_size} and {self.num_prefix_tokens} prefix tokens"

    def table_bias(self):
        """`(heads, T, T)`: the MLP's bias of each (query, key) pair, zero for prefix tokens."""
        coords = ops.convert_to_tensor(self._coords, dtype=self.compute_dtype)
        table = self.fc2(self.fc1(coords))  # (offsets, heads)
        bias = _per_pair(table, self._index, self.grid_size[0] * self.grid_size[1])
        p = self.num_prefix_tokens
        if p:
            bias = ops.pad(bias, ((0, 0), (p, 0), (p, 0)))
        return bias

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "grid_size": self.grid_size,
                "hidden_dim": self.hidden_dim,
                "num_prefix_tokens": self.num_prefix_tokens,
            }
        )
        return config
