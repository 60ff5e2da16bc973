"""NaFlex batches in `tf.data`: images of any size -> `patches`, `patch_coord`, `patch_valid`.

The graph version of `keras_vit.data.naflex` (TensorFlow ops only: no Python in the pipeline,
so it runs in parallel `tf.data` maps and inside a SavedModel): `naflex_example` turns one
decoded image `(h, w, C)` (uint8 or float, any size known only at run time) into one padded
NaFlex example, and `naflex_dataset` maps a dataset of images (or `(image, label, ...)` tuples)
to batches of them. `tf.data` feeds `model.fit` on every Keras backend.

Equal to the NumPy `naflex_batch` on the same images:

- the same size: timm's `get_image_size_for_seq` binary search and `ResizeKeepRatioToSequence`
  rounding (`naflex_image_size`), computed in float64 with the same operations (Python's
  `round` and `tf.round` both round half to even), so the same grid for every image; the
  search's result comes in closed form (integer arithmetic, about 40 ops instead of the
  search's 360), and the search itself runs (`tf.cond`, a `tf.while_loop`) only for the few
  sizes where two breakpoints lie within 3e-5 of the answer;
- the same resize: PyTorch's antialiased bilinear (`F.interpolate(mode="bilinear",
  antialias=True, align_corners=False)`, torchvision's on float tensors; NumPy: two float64
  matrices, `keras_vit.layers.patch_resize.linear_resize_matrix`), here
  `tf.image.resize(..., antialias=True)` in float32, the same triangle filter: patches agree
  within float32 rounding (measured at most 1e-5 of a [-1, 1] pixel range, as PyTorch's own
  float32 result); `resize_matrix` gives the same weights as a matrix;
- the same patch order ((row, column, channel) inside a patch, row-major patches), the same
  coordinates and validity; `patch_coord` is int32 here (NumPy: int64).
"""

from keras_vit.data._imports import import_tf
from keras_vit.data.naflex import EMPTY_IMAGE, check_image_hw
from keras_vit.layers._checks import check_positive_int, check_positive_int_pair

_EPS = 1e-5  # timm's get_image_size_for_seq tolerance (naflex_image_size's default)


def _search_steps(eps=_EPS):
    """How many halvings `naflex_image_size`'s binary search makes (the same for any image)."""
    low, high, steps = eps / 10.0, 100.0, 0
    while high - low >= eps:
        high, steps = (low + high) / 2.0, steps + 1
    return steps


def naflex_size(image_hw, patch_size, max_patches):
    """`naflex_image_size` in TensorFlow: the `(height, width)` int32 an image is resized to.

    Args:
        image_hw: int tensor `(2,)`: the image's height and width.
        patch_size: int or (height, width).
        max_patches: int. The patch budget.

    Returns:
        int32 tensor `(2,)`, multiples of the patch, at most `max_patches` patches.

    Example:

    >>> naflex_size([480, 640], 16, 256).numpy().tolist()
    [224, 288]
    """
    tf = import_tf()
    ph, pw = check_positive_int_pair(patch_size, "patch_size")
    max_patches = check_positive_int(max_patches, "max_patches")
    hw = tf.cast(image_hw, "float64")
    h, w = hw[0], hw[1]
    fph, fpw = float(ph), float(pw)
    exact, near_edge = _closed_form_target(image_hw, (ph, pw), max_patches)
    target_h, target_w = tf.cond(
        near_edge, lambda: _binary_search_target(h, w, (fph, fpw), max_patches), lambda: exact
    )
    ratio = tf.minimum(target_h / h, target_w / w)
    height = fph * tf.math.ceil(tf.maximum(tf.round(h * ratio), fph) / fph)
    width = fpw * tf.math.ceil(tf.maximum(tf.round(w * ratio), fpw) / fpw)
    count = tf.math.floordiv(height, fph) * tf.math.floordiv(width, fpw)
    scale = tf.sqrt(max_patches / count)
    shrunk_h = fph * tf.math.ceil(tf.floor(height * scale) / fph)
    shrunk_w = fpw * tf.math.ceil(tf.floor(width * scale) / fpw)
    over = count > max_patches
    size = tf.stack([tf.where(over, shrunk_h, height), tf.where(over, shrunk_w, width)])
    return tf.cast(size, "int32")


def _binary_search_target(h, w, patch, max_patches):
    """timm's `get_image_size_for_seq` search (its fixed step count), float64 ops.

    Returns the `prepare_target_hw` size at the search's final scale, as float64 scalars. About
    360 scalar ops in a `tf.while_loop`: `naflex_size` runs it only where `_closed_form_target`
    cannot vouch for the same answer.
    """
    tf = import_tf()
    fph, fpw = patch

    def scaled(ratio):  # timm's prepare_target_hw
        height = tf.maximum(fph * tf.math.ceil(h * ratio / fph), fph)
        width = tf.maximum(fpw * tf.math.ceil(w * ratio / fpw), fpw)
        return height, width

    def fits(ratio):
        height, width = scaled(ratio)
        return tf.math.floordiv(height, fph) * tf.math.floordiv(width, fpw) <= max_patches

    def halve(step, low, high):
        mid = (low + high) / 2.0
        ok = fits(mid)
        return step + 1, tf.where(ok, mid, low), tf.where(ok, high, mid)

    steps = _search_steps()
    low, high = tf.constant(_EPS / 10.0, "float64"), tf.constant(100.0, "float64")
    # a loop, not the steps unrolled: inside `naflex_size`'s `tf.cond` an untaken branch still
    # passes a dead tensor through each of its nodes (360 unrolled: about 0.2 ms per image in
    # `tf.data`, 7x the closed form), against a handful for the loop
    _, low, _ = tf.while_loop(
        lambda step, low, high: step < steps, halve, (tf.constant(0), low, high),
        maximum_iterations=steps,
    )  # fmt: skip
    # (NumPy checks that a scale was found: with max_patches >= 1 one always is)
    return scaled(low)


def _closed_form_target(image_hw, patch, max_patches):
    """The binary search's target size in closed form, and where it might differ from it.

    The search's predicate "the scale r fits" is monotone in r and changes only at the
    breakpoints `k * ph / h` and `k * pw / w` (where a ceil steps), so it converges to within
    `_EPS` below the largest fitting scale, `max over k of min(k * ph / h, (max_patches // k)
    * pw / w)` (k: rows of patches), and its target is the patch grid just below that scale.
    In integers (numerators over `h * w`) that is exact; it is the search's answer unless
    another breakpoint lies within 3 `_EPS` of it (the search may stop on its far side), two
    breakpoints coincide there, or it lies within 3 `_EPS` of the search's range ends: then
    `near_edge` is True and `naflex_size` runs the search itself.

    Returns:
        `((height, width), near_edge)`: float64 scalars and a bool scalar.
    """
    tf = import_tf()
    ph, pw = patch
    hw = tf.cast(image_hw, "int64")
    h, w = hw[0], hw[1]
    step_h, step_w = ph * w, pw * h  # breakpoints: k * step / (h * w)
    rows = tf.range(1, max_patches + 1, dtype="int64")
    cols = tf.constant(max_patches, "int64") // rows
    top = tf.reduce_max(tf.minimum(rows * step_h, cols * step_w))  # largest fitting scale
    height, width = -((-top) // step_h), -((-top) // step_w)  # ceil: patches per side
    rem_h, rem_w = top % step_h, top % step_w
    below = tf.minimum(tf.where(rem_h > 0, rem_h, step_h), tf.where(rem_w > 0, rem_w, step_w))
    above = tf.minimum(step_h - rem_h, step_w - rem_w)
    gap = tf.cast(tf.minimum(below, above), "float64")
    area = tf.cast(h * w, "float64")
    scale = tf.cast(top, "float64") / area
    margin = 3.0 * _EPS
    near_edge = (
        (gap <= margin * area)
        | ((rem_h == 0) & (rem_w == 0))
        | (scale <= _EPS / 10.0 + margin)
        | (scale >= 100.0 - margin)
    )
    target = (tf.cast(height * ph, "float64"), tf.cast(width * pw, "float64"))
    return target, near_edge


def resize_matrix(in_size, out_size):
    """PyTorch's antialiased bilinear resize along one axis as an `(out, in)` float32 matrix.

    The graph twin of `keras_vit.layers.patch_resize.linear_resize_matrix` (sizes may be
    tensors): triangle weights centred at `scale * (i + 0.5)`, widened by `max(scale, 1)`,
    normalised per row; the identity when the sizes are equal.
    """
    tf = import_tf()
    n_in, n_out = tf.cast(in_size, "float64"), tf.cast(out_size, "float64")
    scale = n_in / n_out
    center = scale * (tf.range(n_out, dtype="float64") + 0.5)
    source = tf.range(n_in, dtype="float64") + 0.5
    distance = tf.abs(source[None, :] - center[:, None]) / tf.maximum(scale, 1.0)
    weights = tf.maximum(1.0 - distance, 0.0)
    return tf.cast(weights / tf.reduce_sum(weights, axis=1, keepdims=True), "float32")


def naflex_example(image, patch_size, max_patches, preprocess=None):
    """One image -> one NaFlex example (`naflex_batch` of one image, without the batch axis).

    Args:
        image: `(h, w, C)` tensor, uint8 or float, any size; `C` known statically.
        patch_size: int or (height, width).
        max_patches: int. Patches at most, and the padded length.
        preprocess: optional callable on the float32 `(h, w, C)` image before the resize
            (e.g. `keras_vit.preprocessing.scale_pixels` for [0, 255] -> [-1, 1]; a per-pixel
            affine map gives the same patches before or after the resize). Defaults to None.

    Returns:
        dict `patches` float32 `(max_patches, ph * pw * C)`, `patch_coord` int32
        `(max_patches, 2)`, `patch_valid` bool `(max_patches,)`.

    Example:

    >>> import numpy as np
    >>> example = naflex_example(np.zeros((30, 60, 3), "uint8"), 8, 16)
    >>> example["patches"].shape.as_list(), int(example["patch_valid"].numpy().sum())
    ([16, 192], 15)
    """
    tf = import_tf()
    ph, pw = check_positive_int_pair(patch_size, "patch_size")
    max_patches = check_positive_int(max_patches, "max_patches")
    image = tf.convert_to_tensor(image)
    channels = image.shape[-1]
    if image.shape.rank != 3 or channels is None:
        raise ValueError(
            "naflex_example expects one (height, width, channels) image with a known channel "
            f"count. Received: shape {image.shape}"
        )
    if None not in image.shape[:2]:  # known here: the error naflex_batch gives
        check_image_hw(image.shape[:2], f"an image of shape {tuple(image.shape)}")
    image = tf.cast(image, "float32")
    if preprocess is not None:
        image = preprocess(image)
    hw = tf.shape(image)[:2]
    # Known only when the pipeline runs: the same words, raised by TensorFlow there.
    with tf.control_dependencies(
        [tf.debugging.assert_positive(hw, message=f"{EMPTY_IMAGE} (image height, width)")]
    ):
        hw = tf.identity(hw)
    size = naflex_size(hw, (ph, pw), max_patches)
    # TensorFlow's antialiased bilinear (scale_and_translate, triangle kernel) is PyTorch's
    # within float32 rounding (tests: `naflex_batch` within 1e-5 on [-1, 1] pixels) and about
    # half the time of `resize_matrix`'s two matrices and their product
    resized = tf.image.resize(image, size, antialias=True)
    gh, gw = size[0] // ph, size[1] // pw
    n = gh * gw
    grid = tf.reshape(resized, (gh, ph, gw, pw, channels))
    patches = tf.reshape(tf.transpose(grid, (0, 2, 1, 3, 4)), (n, ph * pw * channels))
    index = tf.range(n)
    coord = tf.stack([index // gw, index % gw], axis=1)
    pad = max_patches - n
    return {
        "patches": tf.ensure_shape(
            tf.pad(patches, [[0, pad], [0, 0]]), (max_patches, ph * pw * channels)
        ),
        "patch_coord": tf.ensure_shape(tf.pad(coord, [[0, pad], [0, 0]]), (max_patches, 2)),
        "patch_valid": tf.ensure_shape(tf.range(max_patches) < n, (max_patches,)),
    }


def naflex_dataset(
    dataset,
    patch_size,
    max_patches,
    batch_size,
    *,
    preprocess=None,
    drop_remainder=False,
    num_parallel_calls=None,
):
    """Maps a `tf.data.Dataset` of images of any size to NaFlex dict batches.

    Args:
        dataset: `tf.data.Dataset` of `(h, w, C)` images (uint8 or float, decoded; any sizes,
            e.g. `.ragged_batch`-free elements of a folder), or of tuples whose first item is
            the image (`(image, label)`: the rest passes through).
        patch_size: int or (height, width). The model's patch size.
        max_patches: int. The patch budget per image (the padded sequence length).
        batch_size: int. Images per batch.
        preprocess: optional callable on each float32 image (see `naflex_example`).
            Defaults to None (pixels as they are).
        drop_remainder: bool. Drop the last incomplete batch. Defaults to False.
        num_parallel_calls: optional int. The map's parallelism. Defaults to
            `tf.data.AUTOTUNE`.

    Returns:
        `tf.data.Dataset` of `{"patches", "patch_coord", "patch_valid"}` (or `(dict, label,
        ...)`), the same arrays as `naflex_batch` makes from the same images.

    Example:

    >>> import numpy as np
    >>> tf = import_tf()
    >>> images = [np.zeros((30, 60, 3), "uint8"), np.zeros((64, 32, 3), "uint8")]
    >>> ds = tf.data.Dataset.from_generator(lambda: iter(images),
    ...     output_signature=tf.TensorSpec((None, None, 3), tf.uint8))
    >>> batch = next(iter(naflex_dataset(ds, 8, 16, batch_size=2)))
    >>> batch["patch_valid"].numpy().sum(axis=1).tolist()
    [15, 15]

    Reference:
        Dehghani et al., 2023, "Patch n' Pack: NaViT"; timm `timm/data/naflex_transforms.py`.
    """
    tf = import_tf()
    patch_size = check_positive_int_pair(patch_size, "patch_size")
    max_patches = check_positive_int(max_patches, "max_patches")
    batch_size = check_positive_int(batch_size, "batch_size")
    spec = dataset.element_spec
    first = spec[0] if isinstance(spec, tuple) else spec
    if not isinstance(first, tf.TensorSpec) or first.shape.rank != 3 or first.shape[-1] is None:
        raise ValueError(
            "naflex_dataset expects a dataset of (height, width, channels) images (or tuples "
            f"starting with one) with a known channel count. Received: element_spec={spec}"
        )

    def to_naflex(*element):
        example = naflex_example(element[0], patch_size, max_patches, preprocess=preprocess)
        return example if len(element) == 1 else (example, *element[1:])

    parallel = tf.data.AUTOTUNE if num_parallel_calls is None else num_parallel_calls
    ds = dataset.map(to_naflex, num_parallel_calls=parallel)
    return ds.batch(batch_size, drop_remainder=drop_remainder)
