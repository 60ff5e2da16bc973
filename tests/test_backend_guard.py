"""The check of the `backend_independent` mark (tests/backend_guard.py, tests/conftest.py).

On every backend: each way into the Keras backend is recorded while the guard watches, nothing
else is, and the guard leaves no patch behind; a marked test that uses the backend fails (a
use is recorded, never refused, so no library `except` can hide it), one that does not passes,
and all are skipped in the runs of the other backends when KERAS_VIT_ONCE_BACKEND names one.
"""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from tests import backend_guard

pytest_plugins = ["pytester"]


def uses_of(action):
    uses = []
    with backend_guard.watch_backend(uses):
        action()
    return uses


DENSE = keras.layers.Dense(2)


def _layer_call():
    DENSE(np.zeros((1, 2), "float32"))


@pytest.mark.parametrize(
    "action, what",
    [
        (lambda: keras.Variable(np.zeros(2, "float32")), "a Keras variable made"),
        (lambda: keras.layers.Dense(2), "a Keras layer made"),
        (_layer_call, "a Keras layer called"),
        (lambda: keras.ops.convert_to_tensor(np.zeros(2)), "convert_to_tensor"),
        (lambda: keras.ops.convert_to_numpy(np.zeros(2)), "convert_to_numpy"),
        (lambda: keras.ops.add(np.ones(2), np.ones(2)), ".add"),
        (lambda: keras.ops.softmax(np.ones((1, 2), "float32")), ".softmax"),
        (lambda: keras.random.normal((2,), seed=1), ".normal"),
        (lambda: keras.backend.backend(), "the Keras backend's name"),
        (lambda: keras.config.backend(), "the Keras backend's name"),
    ],
    ids=["variable", "layer", "layer_call", "to_tensor", "to_numpy", "op", "nn_op", "random",
         "backend_name", "config_backend_name"],
)
def test_each_way_into_the_backend_is_recorded(action, what):
    uses = uses_of(action)
    assert len(uses) == 1 and what in uses[0], uses
    assert "test_backend_guard.py" in uses[0]  # where: the test's own line


def test_python_and_numpy_are_not_recorded():
    from keras_vit.cli import build_parser

    def pure():
        np.linalg.norm(np.arange(4.0))
        build_parser().parse_args(["weights"])
        assert os.environ["KERAS_BACKEND"] == backend_guard.POISONED_BACKEND

    assert uses_of(pure) == []


def test_nothing_is_left_patched():
    before = os.environ.get("KERAS_BACKEND")
    uses_of(lambda: None)
    assert os.environ.get("KERAS_BACKEND") == before
    for owner, attr, original, _ in backend_guard._patches:
        assert getattr(owner, attr) is original or owner.__dict__.get(attr) is original, attr
    keras.ops.add(np.ones(2), np.ones(2))  # no guard: nothing recorded, nothing raised


def test_a_subprocess_importing_keras_without_its_backend_fails():
    def child():
        proc = subprocess.run([sys.executable, "-c", "import keras"], capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode != 0
        assert f"Unable to import backend : {backend_guard.POISONED_BACKEND}" in proc.stderr

    assert uses_of(child) == []


def test_keras_objects_among_arguments():
    found = backend_guard.keras_objects({
        "layer": keras.layers.Dense(2),
        "pair": (1, keras.Variable(np.zeros(2, "float32"))),
        "tensor": keras.ops.ones(2),
        "array": np.zeros(2),
        "text": "keras",
    })
    assert [name.split()[0] for name in found] == ["layer", "pair", "tensor"]


MARKED_TESTS = """
import keras
import numpy as np
import pytest

from tests.helpers import backend_independent


@backend_independent
def test_clean():
    assert np.zeros(2).sum() == 0


@backend_independent
def test_variable():
    keras.Variable(np.zeros(2, "float32"))


@backend_independent
def test_op():
    keras.ops.add(np.ones(2), np.ones(2))  # it works: the use is recorded, not refused


@pytest.fixture
def layer():
    return keras.layers.Dense(2)


@backend_independent
def test_fixture(layer):
    pass


def test_unmarked_may_use_keras():
    keras.Variable(np.zeros(2, "float32"))
"""


@pytest.fixture
def marked_tests(pytester):
    pytester.makeconftest(
        "from tests.conftest import pytest_collection_modifyitems, pytest_runtest_call, "
        "pytest_runtest_setup  # noqa: F401"
    )
    pytester.makepyfile(test_marked=MARKED_TESTS)
    return pytester


def test_marked_tests_that_use_keras_fail(marked_tests, monkeypatch):
    monkeypatch.delenv("KERAS_VIT_ONCE_BACKEND", raising=False)
    result = marked_tests.runpytest_inprocess("-p", "no:cacheprovider", "-q", "-p", "no:xdist")
    result.assert_outcomes(passed=2, failed=2, errors=1)
    text = result.stdout.str()
    assert "test_variable is marked backend_independent but its call used the Keras backend: " \
           "a Keras variable made" in text
    assert "test_op is marked backend_independent but its call used the Keras backend: " \
           "a backend function" in text
    assert "test_fixture is marked backend_independent but its setup used the Keras backend: " \
           "a Keras layer made" in text


@pytest.mark.parametrize("runs_here", [True, False])
def test_marked_tests_run_in_the_once_backend_run_only(marked_tests, monkeypatch, runs_here):
    other = next(b for b in ("tensorflow", "jax", "torch") if b != keras.backend.backend())
    once = keras.backend.backend() if runs_here else other
    monkeypatch.setenv("KERAS_VIT_ONCE_BACKEND", once)
    result = marked_tests.runpytest_inprocess("-p", "no:cacheprovider", "-q", "-p", "no:xdist",
                                              "-rs")
    if runs_here:
        result.assert_outcomes(passed=2, failed=2, errors=1)
    else:
        result.assert_outcomes(passed=1, skipped=4)
        assert f"backend-independent: runs once, in the {once} run" in result.stdout.str()
