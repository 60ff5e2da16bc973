"""How the builders take `weights=`: the weights package plugs in here.

`keras_vit.models` sits below `keras_vit.weights` (the weights loaders build and read models),
so the builders never import it. A `.weights.h5` file is Keras' own format and loads here; the
official `.npz` files and preset names are handled by `keras_vit.weights`, which registers
itself with `register_weights_handler` when it is imported. Where nothing has imported it yet
(`keras_vit` imports its public names lazily), the first `.npz` or preset loads the provider of
the `WEIGHTS_HANDLER` extension point (`keras_vit._plugins`; `keras_vit/__init__.py` names it):
this module names no package above it.
"""

import dataclasses
import os

from keras_vit import _plugins

WEIGHT_SUFFIXES = (".npz", ".weights.h5")
_EXPECTED = (
    "None, a preset name (see keras_vit.list_presets) or a path to an official .npz "
    "checkpoint or a .weights.h5 file"
)


@dataclasses.dataclass(frozen=True)
class WeightsHandler:
    """What `keras_vit.weights` lends the builders.

    Attributes:
        resolve_preset: callable `(variant, name, *, image_size, num_classes, include_top,
            representation_size) -> (path, image_size, num_classes, representation_size)`.
        load_npz: callable `(model, path) -> model` for official `.npz` checkpoints.
    """

    resolve_preset: object
    load_npz: object


_HANDLER = []


def register_weights_handler(handler):
    """Installs the `WeightsHandler` of `keras_vit.weights` (replacing an earlier one)."""
    if not isinstance(handler, WeightsHandler):
        raise ValueError(f"Expected a WeightsHandler. Received: {handler!r}")
    _HANDLER[:] = [handler]


def _handler():
    if not _HANDLER:
        _plugins.load(_plugins.WEIGHTS_HANDLER)  # the weights package registers itself
    if not _HANDLER:
        raise RuntimeError(
            "Loading .npz checkpoints and presets needs the weights package, which registers a "
            "WeightsHandler on import; it registered none."
        )
    return _HANDLER[0]


def is_preset_name(weights):
    """True when `weights` should be read as a preset name (a str that is not a weights path)."""
    return (
        isinstance(weights, str)
        and not weights.endswith(WEIGHT_SUFFIXES)
        and not os.path.exists(weights)
    )


def resolve_arguments(variant, weights, arguments):
    """`(weights, arguments)` with a preset name turned into its file and its defaults.

    `arguments` holds `image_size`, `num_classes`, `include_top` and `representation_size`
    (None where the caller left them); a preset fills those left None.
    """
    if not is_preset_name(weights):
        return weights, arguments
    path, image_size, num_classes, representation_size = _handler().resolve_preset(
        variant,
        weights,
        image_size=arguments["image_size"],
        num_classes=arguments["num_classes"],
        include_top=arguments["include_top"],
        representation_size=arguments["representation_size"],
    )
    return path, dict(
        arguments,
        image_size=image_size,
        num_classes=num_classes,
        representation_size=representation_size,
    )


def load_weights(model, weights):
    """Loads `weights` (None, an official `.npz` or a `.weights.h5` path) into `model`.

    Preset names are resolved to a file by `resolve_arguments` before the model is built.
    `.npz` files go through `keras_vit.weights.npz.checkpoints.load_npz` (strict, position embedding
    resampled to the model's grid, head kept when the class count differs, `pre_logits`
    dropped unless the model has `representation_size`).

    Returns:
        `model`.
    """
    if weights is None:
        return model
    if not isinstance(weights, (str, os.PathLike)):
        raise ValueError(f"weights must be {_EXPECTED}. Received: weights={weights!r}")
    path = os.fspath(weights)
    if not path.endswith(WEIGHT_SUFFIXES):
        raise ValueError(f"weights must be {_EXPECTED}. Received: weights={path!r}")
    if not os.path.exists(path):
        raise FileNotFoundError(f"Weights file not found: {path!r}")
    if path.endswith(".npz"):
        return _handler().load_npz(model, path)
    model.load_weights(path)
    return model
