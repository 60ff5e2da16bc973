"""Masked patch prediction's targets (paper Appendix B.1.2), computed from the images themselves:
3-bit mean colour, 4x4 downsized patch, or the raw pixels.

Reference:
    Dosovitskiy et al., 2021, Sec. 4.6 and Appendix B.1.2 (self-supervision).
"""

import keras
import numpy as np
from keras import ops

from keras_vit.layers._checks import check_positive_int_pair

__all__ = ["PatchTargets"]

TARGETS = ("color", "downsampled", "pixels")
DOWNSAMPLED_GRID = 4  # the paper's 4x4 downsized patch (16 x 512-way)


def check_target(target):
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}. Received: target={target!r}")


def _image_patches(images, patch_size):
    """`(B, H, W, C)` -> `(B, N, ph, pw, C)`, patches in row-major order (as `Patches`)."""
    _, height, width, channels = tuple(images.shape)
    ph, pw = patch_size
    gh, gw = height // ph, width // pw
    batch = ops.shape(images)[0]  # no -1: an empty batch has no size to infer it from
    x = ops.reshape(images, (batch, gh, ph, gw, pw, channels))
    x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
    return ops.reshape(x, (batch, gh * gw, ph, pw, channels))


def quantize_colors(values, color_bits=3):
    """Maps values in [-1, 1] to `2**color_bits` levels: `floor((v + 1) / 2 * L)` clipped to L-1."""
    levels = 2**color_bits
    q = ops.floor((ops.cast(values, "float32") + 1.0) * (0.5 * levels))
    return ops.cast(ops.clip(q, 0, levels - 1), "int32")


def _color_class(quantized, color_bits):
    """Combines per-channel levels `(..., C)` into one class: c0 * L^(C-1) + ... + c_{C-1}."""
    levels = 2**color_bits
    channels = quantized.shape[-1]
    weights = np.array([levels ** (channels - 1 - c) for c in range(channels)], "int32")
    return ops.sum(quantized * ops.convert_to_tensor(weights), axis=-1)


def num_target_classes(target, num_channels, color_bits=3):
    """Classes per predicted colour (`2**(bits * C)`: 512 for RGB, 8 for gray); None for pixels."""
    check_target(target)
    return None if target == "pixels" else (2**color_bits) ** num_channels


def patch_targets(images, patch_size, target="color", color_bits=3):
    """The masked-patch-prediction targets of every patch, computed from the images.

    Args:
        images: `(B, H, W, C)` in [-1, 1] (static H, W, C).
        patch_size: int or (height, width).
        target: `"color"`: the 3-bit mean colour (per channel the patch mean quantised to 8
            levels; class `c0 * 64 + c1 * 8 + c2` for RGB, 512 classes; 8 for one channel).
            `"downsampled"`: the patch downsized to 4x4 by averaging, each cell a 3-bit colour
            class (16 x 512-way; the patch size must be divisible by 4). `"pixels"`: the raw
            patch pixels for L2 regression, in `Patches` order (row, column, channel).
            Defaults to `"color"`.
        color_bits: int. Bits per channel. Defaults to 3.

    Returns:
        int32 `(B, N)` for `"color"`, int32 `(B, N, 16)` for `"downsampled"`, float32
        `(B, N, ph * pw * C)` for `"pixels"`.

    Example:

    >>> import numpy as np
    >>> t = patch_targets(np.ones((1, 8, 8, 3), "float32"), 4)  # white: level 7 everywhere
    >>> keras.ops.convert_to_numpy(t).tolist()
    [[511, 511, 511, 511]]
    """
    check_target(target)
    patch_size = check_positive_int_pair(patch_size, "patch_size")
    shape = tuple(images.shape)
    if len(shape) != 4 or None in shape[1:]:
        raise ValueError(
            "images must have shape (batch, height, width, channels) with static sizes. "
            f"Received: shape={shape}"
        )
    if shape[1] % patch_size[0] or shape[2] % patch_size[1]:
        raise ValueError(
            "image height and width must be divisible by the patch size. "
            f"Received: image shape={shape}, patch_size={patch_size}"
        )
    patches = _image_patches(ops.cast(images, "float32"), patch_size)
    ph, pw = patch_size
    channels = shape[-1]
    if target == "pixels":
        return ops.reshape(patches, (ops.shape(patches)[0], patches.shape[1], ph * pw * channels))
    if target == "color":
        return _color_class(quantize_colors(ops.mean(patches, axis=(2, 3)), color_bits), color_bits)
    g = DOWNSAMPLED_GRID
    if ph % g or pw % g:
        raise ValueError(
            f"target='downsampled' needs a patch size divisible by {g}. "
            f"Received: patch_size={patch_size}"
        )
    n = patches.shape[1]
    batch = ops.shape(patches)[0]
    cells = ops.reshape(patches, (batch, n, g, ph // g, g, pw // g, channels))
    cells = ops.mean(cells, axis=(3, 5))  # (B, N, 4, 4, C)
    classes = _color_class(quantize_colors(cells, color_bits), color_bits)
    return ops.reshape(classes, (batch, n, g * g))


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchTargets(keras.layers.Layer):
    """Layer form of `patch_targets` (no weights), so the targets live inside the model.

    Args:
        patch_size: int or (height, width).
        target: `"color"`, `"downsampled"` or `"pixels"`. Defaults to `"color"`.
        color_bits: int. Defaults to 3.

    Call arguments:
        images: `(B, H, W, C)` in [-1, 1].

    Returns:
        See `patch_targets`.

    Reference:
        Dosovitskiy et al., 2021, Appendix B.1.2.
    """

    def __init__(self, patch_size, target="color", color_bits=3, **kwargs):
        super().__init__(**kwargs)
        self.patch_size = check_positive_int_pair(patch_size, "patch_size")
        check_target(target)
        if not isinstance(color_bits, int) or not 1 <= color_bits <= 8:
            raise ValueError(
                f"color_bits must be an int in [1, 8]. Received: color_bits={color_bits!r}"
            )
        self.target = target
        self.color_bits = color_bits

    def call(self, images):
        return patch_targets(images, self.patch_size, self.target, self.color_bits)

    def compute_output_spec(self, images):
        b, h, w, c = tuple(images.shape)
        ph, pw = self.patch_size
        n = (h // ph) * (w // pw)
        if self.target == "pixels":
            return keras.KerasTensor((b, n, ph * pw * c), dtype="float32")
        if self.target == "color":
            return keras.KerasTensor((b, n), dtype="int32")
        return keras.KerasTensor((b, n, DOWNSAMPLED_GRID**2), dtype="int32")

    def compute_output_shape(self, input_shape):
        return self.compute_output_spec(keras.KerasTensor(input_shape)).shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {"patch_size": self.patch_size, "target": self.target, "color_bits": self.color_bits}
        )
        return config

