"""Input scaling used by the official models, and reading images and class names from files."""

import os

import keras
import numpy as np
from keras import ops

DISPLAY_MAX_SIDE = 512


def scale_pixels(images):
    """`x / 127.5 - 1`: values in [0, 255] to [-1, 1], in the arithmetic of `images` itself.

    The one definition of the input scaling: `preprocess_input` (backend tensors), `load_image`
    and LiteRT calibration (NumPy), and the `tf.data` pipelines (`tf.Tensor`s inside the graph, on
    every Keras backend) all call it. Expects a float array; see `preprocess_input` for checks.
    """
    return images / 127.5 - 1.0


def preprocess_input(images):
    """Maps images with values in [0, 255] to [-1, 1] (`x / 127.5 - 1`), as official models expect.

    Args:
        images: array or tensor of any shape, values 0..255 (uint8 or float).

    Returns:
        float32 tensor of the same shape.

    Example:

    >>> import numpy as np
    >>> np.asarray(preprocess_input(np.array([0, 255], "uint8"))).tolist()
    [-1.0, 1.0]
    """
    dtype = getattr(images, "dtype", None)
    if dtype is None or isinstance(dtype, np.dtype):
        images = np.asarray(images)
        dtype = images.dtype
    try:
        name = keras.backend.standardize_dtype(dtype)
    except (ValueError, TypeError):
        name = str(dtype)
    if not name.startswith(("uint", "int", "float", "bfloat")):
        raise ValueError(
            "preprocess_input expects images with numeric pixel values in [0, 255] (uint8, "
            f"an integer or a float dtype). Received: dtype={name}. Decode image files first "
            "(e.g. keras_vit.preprocessing.load_image) and pass their pixel arrays."
        )
    return scale_pixels(ops.cast(images, "float32"))


def load_image(path, size, channels=3):
    """Reads an image file for a model: `(model input (1, H, W, C) in [-1, 1], display uint8)`.

    The model input is the image resized (bilinear) to `size` and converted to
    `channels` (1: grey, 3: RGB), then mapped by `x / 127.5 - 1`. The display
    image is the same conversion at up to 512 pixels per side. Needs Pillow.

    Args:
        path: str or path-like. An image file Pillow reads (PNG, JPEG, ...).
        size: (height, width) of the model input.
        channels: int. 1 or 3. Defaults to 3.

    Returns:
        A tuple `(model_input, display)`: float32 `(1, height, width, channels)`
        and uint8 `(h, w)` or `(h, w, 3)`.

    Raises:
        FileNotFoundError: `path` does not exist.
        ValueError: `path` is not an image Pillow can read, or `channels` is
            not 1 or 3.

    Example:

    >>> import os, tempfile
    >>> from PIL import Image
    >>> path = os.path.join(tempfile.mkdtemp(), "grey.png")
    >>> Image.new("L", (40, 20), 255).save(path)
    >>> model_input, display = load_image(path, (8, 8), channels=3)
    >>> model_input.shape, float(model_input.max()), display.shape
    ((1, 8, 8, 3), 1.0, (20, 40, 3))
    >>> os.remove(path)
    """
    from PIL import Image, UnidentifiedImageError

    modes = {1: "L", 3: "RGB"}
    if channels not in modes:
        raise ValueError(
            f"Only models with 1 or 3 input channels can read image files. Received: {channels}"
        )
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Image file not found: {path!r}")
    height, width = size
    try:
        with Image.open(path) as image:
            image = image.convert(modes[channels])
    except (UnidentifiedImageError, OSError) as error:
        raise ValueError(
            f"Expected an image file (PNG, JPEG, ...) that Pillow can read. Received: {path!r} "
            f"({type(error).__name__}: {error})"
        ) from None
    model_input = np.asarray(image.resize((width, height), Image.BILINEAR), "float32")
    scale = min(1.0, DISPLAY_MAX_SIDE / max(image.size))
    display = image.resize(
        (max(1, round(image.size[0] * scale)), max(1, round(image.size[1] * scale))),
        Image.BILINEAR,
    )
    model_input = scale_pixels(model_input.reshape(1, height, width, channels))
    return model_input, np.asarray(display)
