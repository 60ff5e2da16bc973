"""Input scaling used by the official models."""

from keras import ops


def preprocess_input(images):
    """Maps images with values in [0, 255] to [-1, 1] (`x / 127.5 - 1`), as the official models expect.

    Args:
        images: array or tensor of any shape, values 0..255 (uint8 or float).

    Returns:
        float32 tensor of the same shape.

    Example:

    >>> import numpy as np
    >>> np.asarray(preprocess_input(np.array([0, 255], "uint8"))).tolist()
    [-1.0, 1.0]
    """
    return ops.cast(images, "float32") / 127.5 - 1.0
