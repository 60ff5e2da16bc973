"""Shared helper of the benchmark-script tests: a `benchmarks/*.py` script loaded as a module."""

import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_benchmark(name):
    """Imports `benchmarks/<name>.py` (not a package) and returns the module."""
    folder = os.path.join(ROOT, "benchmarks")
    if folder not in sys.path:  # as when the script runs: its folder first on the path
        sys.path.insert(0, folder)
    path = os.path.join(folder, f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
