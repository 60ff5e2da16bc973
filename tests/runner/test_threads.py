"""The thread settings of a recipe's process (keras_vit/runner/threads.py, issue 46).

`thread_environment` is a pure function of the cores, the environment and the backend (tested
without timing); the CLI applies it before any framework starts, and the library used as a
library changes no process-wide setting.
"""

import json
import os
import subprocess
import sys

import keras
import pytest

from keras_vit.runner import threads
from keras_vit.runner.threads import thread_environment
from tests.helpers import backend_independent

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@backend_independent
@pytest.mark.parametrize(
    "cores, environ, backend, expected",
    [
        # PyTorch: passive waits, a thread per available core; TensorFlow's pools untouched.
        (2, {}, "torch", {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "2"}),
        (1, {}, "torch", {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "1"}),
        (2, {}, "jax", {"OMP_WAIT_POLICY": "PASSIVE"}),
        (2, {"TF_NUM_INTRAOP_THREADS": "2", "KERAS_VIT_THREADS": "3"}, "tensorflow",
         {"OMP_WAIT_POLICY": "PASSIVE"}),
        (2, {}, "tensorflow", {"OMP_WAIT_POLICY": "PASSIVE"}),
        # The user's own settings win, one by one.
        (2, {"OMP_NUM_THREADS": "1"}, "torch", {"OMP_WAIT_POLICY": "PASSIVE"}),
        (2, {"OMP_WAIT_POLICY": "ACTIVE"}, "torch", {"OMP_NUM_THREADS": "2"}),
        (2, {"GOMP_SPINCOUNT": "1000"}, "torch", {"OMP_NUM_THREADS": "2"}),
        # KERAS_VIT_THREADS: 0 leaves everything alone, N asks for N threads, auto is the default.
        (2, {"KERAS_VIT_THREADS": "0"}, "torch", {}),
        (2, {"KERAS_VIT_THREADS": "3"}, "torch",
         {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "3"}),
        (2, {"KERAS_VIT_THREADS": "3"}, "tensorflow",
         {"OMP_WAIT_POLICY": "PASSIVE", "TF_NUM_INTRAOP_THREADS": "3"}),
        (4, {"KERAS_VIT_THREADS": "auto"}, "torch",
         {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "4"}),
    ],
)
def test_thread_environment(cores, environ, backend, expected):
    before = dict(environ)
    assert thread_environment(cores, environ, backend) == expected
    assert environ == before  # pure: the mapping it reads is left as it was


@backend_independent
def test_thread_environment_refuses_bad_input():
    with pytest.raises(ValueError, match=r"KERAS_VIT_THREADS must be 'auto', 0 .*"
                                         r"Received: KERAS_VIT_THREADS='many'"):
        thread_environment(2, {"KERAS_VIT_THREADS": "many"}, "torch")
    with pytest.raises(ValueError, match=r"cores must be a positive int\. Received: cores=0"):
        thread_environment(0, {}, "torch")


@backend_independent
def test_configure_process_adds_defaults_to_the_mapping_given(monkeypatch):
    monkeypatch.setattr(threads, "available_cores", lambda: 3)
    environ = {"KERAS_BACKEND": "torch", "OMP_NUM_THREADS": "1"}
    assert threads.configure_process(environ) == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert environ == {"KERAS_BACKEND": "torch", "OMP_NUM_THREADS": "1",
                       "OMP_WAIT_POLICY": "PASSIVE"}


@backend_independent
def test_available_cores_is_the_affinity():
    assert threads.available_cores() == len(os.sched_getaffinity(0))


_CLI_THEN_FRAMEWORK = """
import json, os, sys
from keras_vit.cli import main
assert "torch" not in sys.modules and "keras" not in sys.modules
code = main(["weights"])  # a command that loads Keras (and the backend)
import torch
names = ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS")
print(json.dumps({"code": code, "torch_threads": torch.get_num_threads(),
                  **{name: os.environ.get(name) for name in names}}))
"""


def _run(code, **environ):
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "KERAS_VIT_THREADS",
                        "TF_NUM_INTEROP_THREADS", "TF_NUM_INTRAOP_THREADS", "GOMP_SPINCOUNT")}
    env.update(PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3", **environ)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_cli_sets_thread_defaults_before_the_framework_starts():
    backend = keras.backend.backend()
    got = _run(_CLI_THEN_FRAMEWORK, KERAS_BACKEND=backend)
    cores = len(os.sched_getaffinity(0))
    assert got["code"] == 0 and got["OMP_WAIT_POLICY"] == "PASSIVE"
    if backend == "torch":  # PyTorch read OMP_NUM_THREADS when it started
        assert got["OMP_NUM_THREADS"] == str(cores) and got["torch_threads"] == cores
    else:
        assert got["OMP_NUM_THREADS"] is None
    assert got["TF_NUM_INTRAOP_THREADS"] is None  # TensorFlow's pools stay its own


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="PyTorch's threads")
def test_cli_keeps_the_users_thread_settings():
    got = _run(_CLI_THEN_FRAMEWORK, KERAS_BACKEND="torch", OMP_NUM_THREADS="1",
               OMP_WAIT_POLICY="ACTIVE")
    assert (got["torch_threads"], got["OMP_NUM_THREADS"], got["OMP_WAIT_POLICY"]) == (
        1, "1", "ACTIVE")
    got = _run(_CLI_THEN_FRAMEWORK, KERAS_BACKEND="torch", KERAS_VIT_THREADS="0")
    assert got["OMP_WAIT_POLICY"] is None and got["OMP_NUM_THREADS"] is None


_LIBRARY_USE = """
import json, os, sys
import numpy as np
import torch
import keras
torch.set_num_threads(1)  # the user's own choice, before keras_vit
before = (dict(os.environ), torch.get_num_threads(), torch.get_num_interop_threads())
import keras_vit
model = keras_vit.ViT("mu/4", image_size=8, num_classes=3, num_layers=1, hidden_dim=16,
                      mlp_dim=16)
model.compile(keras.optimizers.AdamW(1e-3), "categorical_crossentropy")
model.train_on_batch(np.zeros((2, 8, 8, 3), "float32"), np.eye(3, dtype="float32")[[0, 1]])
after = (dict(os.environ), torch.get_num_threads(), torch.get_num_interop_threads())
changed = sorted(k for k in set(before[0]) | set(after[0]) if before[0].get(k) != after[0].get(k))
print(json.dumps({"changed": changed, "threads": [before[1:], after[1:]]}))
"""


def test_library_use_changes_no_process_wide_setting():
    got = _run(_LIBRARY_USE, KERAS_BACKEND=keras.backend.backend())
    assert got["changed"] == [] and got["threads"][0] == got["threads"][1]
    assert got["threads"][0][0] == 1
