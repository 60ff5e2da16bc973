"""The arguments every builder and loader shares, checked in one place.

`ViT()`, `ViTConfig`, `from_timm`, `timm_config`, `from_huggingface` (every family),
`from_timm_naflexvit`, `naflexvit_config` and `convert_checkpoint` (official `.npz` and presets)
call `check_size_arguments` on what the user typed *before* any default fills in, so that
`image_size=0` is refused rather than read as "the checkpoint's size", `num_classes=-3` is
refused rather than read as "no head", and `num_classes="10"` is a `ValueError` naming the
argument rather than a comparison traceback. `head_arguments` is the one rule for "0 classes
means no head". `unknown_keys_message` names the nearest valid keys of a misspelled one.
"""

import difflib

from keras_vit.layers._checks import check_positive_int_pair


def check_num_classes(value, name="num_classes"):
    """`value` if it is None or an int >= 0 (0: no head), else a ValueError naming it.

    Example:

    >>> check_num_classes(0), check_num_classes(None)
    (0, None)
    >>> check_num_classes("10")
    Traceback (most recent call last):
        ...
    ValueError: num_classes must be an int >= 0 (0: no classifier head). Received: \
num_classes='10' (type str)
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            f"{name} must be an int >= 0 (0: no classifier head). Received: {name}={value!r} "
            f"(type {type(value).__name__})"
        )
    return value


def check_size_arguments(*, image_size=None, num_classes=None, patch_size=None):
    """Checks the user's `image_size`, `num_classes` and `patch_size` (None: the default).

    Args:
        image_size: None, or a positive int or a pair of positive ints.
        num_classes: None, or an int >= 0 (0: no head).
        patch_size: None, or a positive int or a pair of positive ints.

    Raises:
        ValueError: naming the argument and the received value.

    Example:

    >>> check_size_arguments(image_size=(32, 48), num_classes=10, patch_size=8)
    >>> check_size_arguments(image_size=0)
    Traceback (most recent call last):
        ...
    ValueError: image_size must be positive. Received: image_size=0
    """
    for name, value in (("image_size", image_size), ("patch_size", patch_size)):
        if value is not None:
            check_positive_int_pair(value, name)
    check_num_classes(num_classes)


def head_arguments(num_classes, include_top=None, default=1000):
    """`(num_classes, include_top)` for a `ViTConfig`: 0 or None classes mean no head unless
    `include_top` says otherwise; the config's count is then `default`.

    Example:

    >>> head_arguments(0), head_arguments(None), head_arguments(10)
    ((1000, False), (1000, False), (10, True))
    """
    check_num_classes(num_classes)
    if include_top is None:
        include_top = bool(num_classes)
    return num_classes or default, include_top


def unknown_keys_message(unknown, valid, what):
    """`'<what> has unknown keys [...]'`, with each key's nearest valid names (difflib).

    Example:

    >>> unknown_keys_message(["dept"], ["depth", "embed_dim"], "The NaFlexVitCfg dict")
    "The NaFlexVitCfg dict has unknown keys ['dept'] ('dept': did you mean 'depth'?)"
    """
    return f"{what} has unknown keys {list(unknown)}{nearest_keys(unknown, valid)}"


def nearest_keys(unknown, valid):
    """`" ('dept': did you mean 'depth'?)"` for the keys of `unknown` with a near valid name."""
    hints = []
    for key in unknown:
        near = difflib.get_close_matches(str(key), [str(v) for v in valid], n=3, cutoff=0.6)
        if near:
            hints.append(f"{key!r}: did you mean {' or '.join(repr(n) for n in near)}?")
    return f" ({'; '.join(hints)})" if hints else ""
