"""Input scaling used by the official models, and reading images and class names from files."""

import os

import keras
import numpy as np
from keras import ops

# The arithmetic lives with the layers (keras_vit.layers.image_preprocessor computes it too);
# this module is where users find it.
from keras_vit.layers._pixels import (  # noqa: F401  (public names of this module)
    is_official_scaling,
    normalize_pixels,
    scale_pixels,
)

DISPLAY_MAX_SIDE = 512


def scaled_pixels(pixels, preprocessing=None):
    """uint8 pixels (NumPy) to float32 model inputs: `preprocessing`'s normalisation, or
    `x / 127.5 - 1` without one."""
    pixels = np.asarray(pixels).astype("float32")
    if preprocessing is None:
        return scale_pixels(pixels)
    spec = preprocessing
    return np.asarray(normalize_pixels(pixels, spec.mean, spec.std, spec.scale), "float32")


def input_range(preprocessing=None):
    """`(lowest, highest)` model input value of pixels 0..255 (any channel); [-1, 1] without a
    spec."""
    if preprocessing is None:
        return -1.0, 1.0
    ends = scaled_pixels(np.array([[0.0], [255.0]]), preprocessing)
    return float(ends.min()), float(ends.max())


def preprocess_input(images, model=None):
    """Maps pixel values in [0, 255] to a model's input values (no resize, no crop).

    Without `model`: `x / 127.5 - 1` (to [-1, 1]), as the official models expect. With `model`
    (a `keras_vit` model): its own normalisation, `(x * scale - mean) / std` of
    `model.config.preprocessing` (ImageNet or CLIP mean and std for DeiT, DINOv2, CLIP, ...).
    `model.preprocessor` also resizes and crops images of any size.

    The pixels follow `model.preprocessor`'s rule (`keras_vit.layers._pixel_checks`): values
    0..255 (uint8, or integers or floats holding 0..255; floats in [0, 1], bools and strings
    are refused), and with `model`, channels last with the model's channel count.

    Args:
        images: array, list or tensor of any shape, values 0..255; with `model`, the last axis
            is the channels.
        model: optional `keras_vit.models.VisionTransformer` (or its `ViTConfig`, or a
            `PreprocessingConfig`). Defaults to None.

    Returns:
        float32, of the same shape and the same kind: a NumPy array for a NumPy array or a
        list (what onnxruntime and LiteRT's runners take), a `tf.Tensor` for a `tf.Tensor`
        (a `tf.data` pipeline, on any backend), else a tensor of the backend.

    Example:

    >>> import numpy as np
    >>> np.asarray(preprocess_input(np.array([0, 255], "uint8"))).tolist()
    [-1.0, 1.0]
    """
    # (imported here: keras_vit.layers imports this module)
    from keras_vit.layers._pixel_checks import check_pixels, is_tf_tensor

    spec = None if model is None else input_spec(model)
    channels = None if model is None else _channels(model, spec)
    images = check_pixels(images, channels=channels)
    if isinstance(images, np.ndarray):  # NumPy in, NumPy out
        images = images.astype("float32")
        if spec is None:
            return scale_pixels(images)
        return np.asarray(normalize_pixels(images, spec.mean, spec.std, spec.scale), "float32")
    if is_tf_tensor(images) and keras.backend.backend() != "tensorflow":
        import tensorflow as tf  # a tf.data pipeline on another backend: TensorFlow ops

        images = tf.cast(images, "float32")
        xp = None
    else:
        images, xp = ops.cast(images, "float32"), ops
    if spec is None:
        return scale_pixels(images)
    return normalize_pixels(images, spec.mean, spec.std, spec.scale, xp=xp)


def _channels(model, spec):
    """The channel count a model's inputs must have: its `num_channels`, else one per value of
    its spec's mean / std when they have several, else None (any)."""
    config = getattr(model, "config", model)
    channels = getattr(config, "num_channels", None)
    if channels is not None:
        return channels
    counts = {len(spec.mean), len(spec.std)} - {1}
    return counts.pop() if counts else None


def input_spec(model):
    """The `PreprocessingConfig` of a model, of its `ViTConfig`, or `model` itself if it is one."""
    for candidate in (model, getattr(model, "preprocessing", None)):
        if all(hasattr(candidate, name) for name in ("mean", "std", "scale", "crop_pct")):
            return candidate
    config = getattr(model, "config", None)
    spec = getattr(config, "preprocessing", None)
    if spec is None:
        raise ValueError(
            "model must be a keras_vit model (or its ViTConfig, or a PreprocessingConfig) "
            f"that carries an input spec. Received: {type(model).__name__}"
        )
    return spec


def load_image(path, size, channels=3, model=None):
    """Reads an image file for a model: `(model input (1, H, W, C) in [-1, 1], display uint8)`.

    The model input is the image resized (bilinear) to `size` and converted to
    `channels` (1: grey, 3: RGB), then mapped by `x / 127.5 - 1`; with `model`, the
    image (converted to `channels`) goes through `model.preprocessor` instead: the model's
    own resize, centre crop and normalisation (its input spec). The display
    image is the same conversion at up to 512 pixels per side. Needs Pillow.

    Args:
        path: str or path-like. An image file Pillow reads (PNG, JPEG, ...).
        size: (height, width) of the model input.
        channels: int. 1 or 3. Defaults to 3.
        model: optional keras_vit model whose `preprocessor` makes the input. Defaults to
            None.

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
    spec = getattr(model, "preprocessing", None)
    if spec is not None and spec != type(spec)():  # the model's own spec ([-1, 1]: as below)
        pixels = np.asarray(image, "uint8").reshape(1, image.size[1], image.size[0], channels)
        model_input = np.asarray(ops.convert_to_numpy(model.preprocessor(pixels)), "float32")
    else:
        model_input = np.asarray(image.resize((width, height), Image.BILINEAR), "float32")
        model_input = scale_pixels(model_input.reshape(1, height, width, channels))
    scale = min(1.0, DISPLAY_MAX_SIDE / max(image.size))
    display = image.resize(
        (max(1, round(image.size[0] * scale)), max(1, round(image.size[1] * scale))),
        Image.BILINEAR,
    )
    return model_input, np.asarray(display)
