"""Thread settings of a recipe's process, chosen from the cores it may run on.

The command line (`keras-vit ...`) sets them before any framework is imported, as environment
defaults that the frameworks read when they start; the library used as a library changes no
process-wide setting (`configure_process` is called by the CLI, or by a user who asks).

What is chosen (`thread_environment`, a pure function of the available cores, the
environment and the backend), each only where the user has not set it:

- `OMP_WAIT_POLICY=PASSIVE`: PyTorch's intra-op threads (OpenMP) sleep when their work is
  done instead of spinning for a core another process is waiting for;
- on PyTorch, `OMP_NUM_THREADS`: its intra-op threads, one per available core
  (`os.sched_getaffinity`, not the machine's count: a container or `taskset` sees fewer).

TensorFlow's own pools (which the recipes' `tf.data` runs on, in the same process on PyTorch
and JAX) are left at TensorFlow's defaults: at one thread each they did not help PyTorch beside
busy processes (benchmarks/RESULTS.md, "PyTorch on a shared CPU"), and they would slow an
augmenting pipeline.

`KERAS_VIT_THREADS=0` leaves every setting alone; `KERAS_VIT_THREADS=N` asks for N compute
threads (PyTorch's intra-op threads; TensorFlow's intra-op pool on the TensorFlow backend).
"""

import os

ENV_VARIABLE = "KERAS_VIT_THREADS"
# What a user may have set that means "the wait policy is chosen already".
_WAIT_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")


def _requested(environ):
    """`KERAS_VIT_THREADS`: None (auto), 0 (leave alone) or a positive count."""
    value = environ.get(ENV_VARIABLE, "").strip().lower()
    if value in ("", "auto"):
        return None
    if value.isascii() and value.isdigit():  # "²".isdigit() is True, int("²") an error
        return int(value)
    raise ValueError(
        f"{ENV_VARIABLE} must be 'auto', 0 (leave the thread settings alone) or a number of "
        f"threads. Received: {ENV_VARIABLE}={value!r}"
    )


def thread_environment(cores, environ, backend):
    """The environment defaults a recipe's process gets (a pure function; nothing is set).

    Args:
        cores: int. The cores this process may run on (`len(os.sched_getaffinity(0))`).
        environ: mapping. The process's environment (the user's settings win).
        backend: `"torch"`, `"jax"` or `"tensorflow"` (`KERAS_BACKEND`).

    Returns:
        A dict `{variable: value}` of the settings to add: none the user has set.

    Example:

    >>> thread_environment(2, {}, "torch")
    {'OMP_WAIT_POLICY': 'PASSIVE', 'OMP_NUM_THREADS': '2'}
    >>> thread_environment(2, {"KERAS_VIT_THREADS": "0"}, "torch")
    {}
    """
    if not isinstance(cores, int) or cores < 1:
        raise ValueError(f"cores must be a positive int. Received: cores={cores!r}")
    requested = _requested(environ)
    if requested == 0:
        return {}
    chosen = {}
    if not any(name in environ for name in _WAIT_SETTINGS):
        chosen["OMP_WAIT_POLICY"] = "PASSIVE"
    if backend == "torch" and "OMP_NUM_THREADS" not in environ:
        chosen["OMP_NUM_THREADS"] = str(requested or cores)
    if backend == "tensorflow" and requested and "TF_NUM_INTRAOP_THREADS" not in environ:
        chosen["TF_NUM_INTRAOP_THREADS"] = str(requested)
    return chosen


def available_cores():
    """The cores this process may run on (its affinity; the machine's count where unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def configure_process(environ=None):
    """Adds `thread_environment`'s defaults to `environ` (the process's own by default).

    Acts only on frameworks imported afterwards (the CLI calls it first thing). Returns the
    dict of what it set.
    """
    environ = os.environ if environ is None else environ
    backend = environ.get("KERAS_BACKEND", "") or _keras_config_backend()
    chosen = thread_environment(available_cores(), environ, backend)
    environ.update(chosen)
    return chosen


def backend_name(environ=None):
    """The Keras backend of this process, found without importing a framework: Keras' own when
    Keras is imported, else `KERAS_BACKEND`, else `~/.keras/keras.json`'s (default tensorflow)."""
    import sys

    keras = sys.modules.get("keras")
    if keras is not None and hasattr(keras, "backend"):
        return keras.backend.backend()
    environ = os.environ if environ is None else environ
    return environ.get("KERAS_BACKEND", "") or _keras_config_backend()


def _keras_config_backend():
    """The backend in `~/.keras/keras.json` (Keras' own default file), read without Keras."""
    import json

    path = os.path.join(
        os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras"),
        "keras.json",
    )
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f).get("backend", "tensorflow")
    except (OSError, ValueError):
        return "tensorflow"
