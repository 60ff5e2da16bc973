"""The pixel arithmetic of every input spec: `scale_pixels` (the official `x / 127.5 - 1`) and
`normalize_pixels` (`(x * scale - mean) / std`), for NumPy, `tf.Tensor`s and backend tensors.

Public as `keras_vit.preprocessing.scale_pixels` / `normalize_pixels`; here so that the layers
(`ImagePreprocessor`) compute them without importing `keras_vit.preprocessing`, which imports
the layers' pixel checks.
"""

import numpy as np


def scale_pixels(images):
    """`x / 127.5 - 1`: values in [0, 255] to [-1, 1], in the arithmetic of `images` itself.

    The one definition of the input scaling: `preprocess_input` (backend tensors), `load_image`
    and LiteRT calibration (NumPy), and the `tf.data` pipelines (`tf.Tensor`s inside the graph, on
    every Keras backend) all call it. Expects a float array; see `preprocess_input` for checks.
    """
    return images / 127.5 - 1.0


def is_official_scaling(mean, std, scale):
    """True when `(x * scale - mean) / std` is the official `x / 127.5 - 1` (mean = std = 0.5)."""
    return (
        all(float(m) == 0.5 for m in mean)
        and all(float(s) == 0.5 for s in std)
        and abs(float(scale) * 255.0 - 1.0) < 1e-12
    )


def normalize_pixels(images, mean, std, scale, xp=None):
    """`(images * scale - mean) / std` per channel (last axis), in float32.

    The arithmetic of every input spec (`keras_vit.models.PreprocessingConfig`): mean = std =
    0.5 at scale 1/255 is `scale_pixels` itself (bit for bit today's `[-1, 1]`).

    Args:
        images: float array: NumPy or `tf.Tensor` (`xp=None`: plain arithmetic), or a backend
            tensor with `xp=keras.ops`.
        mean, std: sequences of floats (one, or one per channel).
        scale: float.
        xp: None or a namespace with `convert_to_tensor` (`keras.ops`, or TensorFlow's in
            `tf.data`). Defaults to None.

    Example:

    >>> normalize_pixels(np.array([0.0, 255.0]), [0.5], [0.5], 1 / 255).tolist()
    [-1.0, 1.0]
    """
    if is_official_scaling(mean, std, scale):
        return scale_pixels(images)
    mean = np.asarray(mean, "float32")
    std = np.asarray(std, "float32")
    if xp is not None:
        mean, std = xp.convert_to_tensor(mean), xp.convert_to_tensor(std)
    return (images * np.float32(scale) - mean) / std
