"""keras-cv augmentation layers by name: `keras_cv.GridMask`, `keras_cv.RandAugment(magnitude=0.3)`.

The recipes' `--augment` flag (and `augment=[...]` in a config file, and
`keras_vit.training.build_augmenters`) accepts, beside Keras' own augmentations, any layer
class of `keras_cv.layers` written as `keras_cv.NAME` or `keras_cv.layers.NAME`, optionally
called with literal arguments: `keras_cv.RandomCutout(0.3, 0.3)`,
`keras_cv.RandAugment(value_range=(0, 255), magnitude=0.3)`. The text is parsed with `ast`
and every argument read with `ast.literal_eval` (numbers, strings, tuples, lists, dicts,
booleans, None): nothing in it is executed. keras-cv is an optional extra
(`pip install "keras-vit[cv]"`).

The layers run inside the `tf.data` pipeline (TensorFlow graph mode) whatever the Keras
backend, on float32 batches `(B, H, W, C)` with values in [0, 255] (after the random resized
crop and flip, before the scaling to [-1, 1]). So, unless given:

- `value_range` is set to `(0, 255)` for the layers that take one (RandAugment,
  AutoContrast, Equalization, Posterization, Solarization, ...);
- `seed` is set to the recipe's seed for the layers that take one;
- `target_size` is set to the model's image size for the layers that take one
  (JitteredResize), so the batch keeps its shape.

`MixUp`, `CutMix`, `FourierMix` and `Mosaic` mix labels too: they are called on
`{"images": x, "labels": one_hot_y}` as Keras' own MixUp and CutMix are.
"""

import ast
import difflib
import importlib
import inspect

PREFIXES = ("keras_cv.layers.", "keras_cv.")
MIXING_LAYERS = frozenset({"MixUp", "CutMix", "FourierMix", "Mosaic"})
VALUE_RANGE = (0, 255)
INSTALL = 'pip install "keras-vit[cv]"'


def is_keras_cv_spec(spec):
    """True for a name like `"keras_cv.GridMask"` (or `"keras_cv.layers.GridMask(...)"`)."""
    return isinstance(spec, str) and spec.strip().startswith(PREFIXES[1])


def _literal(node, text):
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise ValueError(
            f"Arguments of a keras-cv augmentation must be literals (numbers, strings, tuples, "
            f"lists, dicts, True/False/None). Received: {ast.unparse(node)!r} in {text!r}"
        ) from None


def parse_keras_cv_spec(text):
    """Splits `"keras_cv.NAME(args)"` into `(NAME, args tuple, kwargs dict)` without executing it.

    Args:
        text: str. `keras_cv.NAME`, `keras_cv.layers.NAME`, optionally followed by a call
            with literal positional and keyword arguments.

    Returns:
        `(name, args, kwargs)`.

    Raises:
        ValueError: not of that form, or an argument that is not a literal.

    Example:

    >>> parse_keras_cv_spec("keras_cv.RandAugment(value_range=(0, 255), magnitude=0.3)")
    ('RandAugment', (), {'value_range': (0, 255), 'magnitude': 0.3})
    >>> parse_keras_cv_spec("keras_cv.layers.RandomCutout(0.5, 0.5)")
    ('RandomCutout', (0.5, 0.5), {})
    """
    form = (
        "expected keras_cv.NAME or keras_cv.NAME(arguments), e.g. keras_cv.GridMask or "
        "keras_cv.RandAugment(value_range=(0, 255), magnitude=0.3)"
    )
    text = text.strip() if isinstance(text, str) else text
    try:
        node = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, TypeError):
        raise ValueError(f"Malformed keras-cv augmentation: {form}. Received: {text!r}") from None
    call = node if isinstance(node, ast.Call) else None
    target = call.func if call is not None else node
    dotted = []
    while isinstance(target, ast.Attribute):
        dotted.insert(0, target.attr)
        target = target.value
    if isinstance(target, ast.Name):
        dotted.insert(0, target.id)
    path = ".".join(dotted)
    name = next(
        (path[len(p):] for p in PREFIXES if path.startswith(p) and "." not in path[len(p):]),
        None,
    )
    if not isinstance(target, ast.Name) or not name or name == "layers":
        raise ValueError(f"Malformed keras-cv augmentation: {form}. Received: {text!r}")
    if call is None:
        return name, (), {}
    if any(isinstance(arg, ast.Starred) for arg in call.args) or any(
        kw.arg is None for kw in call.keywords
    ):
        raise ValueError(f"*args and **kwargs are not accepted: {form}. Received: {text!r}")
    args = tuple(_literal(arg, text) for arg in call.args)
    kwargs = {kw.arg: _literal(kw.value, text) for kw in call.keywords}
    return name, args, kwargs


def import_keras_cv():
    """Imports `keras_cv`, or raises an ImportError that says how to install it."""
    try:
        return importlib.import_module("keras_cv")
    except ImportError as error:
        raise ImportError(
            f"keras-cv augmentations need keras-cv, which is not installed: {INSTALL} "
            f"(or pip install keras-cv). ({error})"
        ) from error


def _layer_classes(keras_cv):
    import keras

    return {
        name: value
        for name, value in vars(keras_cv.layers).items()
        if inspect.isclass(value) and issubclass(value, keras.layers.Layer)
    }


def build_keras_cv_layer(spec, kwargs=None, *, seed=None, image_size=None):
    """Builds a keras-cv layer from its name, for the recipes' `tf.data` pipeline.

    Args:
        spec: str. `keras_cv.NAME` or `keras_cv.NAME(literal arguments)` (see
            `parse_keras_cv_spec`).
        kwargs: optional dict of more keyword arguments (a config file's `(name, kwargs)` pair);
            they win over the ones in `spec`.
        seed: optional int, given to layers that take a `seed` unless set.
        image_size: optional int or (height, width), given as `target_size` to layers that take
            one (JitteredResize) unless set.

    Returns:
        `(layer, mixes_labels)`.

    Raises:
        ImportError: keras-cv is not installed (the message says `pip install
            "keras-vit[cv]"`).
        ValueError: a malformed spec, an unknown layer name (the message lists close names),
            or arguments the layer refuses (its own message, naming the layer).

    Example:

    >>> layer, mixes = build_keras_cv_layer("keras_cv.GridMask", seed=0)  # doctest: +SKIP
    >>> type(layer).__name__, mixes  # doctest: +SKIP
    ('GridMask', False)
    """
    name, args, spec_kwargs = parse_keras_cv_spec(spec)
    keras_cv = import_keras_cv()
    classes = _layer_classes(keras_cv)
    if name not in classes:
        close = difflib.get_close_matches(name, list(classes), n=3, cutoff=0.6)
        hint = f" Did you mean {', '.join('keras_cv.' + c for c in close)}?" if close else ""
        raise ValueError(
            f"Unknown keras-cv layer {name!r} (from {spec!r}): expected a layer class of "
            f"keras_cv.layers.{hint} Received: {spec!r}"
        )
    cls = classes[name]
    kwargs = {**spec_kwargs, **(kwargs or {})}
    try:
        parameters = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):  # pragma: no cover - a C-implemented signature
        parameters = {}
    # Defaults that fit the pipeline, for parameters neither given by keyword nor by position.
    positional = [p for p in parameters if p not in ("self", "args", "kwargs")][: len(args)]
    defaults = dict(value_range=VALUE_RANGE, seed=seed)
    if image_size is not None:
        size = tuple(image_size) if isinstance(image_size, (tuple, list)) else (image_size,) * 2
        defaults["target_size"] = size
    for key, value in defaults.items():
        if key in parameters and key not in kwargs and key not in positional and value is not None:
            kwargs[key] = value
    try:
        layer = cls(*args, **kwargs)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"keras_cv.layers.{name} refused its arguments (args={args!r}, kwargs={kwargs!r}): "
            f"{error}"
        ) from None
    return layer, name in MIXING_LAYERS
