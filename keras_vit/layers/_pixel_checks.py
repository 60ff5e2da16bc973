"""The one rule for the pixels `model.preprocessor` and `keras_vit.preprocess_input` take.

Pixel values are 0..255 (what image files decode to), channels last:

- `uint8` images are taken as they are;
- other integer dtypes (a Python list of ints is `int64`) when every value is in 0..255 (checked
  on concrete arrays; a symbolic integer tensor other than uint8, whose values cannot be seen,
  is refused: cast it to uint8 where its range is known);
- float images hold the same 0..255 values (no NaN or infinity); float images already in
  [0, 1] (values in [0, 1], some between 0 and 1) or normalised (negative values) are refused:
  the preprocessor divides by 255 itself (multiply by 255 first);
- bool, string, complex and object arrays are refused, and so are images with an empty side;
- with a model, the last axis must be the model's channel count: grey, RGBA, two-channel and
  channels-first `(B, C, H, W)` images are refused with what to do (e.g. a grey image
  repeated to three channels, `np.repeat(x, 3, axis=-1)`).

Values are checked where they are known: NumPy arrays, Python lists and eager tensors. Inside a
traced graph (`tf.data`, `jax.jit`) dtypes, ranks and static shapes are checked; values cannot be.
"""

import numpy as np

from keras_vit.layers._checks import concrete

__all__ = ["check_pixels", "is_tf_tensor"]

_RULE = "numeric pixel values 0..255 (uint8, or integers or floats holding 0..255), channels last"


def is_tf_tensor(value):
    """Whether `value` is a TensorFlow tensor (eager or symbolic), without importing TF."""
    return type(value).__module__.startswith(("tensorflow.", "tensorflow"))


def _dtype_name(images):
    dtype = getattr(images, "dtype", None)
    if dtype is None:
        return None
    name = getattr(dtype, "name", None) or str(dtype)
    return str(name).replace("torch.", "")


def _static_shape(images):
    shape = getattr(images, "shape", None)
    if shape is None:
        return None
    try:
        return tuple(None if d is None else int(d) for d in tuple(shape))
    except TypeError:  # an unknown rank (a TensorFlow graph tensor)
        return None


def _channel_hint(shape, channels):
    got = shape[-1]
    if len(shape) >= 3 and shape[-3] == channels and got != channels:
        return (
            f" It looks channels-first ({shape}): transpose to channels-last, e.g. "
            "np.transpose(x, (0, 2, 3, 1))."
        )
    if got == 1 and channels == 3:
        return " A grey image: repeat it to three channels, e.g. np.repeat(x, 3, axis=-1)."
    if got == 4 and channels == 3:
        return " An RGBA image: drop the alpha channel, e.g. x[..., :3]."
    return ""


def check_pixels(images, *, channels=None, min_rank=0, what="images"):
    """Checks `images` against the rule above; returns them ready to preprocess.

    Args:
        images: a NumPy array, a Python list, or a backend / TensorFlow tensor.
        channels: optional int. The last axis must be this many channels.
        min_rank: int. The least rank (3 for `(..., H, W, C)` images). Defaults to 0.
        what: str. The argument's name in messages.

    Returns:
        A Python list as a NumPy array; a concrete integer array in 0..255 of another dtype
        as uint8 (NumPy, or a backend tensor cast to uint8); anything else as it came.

    Raises:
        ValueError: naming what was expected and what was received.
    """
    if isinstance(images, (list, tuple)):
        try:
            images = np.asarray(images)
        except ValueError as error:
            raise ValueError(
                f"{what} must be an array of {_RULE}. Received: a ragged list ({error})"
            ) from None
    elif isinstance(images, (str, bytes)) or not hasattr(images, "dtype"):
        raise ValueError(
            f"{what} must be an array of {_RULE}. Received: {type(images).__name__} "
            f"{str(images)[:40]!r}. Decode image files first (keras_vit.preprocessing.load_image)."
        )
    dtype = _dtype_name(images)
    integer = dtype.startswith(("uint", "int"))
    if not (integer or dtype.startswith(("float", "bfloat", "half"))):
        hint = ""
        if "bool" in dtype:
            hint = " (a mask? cast it to uint8 * 255 if it is an image)"
        elif dtype.startswith(("str", "<U", "bytes", "object")):
            hint = " (file names? decode image files first: keras_vit.preprocessing.load_image)"
        raise ValueError(f"{what} must be an array of {_RULE}. Received: dtype={dtype}{hint}")
    shape = _static_shape(images)
    if shape is not None:
        if len(shape) < min_rank:
            raise ValueError(
                f"{what} must have shape (batch, height, width, channels) or (height, width, "
                f"channels). Received: shape={shape}"
                + (" (a grey image without a channel axis: add one, x[..., None])"
                   if len(shape) == 2 else "")  # fmt: skip
            )
        if min_rank >= 3 and any(side == 0 for side in shape[-3:-1]):
            raise ValueError(
                f"{what} have an empty side: nothing to resize. Received: shape={shape}"
            )
        if channels is not None and shape and shape[-1] is not None and shape[-1] != channels:
            raise ValueError(
                f"{what} must be channels-last with {channels} channel(s), the model's "
                f"num_channels. Received: shape={shape} ({shape[-1]} channel"
                f"{'s' if shape[-1] != 1 else ''})."
                + _channel_hint(shape, channels)
            )
    if dtype == "uint8":
        return images
    values = concrete(images)
    if values is None:  # traced (or on an accelerator): dtypes only
        if integer:
            raise ValueError(
                f"{what} of dtype {dtype} whose values are not read here (inside a traced "
                "function, or on an accelerator): they cannot be checked against 0..255. Cast "
                "them to uint8 first (e.g. tf.cast(x, 'uint8') where they hold 0..255)."
            )
        return images
    if values.size == 0:
        return images
    low, high = values.min(), values.max()
    if integer:
        if low < 0 or high > 255:
            raise ValueError(
                f"{what} must hold {_RULE}. Received: dtype={dtype} with values from {low} "
                f"to {high}. Scale them to 0..255 (e.g. x // 257 for 16-bit images) and cast "
                "to uint8."
            )
        if isinstance(images, np.ndarray):
            return images.astype("uint8")
        import keras

        return keras.ops.cast(images, "uint8")
    if not np.isfinite(values).all():
        raise ValueError(f"{what} hold NaN or infinite values. Received: dtype={dtype}")
    if low < 0 or high > 255:
        normalised = " (already normalised? pass the 0..255 pixels)" if low < 0 else ""
        raise ValueError(
            f"{what} must hold {_RULE}. Received: dtype={dtype} with values from {low:g} to "
            f"{high:g}{normalised}."
        )
    if high <= 1.0 and np.any((values > 0) & (values < 1)):
        raise ValueError(
            f"{what} hold values in [0, 1] (max {high:g}): the preprocessor expects 0..255 and "
            "scales them itself. Pass images * 255 (or uint8 pixels)."
        )
    return images
