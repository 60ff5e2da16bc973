"""The `backend_independent` marker's check: a test so marked runs no Keras backend code.

`scripts/run_tests.sh` runs the suite once per Keras backend; a test whose code cannot differ by
backend (argument parsing, name tables, docs text, a subprocess with its own fixed backend) is
marked `backend_independent` and runs in one of those runs only (tests/conftest.py). This module
makes the mark checked, not trusted: while such a test sets up and runs, every way into the
active backend is watched, and the test fails if it used any, naming the first use and where.

Watched (recorded, never refused, so that no library `except` can hide a use and the test runs
exactly as it would unmarked):

- a Keras variable made (`keras.Variable`: every layer weight, optimizer slot, seed state);
- a Keras layer or model made or called (`keras.Layer.__init__` / `__call__`);
- any function of the active backend's modules (`keras.src.backend.<name>.core`, `numpy`,
  `nn`, `math`, `linalg`, `image`, `random`, `rnn`, `sparse`), which every `keras.ops`,
  `keras.random` and tensor conversion (`convert_to_tensor`, `convert_to_numpy`) goes through, at
  every module of keras and keras_vit that holds a reference to one;
- the backend's name read through the public API (`keras.backend.backend()`,
  `keras.config.backend()`), the branch point of every backend-specific path of keras_vit;
- a Keras object among the test's arguments (a layer, model, variable or backend tensor built
  by a shared fixture before the test started);
- a subprocess that imports Keras without naming its own backend: `KERAS_BACKEND` is set to a
  name no Keras accepts while the test runs, so that import fails loudly in the child (a
  subprocess given `KERAS_BACKEND=...` explicitly runs the same way on every backend's run).
"""

import contextlib
import functools
import os
import sys
import traceback
import types

POISONED_BACKEND = "none-in-a-backend-independent-test"
_BACKEND_MODULES = ("core", "numpy", "nn", "math", "linalg", "image", "random", "rnn", "sparse")
_state = {"uses": None}  # the list of uses while a marked test runs, else None
_patches = []  # (owner, attribute, original, recording replacement)
_found = {"functions": None, "wrappers": {}, "scanned": set()}


def _record(what):
    uses = _state["uses"]
    if uses is not None and not uses:  # the first use is enough to fail the test
        stack = traceback.extract_stack()[:-2]
        frames = [f for f in stack if "/tests/backend_guard.py" not in f.filename]
        where = "".join(traceback.format_list(frames[-6:]))
        uses.append(f"{what}, at\n{where}")


def _recording(what, function):
    @functools.wraps(function)
    def recorded(*args, **kwargs):
        if _state["uses"] is not None:
            _record(what)
        return function(*args, **kwargs)

    recorded.__backend_guard_original__ = function
    return recorded


def _public_backend_name(original):
    @functools.wraps(original)
    def backend():
        if _state["uses"] is not None:
            caller = sys._getframe(1).f_code.co_filename.replace(os.sep, "/")
            if "/site-packages/keras/" not in caller:  # keras' own bookkeeping is not a branch
                _record("the Keras backend's name read (keras.backend.backend())")
        return original()

    backend.__backend_guard_original__ = original
    return backend


def _backend_functions():
    from keras.src import backend

    name = backend.backend()
    package = sys.modules[f"keras.src.backend.{name}"]
    functions = {}
    for sub in _BACKEND_MODULES:
        module = getattr(package, sub, None)
        if not isinstance(module, types.ModuleType):
            continue
        for attr, value in vars(module).items():
            if isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
                functions[id(value)] = (value, f"keras.src.backend.{name}.{sub}.{attr}")
    return functions


def _class_patches():
    import keras
    from keras.src.backend.common.variables import Variable
    from keras.src.layers.layer import Layer

    for cls, attr, what in (
        (Variable, "__init__", "a Keras variable made"),
        (Layer, "__init__", "a Keras layer made"),
        (Layer, "__call__", "a Keras layer called"),
    ):
        original = cls.__dict__[attr]
        _patches.append((cls, attr, original, _recording(what, original)))
    for api in (keras.backend, keras.config):
        original = api.backend
        _patches.append((api, "backend", original, _public_backend_name(original)))


def _scan_new_modules():
    """Adds the references to the backend's functions held by keras / keras_vit modules not
    scanned before (a module imported since the last marked test)."""
    if _found["functions"] is None:
        _found["functions"] = _backend_functions()
        _class_patches()
    functions, wrappers, scanned = _found["functions"], _found["wrappers"], _found["scanned"]
    for module_name, module in list(sys.modules.items()):
        if module_name in scanned or module is None:
            continue
        scanned.add(module_name)
        if not module_name.startswith(("keras.", "keras_vit")):
            continue
        for attr, value in list(vars(module).items()):
            found = functions.get(id(value))
            if found is None or found[0] is not value:
                continue
            if id(value) not in wrappers:
                wrappers[id(value)] = _recording(f"a backend function ({found[1]}) called", value)
            _patches.append((module, attr, value, wrappers[id(value)]))


def keras_objects(values):
    """The names of the Keras objects (layers, variables, backend tensors) among `values`, a
    dict of a test's arguments, looking into tuples, lists and dicts one level deep."""
    import keras

    def is_keras(value):
        if isinstance(value, keras.Layer | keras.Variable | keras.KerasTensor):
            return True
        return keras.ops.is_tensor(value)

    found = []
    for name, value in values.items():
        inner = list(value.values()) if isinstance(value, dict) else value
        inner = list(inner) if isinstance(inner, tuple | list) else []
        if is_keras(value) or any(is_keras(v) for v in inner):
            found.append(f"{name} ({type(value).__name__})")
    return found


@contextlib.contextmanager
def watch_backend(uses):
    """Records into `uses` every way into the Keras backend taken inside the block."""
    _scan_new_modules()
    previous_env = os.environ.get("KERAS_BACKEND")
    os.environ["KERAS_BACKEND"] = POISONED_BACKEND
    for owner, attr, _, replacement in _patches:
        setattr(owner, attr, replacement)
    _state["uses"] = uses
    try:
        yield uses
    finally:
        _state["uses"] = None
        for owner, attr, original, _ in _patches:
            setattr(owner, attr, original)
        if previous_env is None:
            os.environ.pop("KERAS_BACKEND", None)
        else:
            os.environ["KERAS_BACKEND"] = previous_env
