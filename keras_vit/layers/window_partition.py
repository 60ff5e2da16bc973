"""Non-overlapping windows of a token grid: `window_partition`, `window_unpartition`.

Windowed attention (ViTDet, SAM's image encoder, Hiera's mask units) attends within
`window x window` squares of the `(B, H, W, C)` token grid: the grid is padded with zeros at
the bottom and right to a multiple of the window, cut into windows stacked on the batch axis,
and put back (the padding cropped) after attention. timm's `window_partition` /
`window_unpartition` (`vision_transformer_sam.py`), in `keras.ops` with static grid sizes.
"""

from keras import ops

from keras_vit.layers._checks import check_positive_int

__all__ = ["window_partition", "window_unpartition"]


def padded_size(size, window_size):
    """`size` rounded up to a multiple of `window_size`."""
    return size + (-size) % window_size


def window_partition(x, window_size):
    """`(B, H, W, C)` -> `(B * windows, window, window, C)`, zero-padded at the bottom / right.

    Args:
        x: `(B, H, W, C)` tensor with static H, W and C.
        window_size: int. The window's side.

    Returns:
        `(windows, (Hp, Wp))`: the windows, row-major per image, and the padded grid size.

    Example:

    >>> import numpy as np
    >>> windows, padded = window_partition(np.arange(6.0).reshape(1, 2, 3, 1), 2)
    >>> tuple(windows.shape), padded
    ((2, 2, 2, 1), (2, 4))
    """
    window_size = check_positive_int(window_size, "window_size")
    _, height, width, channels = x.shape
    hp, wp = padded_size(height, window_size), padded_size(width, window_size)
    if (hp, wp) != (height, width):
        x = ops.pad(x, ((0, 0), (0, hp - height), (0, wp - width), (0, 0)))
    x = ops.reshape(x, (-1, hp // window_size, window_size, wp // window_size, window_size,
                        channels))  # fmt: skip
    x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
    return ops.reshape(x, (-1, window_size, window_size, channels)), (hp, wp)


def window_unpartition(windows, window_size, padded, size):
    """The inverse of `window_partition`: `(B * windows, window, window, C)` -> `(B, H, W, C)`.

    Args:
        windows: the windows, as `window_partition` stacks them.
        window_size: int.
        padded: `(Hp, Wp)`, the padded grid `window_partition` returned.
        size: `(H, W)`, the grid before padding (the padding is cropped).

    Example:

    >>> import numpy as np
    >>> x = np.arange(6.0).reshape(1, 2, 3, 1)
    >>> windows, padded = window_partition(x, 2)
    >>> bool((np.asarray(window_unpartition(windows, 2, padded, (2, 3))) == x).all())
    True
    """
    window_size = check_positive_int(window_size, "window_size")
    (hp, wp), (height, width) = padded, size
    channels = windows.shape[-1]
    x = ops.reshape(windows, (-1, hp // window_size, wp // window_size, window_size,
                              window_size, channels))  # fmt: skip
    x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
    x = ops.reshape(x, (-1, hp, wp, channels))
    if (hp, wp) != (height, width):
        x = x[:, :height, :width, :]
    return x
