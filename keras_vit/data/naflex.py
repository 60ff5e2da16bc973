"""NaFlex batches in NumPy: images of any size -> `patches`, `patch_coord`, `patch_valid`.

NaViT / NaFlex (Dehghani et al., 2023; SigLIP 2) feed each image at its own aspect ratio as a
variable-length patch sequence, padded to a common length and masked. This module makes such a
batch from a list of images exactly as timm's NaFlex evaluation pipeline does
(`ResizeKeepRatioToSequence(patch_size, max_sequence_len)` -> `Patchify` -> `NaFlexCollator`):

- `naflex_image_size`: the size an image is resized to, keeping its aspect ratio, so that its
  patch grid holds at most `max_patches` patches (timm's `get_image_size_for_seq` binary search on
  the scale, then `ResizeKeepRatioToSequence.get_params` with `longest=0`: the shorter side's
  ratio, rounded, made a multiple of the patch);
- `naflex_batch`: each image resized to its size (PyTorch's / torchvision's antialiased
  bilinear on float tensors, as matrices: `keras_vit.layers.patch_resize.linear_resize_matrix`),
  cut into patches in (row, column, channel) order (our `Patches` order, timm's default), with
  integer `(y, x)` grid coordinates and a validity flag, zero-padded to `max_patches`.

The arrays drive timm's `NaFlexVit` as they are (`patches` `(B, N, P*P*C)` float32,
`patch_coord` `(B, N, 2)` int64, `patch_valid` `(B, N)` bool).
"""

import math

import numpy as np

from keras_vit.layers._checks import check_positive_int, check_positive_int_pair
from keras_vit.layers.patch_resize import linear_resize_matrix


def _scaled_size(image_hw, patch, ratio):
    """timm's `prepare_target_hw`: the scaled size, rounded up to whole patches (>= 1 patch)."""
    (ph, pw), (h, w) = patch, image_hw
    height = ph * math.ceil(h * ratio / ph)
    width = pw * math.ceil(w * ratio / pw)
    return int(max(height, ph)), int(max(width, pw))


EMPTY_IMAGE = "A NaFlex image must have a height and a width of at least 1 pixel"


def check_image_hw(image_hw, where="image"):
    """`image_hw` as two ints >= 1, else the `ValueError` `naflex_batch` and `naflex_dataset`
    share (`where` names the image)."""
    h, w = (int(v) for v in image_hw)
    if h < 1 or w < 1:
        raise ValueError(f"{EMPTY_IMAGE}. Received: {where} of height {h} and width {w}")
    return h, w


def naflex_image_size(image_hw, patch_size, max_patches, eps=1e-5):
    """The `(height, width)` an image is resized to for a NaFlex batch (timm's NaFlex eval size).

    Args:
        image_hw: `(height, width)` of the image.
        patch_size: int or (height, width).
        max_patches: int. The patch budget (timm's `max_sequence_len`).
        eps: float. Tolerance of the binary search on the scale. Defaults to 1e-5 (timm's).

    Returns:
        `(height, width)`, multiples of the patch, with at most `max_patches` patches.

    Example:

    >>> naflex_image_size((480, 640), 16, 256)
    (224, 288)
    >>> naflex_image_size((10, 100), 16, 64)  # 3 x 21 patches: whole patches bend the ratio
    (48, 336)
    """
    h, w = check_positive_int_pair(tuple(int(v) for v in image_hw), "image_hw")
    ph, pw = check_positive_int_pair(patch_size, "patch_size")
    max_patches = check_positive_int(max_patches, "max_patches")

    def fits(ratio):
        height, width = _scaled_size((h, w), (ph, pw), ratio)
        return (height // ph) * (width // pw) <= max_patches

    low, high = eps / 10.0, 100.0
    while high - low >= eps:  # timm's get_image_size_for_seq
        mid = (low + high) / 2.0
        if fits(mid):
            low = mid
        else:
            high = mid
    if low <= eps or low >= 100.0:
        raise ValueError(
            f"No scale fits image {(h, w)} into {max_patches} patches of {(ph, pw)}. "
            f"Received: image_hw={image_hw}, max_patches={max_patches}"
        )
    target_h, target_w = _scaled_size((h, w), (ph, pw), low)
    ratio = min(target_h / h, target_w / w)  # ResizeKeepRatioToSequence, longest=0
    size = [max(round(h * ratio), ph), max(round(w * ratio), pw)]
    size = [ph * math.ceil(size[0] / ph), pw * math.ceil(size[1] / pw)]
    if (size[0] // ph) * (size[1] // pw) > max_patches:
        scale = math.sqrt(max_patches / ((size[0] // ph) * (size[1] // pw)))
        size = [int(size[0] * scale), int(size[1] * scale)]
        size = [ph * math.ceil(size[0] / ph), pw * math.ceil(size[1] / pw)]
    return size[0], size[1]


def resize_bilinear(image, size):
    """`(h, w, C)` -> `(H, W, C)` float32 by PyTorch's antialiased bilinear resize (float64)."""
    image = np.asarray(image, dtype="float64")
    rows = linear_resize_matrix(image.shape[0], size[0])
    cols = linear_resize_matrix(image.shape[1], size[1])
    # optimize=True contracts one axis at a time (a plain three-operand einsum loops over
    # every (H, h, w, W, c): minutes for a photo).
    return np.einsum("Hh,hwc,Ww->HWc", rows, image, cols, optimize=True).astype("float32")


def naflex_batch(images, patch_size, max_patches):
    """Images of any sizes -> a NaFlex batch (timm's NaFlex eval pipeline and collator).

    Args:
        images: sequence of `(height, width, channels)` arrays (same channel count; any sizes),
            already normalised as the model expects.
        patch_size: int or (height, width).
        max_patches: int. Patches per image at most, and the padded sequence length.

    Returns:
        dict with `patches` float32 `(B, max_patches, ph * pw * C)` in (row, column, channel)
        order, `patch_coord` int64 `(B, max_patches, 2)` `(y, x)` grid positions, and
        `patch_valid` bool `(B, max_patches)`; padding rows are zeros and False.

    Example:

    >>> batch = naflex_batch([np.ones((30, 60, 3)), np.ones((64, 32, 3))], 8, 16)
    >>> batch["patches"].shape, batch["patch_valid"].sum(axis=1).tolist()
    ((2, 16, 192), [15, 15])
    >>> batch["patch_coord"][0, [0, 1, 4, 5]].tolist()  # a 3 x 5 grid, then a 5 x 3 one
    [[0, 0], [0, 1], [0, 4], [1, 0]]

    Reference:
        Dehghani et al., 2023, "Patch n' Pack: NaViT"; timm `timm/data/naflex_transforms.py`.
    """
    ph, pw = check_positive_int_pair(patch_size, "patch_size")
    max_patches = check_positive_int(max_patches, "max_patches")
    images = [np.asarray(image) for image in images]
    if not images:
        raise ValueError("images must hold at least one image. Received: an empty sequence")
    channels = {image.shape[-1] if image.ndim == 3 else None for image in images}
    if len(channels) != 1 or None in channels:
        shapes = [image.shape for image in images]
        raise ValueError(
            "images must be (height, width, channels) arrays with one channel count. "
            f"Received: shapes {shapes}"
        )
    (c,) = channels
    batch = len(images)
    patches = np.zeros((batch, max_patches, ph * pw * c), "float32")
    coords = np.zeros((batch, max_patches, 2), "int64")
    valid = np.zeros((batch, max_patches), bool)
    for i, image in enumerate(images):
        check_image_hw(image.shape[:2], f"images[{i}] of shape {image.shape}")
        height, width = naflex_image_size(image.shape[:2], (ph, pw), max_patches)
        resized = resize_bilinear(image, (height, width))
        gh, gw = height // ph, width // pw
        grid = resized.reshape(gh, ph, gw, pw, c).transpose(0, 2, 1, 3, 4)
        n = gh * gw
        patches[i, :n] = grid.reshape(n, ph * pw * c)
        y, x = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")
        coords[i, :n] = np.stack([y.reshape(-1), x.reshape(-1)], axis=1)
        valid[i, :n] = True
    return {"patches": patches, "patch_coord": coords, "patch_valid": valid}


def naflex_from_siglip2(pixel_values, pixel_attention_mask, spatial_shapes):
    """transformers' SigLIP 2 NaFlex inputs -> our NaFlex dict (`Siglip2ImageProcessor`'s).

    The processor cuts each image into its `(h, w)` grid of patches in (row, column, channel)
    order, row-major, and pads to the batch's sequence length: token `n < h * w` sits at
    `(n // w, n % w)` and the rest is padding.

    Args:
        pixel_values: `(B, N, P * P * C)` float: becomes `patches` (float32).
        pixel_attention_mask: `(B, N)` 0 / 1: becomes `patch_valid` (bool).
        spatial_shapes: `(B, 2)` integer `(h, w)` patch grids: give `patch_coord` (int64).

    Returns:
        dict `patches`, `patch_coord`, `patch_valid` (padding coordinates are zeros).

    Example:

    >>> batch = naflex_from_siglip2(np.zeros((1, 4, 12)), [[1, 1, 1, 0]], [[1, 3]])
    >>> batch["patch_coord"][0].tolist(), batch["patch_valid"][0].tolist()
    ([[0, 0], [0, 1], [0, 2], [0, 0]], [True, True, True, False])
    """
    patches = np.asarray(pixel_values, "float32")
    valid = np.asarray(pixel_attention_mask).astype(bool)
    shapes = np.asarray(spatial_shapes).astype("int64")
    if patches.ndim != 3 or valid.shape != patches.shape[:2] or shapes.shape != (len(patches), 2):
        raise ValueError(
            "Expected pixel_values (B, N, P * P * C), pixel_attention_mask (B, N) and "
            f"spatial_shapes (B, 2). Received: shapes {patches.shape}, {valid.shape}, "
            f"{shapes.shape}"
        )
    n = np.arange(patches.shape[1])[None, :]
    width = np.maximum(shapes[:, 1:], 1)
    coords = np.stack(np.broadcast_arrays(n // width, n % width), axis=-1)
    coords = np.where(valid[..., None], coords, 0)
    if not np.array_equal(valid.sum(axis=1), shapes.prod(axis=1)):
        raise ValueError(
            "pixel_attention_mask must hold h * w valid tokens per image (spatial_shapes). "
            f"Received: {valid.sum(axis=1).tolist()} valid, spatial_shapes {shapes.tolist()}"
        )
    return {"patches": patches, "patch_coord": coords, "patch_valid": valid}


def naflex_to_siglip2(batch):
    """Our NaFlex dict -> transformers' SigLIP 2 inputs (`pixel_values`, `pixel_attention_mask`,
    `spatial_shapes`), for batches whose valid tokens come first, row-major (`naflex_batch`'s).

    Args:
        batch: dict `patches`, `patch_coord`, `patch_valid`.

    Returns:
        dict `pixel_values` float32 `(B, N, P * P * C)`, `pixel_attention_mask` int32
        `(B, N)`, `spatial_shapes` int64 `(B, 2)` (each image's largest coordinate + 1).

    Raises:
        ValueError: a batch transformers cannot express (tokens out of row-major order or
            valid tokens after padding), naming the first such image.

    Example:

    >>> batch = naflex_batch([np.ones((8, 24, 3)), np.ones((16, 8, 3))], 8, 4)
    >>> naflex_to_siglip2(batch)["spatial_shapes"].tolist()
    [[1, 3], [2, 1]]
    """
    valid = np.asarray(batch["patch_valid"]).astype(bool)
    coords = np.where(valid[..., None], np.asarray(batch["patch_coord"]).astype("int64"), 0)
    grids = coords.max(axis=1) + 1
    n = np.arange(valid.shape[1])[None, :]
    expected_valid = n < grids.prod(axis=1, keepdims=True)
    out = naflex_from_siglip2(batch["patches"], expected_valid, grids)
    same = (out["patch_coord"] == coords).all(axis=(1, 2)) & (expected_valid == valid).all(axis=1)
    bad = np.flatnonzero(~same)
    if len(bad):
        raise ValueError(
            "transformers' SigLIP 2 inputs need each image's valid tokens first, in row-major "
            f"order of its grid. Received: image {int(bad[0])} is not (grid "
            f"{grids[bad[0]].tolist()})"
        )
    return {
        "pixel_values": out["patches"],
        "pixel_attention_mask": valid.astype("int32"),
        "spatial_shapes": grids,
    }
