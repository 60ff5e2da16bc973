"""Runs the docstring examples (`>>>`) of every module under keras_vit/ on the active backend.

One test per module, found by walking the package's files (nothing is imported to collect them).
A module whose import needs a missing optional extra is skipped with the name of the missing
package; any other import error fails. The PyTorch adapter runs only on the torch backend.
"""

import doctest
import functools
import importlib
import io
import os
import pkgutil
import sys
import tempfile
import traceback

import keras
import pytest

import keras_vit

OPTIONFLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE

# Top-level import names of the packages in pyproject's optional extras (backends, recipes, onnx).
OPTIONAL_PACKAGES = {
    "tensorflow",
    "jax",
    "torch",
    "tensorflow_datasets",
    "importlib_resources",
    "matplotlib",
    "sklearn",
    "skimage",
    "PIL",
    "tensorboard",
    "tf2onnx",
    "onnx",
    "onnxruntime",
}

# Modules that only work on one backend: module name -> backend.
BACKEND_ONLY = {"keras_vit.layers._torch_kernels": "torch"}


def module_names(path=keras_vit.__path__, prefix="keras_vit."):
    """Every module and package under keras_vit/, sorted, found without importing them."""
    names = []
    for info in pkgutil.iter_modules(path):
        name = prefix + info.name
        names.append(name)
        if info.ispkg:
            names += module_names([os.path.join(path[0], info.name)], name + ".")
    return sorted(names)


MODULES = ["keras_vit"] + module_names()


@functools.cache
def run_module_doctests(name):
    """Runs a module's examples in a temporary directory.

    Returns `(examples run, failure report, skip reason)`; cached so that the total below does
    not run a module twice in one session.
    """
    backend = BACKEND_ONLY.get(name)
    if backend is not None and keras.backend.backend() != backend:
        return 0, "", f"{name} is the {backend}-only adapter (backend: {keras.backend.backend()})"
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as error:
        missing = (error.name or "").split(".")[0]
        if missing in OPTIONAL_PACKAGES:
            return 0, "", f"{name} needs the optional package {missing!r}, not installed"
        return 0, f"import {name} failed:\n{traceback.format_exc()}", None
    except Exception:
        return 0, f"import {name} failed:\n{traceback.format_exc()}", None
    tests = doctest.DocTestFinder(exclude_empty=True).find(module, name)
    runner = doctest.DocTestRunner(optionflags=OPTIONFLAGS, verbose=False)
    report = io.StringIO()
    cwd = os.getcwd()
    policy = keras.config.dtype_policy()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            for test in sorted(tests, key=lambda t: t.name):
                keras.utils.set_random_seed(0)
                runner.run(test, out=report.write)
        finally:
            os.chdir(cwd)
            keras.config.set_dtype_policy(policy)
        left = os.listdir(tmp)
    text = report.getvalue()
    if left:
        text += f"\nExamples of {name} left files behind in the working directory: {left}\n"
    return runner.tries, text if (runner.failures or left) else "", None


@pytest.mark.parametrize("name", MODULES)
def test_module_doctests(name):
    attempted, failures, skip = run_module_doctests(name)
    if skip:
        pytest.skip(skip)
    assert not failures, f"docstring examples of {name} failed ({attempted} run):\n{failures}"


def test_examples_are_run():
    assert len(MODULES) > 20 and "keras_vit.layers.patches" in MODULES
    total = sum(run_module_doctests(name)[0] for name in MODULES if name not in BACKEND_ONLY)
    assert total > 0


def test_import_errors_fail_and_missing_extras_skip(tmp_path, monkeypatch):
    run = run_module_doctests.__wrapped__  # uncached
    attempted, failures, skip = run("keras_vit._no_such_module")
    assert (attempted, skip) == (0, None) and "import keras_vit._no_such_module failed" in failures
    (tmp_path / "needs_onnx.py").write_text('"""\n>>> 1 + 1\n2\n"""\nimport onnx\n')
    (tmp_path / "broken.py").write_text("raise RuntimeError('broken on import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "onnx", None)  # as if the onnx extra were not installed
    reason = "needs_onnx needs the optional package 'onnx', not installed"
    assert run("needs_onnx") == (0, "", reason)
    attempted, failures, skip = run("broken")
    assert skip is None and "RuntimeError: broken on import" in failures
