import atexit
import gc
import os
import shutil
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# JAX's persistent compilation cache, for the whole test run: a step that compiles to the same
# XLA program in several tests (the same tiny model, shapes and optimizer) compiles once, also
# across the xdist workers (they inherit this process's environment) and in the tests'
# subprocesses. scripts/run_tests.sh gives each run its own folder; without it, a temporary
# folder of this process, removed at its exit. Every compilation is cached (the tests' tiny
# programs compile in well under JAX's default threshold of one second).
if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
    _cache = tempfile.mkdtemp(prefix="keras_vit_jax_cache_")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
# The tests' XLA code-generation flags (tests/xla_test_flags.py), set before JAX or TensorFlow
# starts; an XLA_FLAGS that names one of them keeps its own value.
from tests.xla_test_flags import with_test_flags  # noqa: E402

os.environ["XLA_FLAGS"] = with_test_flags(os.environ.get("XLA_FLAGS", ""))

from keras_vit._import_order import load_triton_before_tensorflow  # noqa: E402

load_triton_before_tensorflow()  # else timm segfaults on the TensorFlow backend

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from tests import backend_guard  # noqa: E402

ONCE_BACKEND = "KERAS_VIT_ONCE_BACKEND"


def _trace_each_tensorflow_step_once():
    """[TensorFlow adapter, tests only] Keras' TensorFlow trainer builds a model's optimizer,
    metric and loss state inside the first trace of a `fit` / `evaluate` step when no
    `tf.distribute` strategy is set, so tf.function traces that step twice (the first trace
    creates variables); with a strategy, and always on JAX and PyTorch, Keras builds that state
    first (`Trainer._symbolic_build`, one symbolic call) and the step is traced once. The tests
    take that path on TensorFlow too: the same traced step, the same graph-mode execution, one
    trace instead of two (measured: a 2-block ViT's first `fit` makes 1.8 million Python calls
    instead of 4.7 million)."""
    from keras.src.backend.tensorflow.trainer import TensorFlowTrainer

    deferred = TensorFlowTrainer._maybe_symbolic_build

    def build_first(self, iterator=None, data_batch=None):
        if self._distribute_strategy is not None:  # Keras builds first already
            return deferred(self, iterator=iterator, data_batch=data_batch)
        if iterator is not None:  # Keras' own strategy branch, with no strategy
            for _, _, batches in iterator:
                data_batch = next(batches)
                break
        self._symbolic_build(data_batch=data_batch)

    TensorFlowTrainer._maybe_symbolic_build = build_first


@pytest.fixture(autouse=True)
def _seed():
    keras.utils.set_random_seed(1234)
    np.random.seed(1234)
    yield
    keras.config.set_dtype_policy("float32")


def backend():
    return keras.backend.backend()


if backend() == "tensorflow":
    _trace_each_tensorflow_step_once()


def pytest_collection_finish(session):
    """After collection (every framework and test module imported): one collection, then the
    survivors moved out of the garbage collector's reach (`gc.freeze`). Modules, classes and
    functions live to the end anyway; without this every full collection of a test worker
    walks TensorFlow's, PyTorch's, JAX's and transformers' million objects again (seconds each:
    Keras collects on every deleted variable, e.g. each kernel `model.quantize` replaces)."""
    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(config, items):
    _run_backend_independent_once(items)
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: its order is the schedule's
        _files_heaviest_first(items)


def _run_backend_independent_once(items):
    """Backend-independent tests run in the run of KERAS_VIT_ONCE_BACKEND only (any run when it
    is unset): scripts/run_tests.sh sets it to the first backend it runs."""
    once = os.environ.get(ONCE_BACKEND, "").strip()
    if not once or once == backend():
        return
    skip = pytest.mark.skip(
        reason=f"backend-independent: runs once, in the {once} run ({ONCE_BACKEND}={once})"
    )
    for item in items:
        if item.get_closest_marker("backend_independent"):
            item.add_marker(skip)


def _files_heaviest_first(items):
    """Under pytest-xdist's `--dist loadfile` (scripts/run_tests.sh) each test file runs in one
    worker, so its module fixtures are built once; the files are handed out in the workers'
    collection order (`--no-loadscope-reorder`), which this makes heaviest first, so that no long
    file starts last while the other worker idles: the files with the most `slow` tests first,
    then those with the most tests. (`--dist loadgroup` does not group: pytest-xdist 3.8 marks a
    group in `item._nodeid`, which pytest 9 no longer reads.)"""
    files = {}
    for item in items:
        files.setdefault(item.nodeid.split("::")[0], []).append(item)
    weight = {
        name: (sum(1 for i in members if i.get_closest_marker("slow")), len(members))
        for name, members in files.items()
    }
    order = sorted(files, key=lambda name: weight[name], reverse=True)
    items[:] = [item for name in order for item in files[name]]


def _fail_on_backend_use(item, phase, uses):
    if uses:
        pytest.fail(
            f"{item.nodeid} is marked backend_independent but its {phase} used the Keras "
            f"backend: {uses[0]}Run it on every backend (remove the mark) or keep Keras out "
            "of it (tests/backend_guard.py).",
            pytrace=False,
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    if not item.get_closest_marker("backend_independent"):
        return (yield)
    uses = []
    with backend_guard.watch_backend(uses):
        result = yield
    _fail_on_backend_use(item, "setup", uses)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    if not item.get_closest_marker("backend_independent"):
        return (yield)
    objects = backend_guard.keras_objects(getattr(item, "funcargs", {}))
    if objects:
        pytest.fail(
            f"{item.nodeid} is marked backend_independent but takes Keras objects: "
            f"{', '.join(objects)}",
            pytrace=False,
        )
    uses = []
    with backend_guard.watch_backend(uses):
        result = yield
    _fail_on_backend_use(item, "call", uses)
    return result
