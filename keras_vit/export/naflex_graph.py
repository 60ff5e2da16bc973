"""NaFlex patchification in the TensorFlow graph, for the SavedModel `serve_bytes` signature of
NaFlex models: one encoded image of any size -> `patches`, `patch_coord`, `patch_valid`.

The same arithmetic as the NumPy batching path (`keras_vit.data.naflex_batch`), op for op in
float64: the target size by timm's binary search on the scale (`naflex_image_size`: the same
fixed number of bisection steps, `ceil`, half-to-even `round` and truncation as Python's), the
antialiased bilinear resize as two matrices (`keras_vit.layers.patch_resize.
linear_resize_matrix`, PyTorch's), and the (row, column, channel) patch order with `(y, x)`
coordinates, zero-padded to `max_patches`. TensorFlow is imported by the caller (export only).
"""

import math

# timm's `get_image_size_for_seq` bisection bounds and tolerance (`naflex_image_size`).
_LOW, _HIGH, _EPS = 1e-6, 100.0, 1e-5


def _scaled(tf, size, patch, ratio):
    """timm's `prepare_target_hw` on one axis: `patch * ceil(size * ratio / patch)`, >= patch."""
    return tf.maximum(patch * tf.math.ceil(size * ratio / patch), patch)


def naflex_image_size(tf, height, width, patch_size, max_patches):
    """`keras_vit.data.naflex_image_size` in TensorFlow ops: float64 `(H, W)` scalars.

    `height`, `width` are float64 scalar tensors; the bisection is the NumPy loop's
    (`while high - low >= eps`), so the result is the same.
    """
    ph, pw = (float(p) for p in patch_size)
    budget = float(max_patches)

    def fits(ratio):
        rows = _scaled(tf, height, ph, ratio) / ph
        cols = _scaled(tf, width, pw, ratio) / pw
        return rows * cols <= budget

    def halve(low, high):
        mid = (low + high) / 2.0
        ok = fits(mid)
        return tf.where(ok, mid, low), tf.where(ok, high, mid)

    low, high = tf.while_loop(
        lambda low, high: high - low >= _EPS,
        halve,
        [tf.constant(_LOW, tf.float64), tf.constant(_HIGH, tf.float64)],
    )
    tf.debugging.assert_greater(
        low, tf.constant(_EPS, tf.float64),
        message=f"No scale fits the image into {max_patches} patches of {patch_size}",
    )
    target_h, target_w = _scaled(tf, height, ph, low), _scaled(tf, width, pw, low)
    ratio = tf.minimum(target_h / height, target_w / width)
    size_h = ph * tf.math.ceil(tf.maximum(tf.round(height * ratio), ph) / ph)
    size_w = pw * tf.math.ceil(tf.maximum(tf.round(width * ratio), pw) / pw)
    count = (size_h / ph) * (size_w / pw)
    scale = tf.sqrt(budget / count)
    over = count > budget
    size_h = tf.where(over, ph * tf.math.ceil(tf.floor(size_h * scale) / ph), size_h)
    size_w = tf.where(over, pw * tf.math.ceil(tf.floor(size_w * scale) / pw), size_w)
    return size_h, size_w


def linear_resize_matrix(tf, in_size, out_size):
    """PyTorch's antialiased bilinear resize along one axis, `(out, in)` float64 (TF ops).

    `in_size`, `out_size`: float64 scalar tensors. The identity when they are equal.
    """
    scale = in_size / out_size
    center = scale * (tf.range(out_size, dtype=tf.float64) + 0.5)
    source = tf.range(in_size, dtype=tf.float64) + 0.5
    distance = (source[None, :] - center[:, None]) / tf.maximum(scale, tf.constant(1.0, tf.float64))
    weights = tf.maximum(tf.constant(0.0, tf.float64), 1.0 - tf.abs(distance))
    matrix = weights / tf.reduce_sum(weights, axis=1, keepdims=True)
    same = tf.equal(in_size, out_size)
    return tf.where(same, tf.eye(tf.shape(matrix)[0], tf.shape(matrix)[1], dtype=tf.float64),
                    matrix)  # fmt: skip


def naflex_patchify(tf, image, patch_size, max_patches):
    """One image `(h, w, C)` float32 (already normalised) -> its NaFlex example.

    Returns:
        `(patches float32 (max_patches, ph * pw * C), patch_coord int32 (max_patches, 2),
        patch_valid bool (max_patches,))`, as one row of `keras_vit.data.naflex_batch`.
    """
    ph, pw = patch_size
    channels = image.shape[-1]
    shape = tf.cast(tf.shape(image), tf.float64)
    height, width = naflex_image_size(tf, shape[0], shape[1], (ph, pw), max_patches)
    rows = linear_resize_matrix(tf, shape[0], height)
    cols = linear_resize_matrix(tf, shape[1], width)
    resized = tf.einsum("Hh,hwc,Ww->HWc", rows, tf.cast(image, tf.float64), cols)
    resized = tf.cast(resized, tf.float32)
    gh, gw = tf.cast(height, tf.int32) // ph, tf.cast(width, tf.int32) // pw
    grid = tf.reshape(resized, (gh, ph, gw, pw, channels))
    grid = tf.transpose(grid, (0, 2, 1, 3, 4))
    n = gh * gw
    patches = tf.reshape(grid, (n, ph * pw * channels))
    y, x = tf.meshgrid(tf.range(gh), tf.range(gw), indexing="ij")
    coords = tf.stack([tf.reshape(y, (-1,)), tf.reshape(x, (-1,))], axis=1)
    pad = max_patches - n
    patches = tf.pad(patches, [[0, pad], [0, 0]])
    coords = tf.pad(coords, [[0, pad], [0, 0]])
    valid = tf.range(max_patches) < n
    patches = tf.ensure_shape(patches, (max_patches, ph * pw * channels))
    return patches, tf.ensure_shape(coords, (max_patches, 2)), valid


def check_max_patches(max_patches, grid_size):
    """`max_patches` of a NaFlex export (default: the position table's grid, `rows * cols`)."""
    if max_patches is None:
        return int(math.prod(grid_size))
    if isinstance(max_patches, bool) or not isinstance(max_patches, int) or max_patches < 1:
        raise ValueError(
            f"max_patches must be a positive int (the patch budget of serve_bytes). "
            f"Received: max_patches={max_patches!r}"
        )
    return max_patches
