"""Argument and shape checks shared by the layers and builders (and every floor above).

Checked, never coerced: a bool is `True` or `False` (NumPy's `np.bool_` too), never a string
(`"False"` is truthy) or a number; a number is a Python or NumPy number, never a bool or a
string; each error names the argument, what it takes and what it received.
"""

import numbers

import keras
import numpy as np


def is_int(value):
    """A Python or NumPy integer, not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def is_number(value):
    """A Python or NumPy real number (`np.float32(0.5)` included), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def to_pair(value, name):
    """Returns `(a, b)` from an int or a sequence of two ints.

    Example:

    >>> to_pair(16, "patch_size"), to_pair([16, 8], "patch_size")
    ((16, 16), (16, 8))
    >>> to_pair(16.0, "patch_size")
    Traceback (most recent call last):
        ...
    ValueError: patch_size must be an int or a pair of ints. Received: patch_size=16.0
    """
    if isinstance(value, (bool, np.bool_, str, bytes)):
        raise ValueError(f"{name} must be an int or a pair of ints. Received: {name}={value!r}")
    if is_int(value):
        return (int(value), int(value))
    try:
        pair = tuple(value)
    except TypeError:
        raise ValueError(
            f"{name} must be an int or a pair of ints. Received: {name}={value!r}"
        ) from None
    if len(pair) != 2 or not all(is_int(v) for v in pair):
        raise ValueError(f"{name} must be an int or a pair of ints. Received: {name}={value!r}")
    return tuple(int(v) for v in pair)


def check_positive_int_pair(value, name):
    pair = to_pair(value, name)
    if min(pair) <= 0:
        raise ValueError(f"{name} must be positive. Received: {name}={value!r}")
    return pair


def check_positive_int(value, name, allow_none=False):
    """`value` as an int (a Python or NumPy integer, not a bool, > 0), else a ValueError."""
    if value is None and allow_none:
        return None
    if not is_int(value) or value <= 0:
        raise ValueError(f"{name} must be a positive integer. Received: {name}={value!r}")
    return int(value)


def check_layer_scale(value):
    """`layer_scale_init_value`: a float (not a bool) or None, else a ValueError."""
    if value is not None and not is_number(value):
        raise ValueError(
            f"layer_scale_init_value must be a float or None. Received: layer_scale_init_value="
            f"{value!r}"
        )
    return None if value is None else float(value)


def check_non_negative_int(value, name):
    """`value` as an int (a Python or NumPy integer, not a bool, >= 0), else a ValueError."""
    if not is_int(value) or value < 0:
        raise ValueError(f"{name} must be a non-negative int. Received: {name}={value!r}")
    return int(value)


def check_rate(value, name):
    """`value` as a float in [0, 1) (a Python or NumPy number, not a bool), else a ValueError."""
    if not is_number(value) or not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be a number in [0, 1). Received: {name}={value!r}")
    return float(value)


def check_image_shape(shape, patch_size, name, channels=None, image_size=None):
    """Checks a (B, H, W, C) shape against a patch size (and expected sizes).

    Returns the shape as a tuple. Unknown (None) dimensions are not checked.
    """
    shape = tuple(shape)
    if len(shape) != 4:
        raise ValueError(
            f"Layer '{name}' expects images of rank 4 (batch, height, width, channels). "
            f"Received: input shape={shape}"
        )
    _, height, width, chans = shape
    if image_size is not None:
        for got, want, what in ((height, image_size[0], "height"), (width, image_size[1], "width")):
            if got is not None and got != want:
                raise ValueError(
                    f"Layer '{name}' was built for images of size {tuple(image_size)} "
                    f"(height, width) but received an image {what} of {got}. "
                    f"Received: input shape={shape}"
                )
    if channels is not None and chans is not None and chans != channels:
        raise ValueError(
            f"Layer '{name}' expects images with {channels} channels. "
            f"Received: {chans} channels, input shape={shape}"
        )
    ph, pw = patch_size
    for got, p, what in ((height, ph, "height"), (width, pw, "width")):
        if got is not None and got % p != 0:
            raise ValueError(
                f"Layer '{name}': image {what} must be divisible by the patch size. "
                f"Received: image {what}={got}, patch_size={tuple(patch_size)}"
            )
    return shape


SEED_LIMIT = 2**32  # what every backend's random generator takes (JAX: a uint32)


def check_seed(value, name="seed"):
    """A random seed: None or an int in [0, 2**32) (NumPy ints too), as a Python int.

    >>> check_seed(-3)
    Traceback (most recent call last):
        ...
    ValueError: seed must be None or an int in [0, 2**32). Received: seed=-3
    """
    if value is None:
        return None
    if not is_int(value) or not 0 <= value < SEED_LIMIT:
        raise ValueError(f"{name} must be None or an int in [0, 2**32). Received: {name}={value!r}")
    return int(value)


def check_bool(value, name, allow_none=False):
    """`value` as a Python bool (`True`, `False` or a NumPy `np.bool_`), else a ValueError.

    The one check of every bool-like argument: a string is refused, never read (`"False"` and
    `"no"` are truthy), and so are numbers (`0`, `1`).

    >>> check_bool(np.bool_(True), "pretrained")
    True
    >>> check_bool("no", "pretrained")
    Traceback (most recent call last):
        ...
    ValueError: pretrained must be a bool. Received: pretrained='no' (type str)
    """
    if value is None and allow_none:
        return None
    if not isinstance(value, (bool, np.bool_)):
        what = "a bool" + (" or None" if allow_none else "")
        raise ValueError(
            f"{name} must be {what}. Received: {name}={value!r} (type {type(value).__name__})"
        )
    return bool(value)


def check_token_shape(input_shape, num_heads, name):
    """Checks a (batch, tokens, hidden_dim) shape whose hidden_dim `num_heads` divides.

    Returns hidden_dim as an int.

    Example:

    >>> check_token_shape((None, 17, 32), 4, "block")
    32
    >>> check_token_shape((None, 17, 30), 4, "block")
    Traceback (most recent call last):
        ...
    ValueError: num_heads must divide hidden_dim. Received: hidden_dim=30, num_heads=4
    """
    if len(input_shape) != 3 or input_shape[-1] is None:
        raise ValueError(
            f"Layer '{name}' expects tokens of shape (batch, tokens, hidden_dim) "
            f"with a known hidden_dim. Received: input shape={tuple(input_shape)}"
        )
    hidden_dim = int(input_shape[-1])
    if hidden_dim % num_heads:
        raise ValueError(
            "num_heads must divide hidden_dim. "
            f"Received: hidden_dim={hidden_dim}, num_heads={num_heads}"
        )
    return hidden_dim


def concrete(value):
    """`value` as a NumPy array when its values are known here (NumPy, an eager tensor), else
    None (a symbolic or traced tensor)."""
    try:
        return _concrete(value)
    except Exception:  # a fake / exported tensor of a tracer keras_vit does not know: no values
        return None


def _concrete(value):
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, keras.KerasTensor):
        return None
    module = type(value).__module__
    if module.startswith("jax"):
        import jax

        return None if isinstance(value, jax.core.Tracer) else np.asarray(value)
    if module.startswith("tensorflow"):
        import tensorflow as tf

        if tf.is_symbolic_tensor(value) or not tf.executing_eagerly():
            return None
        return value.numpy()
    if module.startswith("torch"):  # on an accelerator: no device-to-host copy per step
        return value.detach().numpy() if value.device.type == "cpu" else None
    return None
