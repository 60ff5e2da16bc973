"""Extension points: what a lower floor reads and a package above it provides.

A module imports only from its own floor and the floors below it (docs/design.md), yet three
lower floors read what an upper one holds: the family registry (`keras_vit.weights.registry`)
is filled by the family folders above it, the builders (`keras_vit.models`) load `.npz`
files and presets through the weights package above them, and `keras_vit.saving.load_model`
reads a sharded checkpoint folder through `keras_vit.distribution.checkpoint`. Each reads an
extension point by its name (`load(point)`); `keras_vit/__init__.py`, the top of the stack,
says which package provides it (`provide(point, package)`). So no lower module names an upper
one, and nothing is imported before it is needed: the provider is imported the first time its
point is read.

`provide(point, package, subpackages=True)` makes every sub-package of `package` a plug-in too:
they are imported in name order (a new family folder is found, not listed).
"""

import importlib
import pkgutil

__all__ = [
    "MODEL_FAMILIES", "SHARDED_CHECKPOINTS", "WEIGHTS_HANDLER", "is_loading", "load", "provide",
    "subpackages",
]  # fmt: skip

# The extension points.
MODEL_FAMILIES = "the model family registry"  # keras_vit.weights.registry reads it
WEIGHTS_HANDLER = "the builders' weights handler"  # keras_vit.models.pretrained reads it
SHARDED_CHECKPOINTS = "the sharded checkpoint reader"  # keras_vit.saving.load_model reads it

_PROVIDERS = {}  # point -> (package, subpackages)
_STATE = {}  # point -> "loading" | "loaded"


def provide(point, package, *, subpackages=False):
    """Names the package that provides `point` (once; the same package again is a no-op)."""
    given = (package, bool(subpackages))
    if _PROVIDERS.get(point, given) != given:
        raise ValueError(
            f"Extension point {point!r} is provided by {_PROVIDERS[point][0]!r}. "
            f"Received: package={package!r}"
        )
    _PROVIDERS[point] = given


def subpackages(package):
    """The names of `package`'s sub-packages (folders with an `__init__.py`), sorted; none is
    imported."""
    module = importlib.import_module(package)
    return tuple(
        sorted(info.name for info in pkgutil.iter_modules(module.__path__) if info.ispkg)
    )


def is_loading(point):
    """Whether `load(point)` is importing the provider now (a plug-in is registering)."""
    return _STATE.get(point) == "loading"


def load(point):
    """Imports the provider of `point` (and its sub-packages) once.

    Raises:
        RuntimeError: the point is read while its provider is still importing (a plug-in
            reads what the plug-ins are still filling), or no package provides it.
    """
    state = _STATE.get(point)
    if state == "loaded":
        return
    if point not in _PROVIDERS:
        raise RuntimeError(f"No package provides {point!r} (keras_vit/__init__.py names them).")
    package, with_subpackages = _PROVIDERS[point]
    if state == "loading":
        raise RuntimeError(
            f"{point} was read while {package} was still importing its plug-ins: a plug-in's "
            "__init__ must only register itself (import its own pure-data modules), not read "
            f"{point}."
        )
    _STATE[point] = "loading"
    try:
        importlib.import_module(package)
        if with_subpackages:
            for name in subpackages(package):
                importlib.import_module(f"{package}.{name}")
    except BaseException:
        del _STATE[point]
        raise
    _STATE[point] = "loaded"
