"""Value types of the `keras-vit` flags: each rejects a bad value while the command line is parsed
(argparse turns the `argparse.ArgumentTypeError` into a usage error, exit code 2), so no command
starts work on a value it cannot use."""

import argparse
import math


def _number(text, kind, what):
    """`text` as a `kind`; a float must be finite (`inf` and `nan` parse, and would make a run
    diverge or never end)."""
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}; received {text!r}") from None
    if kind is float and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected {what}, finite; received {text!r}")
    return value


def positive_int(text):
    """`"3"` -> 3; 0, negative and non-integer values are refused."""
    value = _number(text, int, "a positive integer")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer; received {text!r}")
    return value


def nonnegative_int(text):
    """`"0"` -> 0; negative and non-integer values are refused."""
    value = _number(text, int, "an integer >= 0")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0; received {text!r}")
    return value


def positive_float(text):
    value = _number(text, float, "a positive number")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number; received {text!r}")
    return value


def nonnegative_float(text):
    value = _number(text, float, "a number >= 0")
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0; received {text!r}")
    return value


def probability(text):
    """A rate in [0, 1): dropout, label smoothing, a discard ratio."""
    value = _number(text, float, "a number in [0, 1)")
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1); received {text!r}")
    return value


def decay_rate(text):
    """A rate in (0, 1]: layer-wise learning-rate decay."""
    value = _number(text, float, "a number in (0, 1]")
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1]; received {text!r}")
    return value


def fraction(text):
    """A share in [0, 1]."""
    value = _number(text, float, "a number in [0, 1]")
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1]; received {text!r}")
    return value


def image_size(text):
    """`"384"` -> 384, `"384x512"` or `"384,512"` -> (384, 512) (height, width)."""
    parts = text.lower().replace("x", ",").split(",")
    try:
        values = [int(p) for p in parts]
    except ValueError:
        values = []
    if len(values) not in (1, 2) or min(values, default=0) <= 0:
        raise argparse.ArgumentTypeError(
            f"expected N or HxW (or H,W) with positive integers; received {text!r}"
        )
    return values[0] if len(values) == 1 else tuple(values)


def int_list(text):
    """`"1,5,10"` -> (1, 5, 10)."""
    try:
        values = tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        values = ()
    if not values:
        raise argparse.ArgumentTypeError(
            f"expected a comma list of integers, e.g. 1,5,10; received {text!r}"
        )
    return values


def positive_int_list(text):
    values = int_list(text)
    if min(values) <= 0:
        raise argparse.ArgumentTypeError(
            f"expected a comma list of positive integers, e.g. 1,5,10; received {text!r}"
        )
    return values


def float_pair(text):
    """`"0.08,1"` -> (0.08, 1.0): a positive MIN,MAX range."""
    try:
        values = tuple(float(p) for p in text.split(",") if p.strip())
    except ValueError:
        values = ()
    if len(values) != 2 or not 0 < values[0] <= values[1] < math.inf:
        raise argparse.ArgumentTypeError(
            f"expected MIN,MAX with 0 < MIN <= MAX, e.g. 0.08,1; received {text!r}"
        )
    return values


def str_list(text):
    return [p.strip() for p in text.split(",") if p.strip()]


def augment_list(text):
    """`"randaugment,keras_cv.RandAugment(value_range=(0, 255), magnitude=0.3)"` -> two names.

    Splits at the commas outside brackets, and checks the syntax of each keras-cv entry
    (`keras_cv.NAME` or `keras_cv.NAME(literal arguments)`, parsed, never executed) without
    importing keras-cv.
    """
    from keras_vit.training.cv_augment import is_keras_cv_spec, parse_keras_cv_spec

    if text.strip().lower() in ("", "none"):
        return []  # no augmentation: clears a config's list
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += char in "([{"
        depth -= char in ")]}"
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    names = [p.strip() for p in parts if p.strip()]
    if depth != 0 or not names:
        raise argparse.ArgumentTypeError(
            f"expected a comma list of augmentations with balanced brackets; received {text!r}"
        )
    for name in names:
        if is_keras_cv_spec(name):
            try:
                parse_keras_cv_spec(name)
            except ValueError as error:
                raise argparse.ArgumentTypeError(str(error)) from None
    return names


def jit_compile(text):
    values = {"auto": "auto", "true": True, "false": False}
    if text.lower() not in values:
        raise argparse.ArgumentTypeError(f"expected auto, true or false; received {text!r}")
    return values[text.lower()]



def mesh_shape(text):
    """`"2x4"` -> `(2, 4)`: the (batch, model) device mesh of `--mesh`; `"8"` -> `(8, 1)`."""
    parts = text.lower().split("x")
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        shape = ()
    if len(shape) == 1:
        shape = (shape[0], 1)
    if len(shape) != 2 or min(shape) < 1:
        raise argparse.ArgumentTypeError(
            f"expected BATCHxMODEL, the sizes of the data and model axes (e.g. 2x4); received "
            f"{text!r}"
        )
    return shape


def job_addresses(text):
    """`"10.0.0.1:1234"` or `"10.0.0.1:1234,10.0.0.2:1234"`: HOST:PORT, process 0's first."""
    from keras_vit.training.addresses import parse_job_addresses

    try:
        return ",".join(parse_job_addresses(text))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected HOST:PORT of process 0 (or every process's, comma-separated, process 0's "
            f"first), e.g. 10.0.0.1:1234; received {text!r}"
        ) from None

