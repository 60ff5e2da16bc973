"""TensorFlow's start-up lines (keras_vit/_start_lines.py): at the level `TF_CPP_MIN_LOG_LEVEL`
asks for, though TensorFlow logs them before it reads that variable (issue 56)."""

import os
import subprocess
import sys

import pytest

from keras_vit import _start_lines
from tests.helpers import backend_independent

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINES = (
    "a line of no log format\n"
    f"{_start_lines.NOTICE}\n"
    "I0000 00:00:1796620224.748221    7149 cudart_stub.cc:31] Could not find cuda drivers on "
    "your machine, GPU will not be used.\n"
    "I0000 00:00:1796620379.028495    7553 cpu_feature_guard.cc:227] This TensorFlow binary is "
    "optimized to use available CPU instructions in performance-critical operations.\n"
    "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow.\n"
    "W0000 00:00:1796620403.475221    7553 some.cc:1] a warning\n"
    "E0000 00:00:1796620403.475221    7553 cuda_platform.cc:52] failed call to cuInit: INTERNAL\n"
)


@backend_independent  # text only
def test_the_levels_of_tensorflow_apply_to_lines_it_logged_before_reading_them():
    kept = {level: _start_lines.keep_lines(LINES, level) for level in range(4)}
    lines = LINES.splitlines()
    assert kept[0] == LINES
    # A line of no log format stays; an absl line's continuation goes with it.
    assert kept[1].splitlines() == [lines[0], *lines[5:]]  # warnings and errors
    assert kept[2].splitlines() == [lines[0], lines[6]]
    assert kept[3] == "a line of no log format\n"
    assert _start_lines.min_log_level({}) == _start_lines.DEFAULT_LEVEL == 1
    assert _start_lines.min_log_level({"TF_CPP_MIN_LOG_LEVEL": "3"}) == 3
    assert _start_lines.min_log_level({"TF_CPP_MIN_LOG_LEVEL": "x"}) == 1


@backend_independent  # a fresh process imports TensorFlow after keras_vit
def test_importing_tensorflow_after_keras_vit_prints_nothing_at_level_3():
    pytest.importorskip("tensorflow")
    code = "import keras_vit, tensorflow as tf; print(len(tf.config.list_physical_devices()))"
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3",
           "KERAS_BACKEND": "tensorflow"}  # (its own backend: the same on every run)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stderr == "" and run.stdout.strip().isdigit(), run.stderr
