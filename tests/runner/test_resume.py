"""Killed runs resume: after the first epoch to the same weights; after random kills to the end.

Runs on one backend (torch: no compilation, so three subprocesses stay cheap); the mechanism
(BackupAndRestore + a data pipeline keyed by epoch) is backend-neutral. Exact equality is expected:
the pipeline re-creates the same batches from the resumed epoch, the optimizer state and step
counter are restored from the backup, and the smoke model has no dropout.
"""

import os
import signal
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

pytest.importorskip("tensorflow")

import keras_vit.layers  # noqa: E402,F401  (registers the layers for load_model)
import keras_vit.training.schedules  # noqa: E402,F401  (registers WarmupDecay)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    import keras
    from keras_vit.runner import pretrain

    out, kill = sys.argv[1], sys.argv[2] == "kill"

    class KillAfterFirstEpoch(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):  # runs after BackupAndRestore has saved
            if kill and epoch == 0:
                os.kill(os.getpid(), signal.SIGKILL)

    config = pretrain.get_config(smoke=True)
    config.update(out=out, verbose=0, validation_freq=100)
    pretrain.run(config, callbacks=[KillAfterFirstEpoch()])
    """
)


def run(out, mode):
    env = {**os.environ, "PYTHONPATH": ROOT, "KERAS_BACKEND": "torch", "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, out, mode], env=env, capture_output=True, text=True,
        timeout=400,
    )


@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() != "torch", reason="runs once, on the torch backend")
def test_killed_run_resumes_to_the_same_weights(tmp_path):
    killed = str(tmp_path / "killed")
    proc = run(killed, "kill")
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert os.path.exists(os.path.join(killed, "backup", "latest.weights.h5"))
    assert not os.path.exists(os.path.join(killed, "model.keras"))
    proc = run(killed, "resume")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Resuming from the backup" in proc.stdout
    straight = str(tmp_path / "straight")
    proc = run(straight, "resume")
    assert proc.returncode == 0, proc.stderr[-2000:]
    a = keras.saving.load_model(os.path.join(killed, "model.keras"), compile=False)
    b = keras.saving.load_model(os.path.join(straight, "model.keras"), compile=False)
    for wa, wb in zip(a.weights, b.weights, strict=True):
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(wa), keras.ops.convert_to_numpy(wb), rtol=0, atol=1e-6,
            err_msg=wa.path,
        )
    with open(os.path.join(killed, "log.csv")) as f:
        assert len(f.read().strip().splitlines()) == 4  # header + epochs 1, 2, 3 across both runs


KILL_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    import keras
    from keras_vit.runner import pretrain

    class Slow(keras.callbacks.Callback):  # spreads the run so that kills land everywhere
        def on_train_begin(self, logs=None):
            print("TRAINING", flush=True)

        def on_train_batch_end(self, batch, logs=None):
            time.sleep(0.1)

    replace = os.replace

    def slow_replace(src, dst):  # widens the backup writes' windows between file moves
        time.sleep(0.05)
        replace(src, dst)

    os.replace = slow_replace
    config = pretrain.get_config(smoke=True)
    config.update(out=sys.argv[1], verbose=0, validation_freq=1, jit_compile=False)
    pretrain.run(config, callbacks=[Slow()])
    """
)


@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() != "torch", reason="runs once, on the torch backend")
def test_random_kills_always_resume_to_a_finished_model(tmp_path):
    """SIGKILLs a smoke run up to 10 times at random moments (fixed seed): it always finishes.

    Each batch sleeps 0.1 s (an epoch takes about a second), and each attempt is killed within
    1.2 s of the start of training, so most attempts die mid-epoch or mid-write whatever the
    machine's speed.
    """
    out = str(tmp_path / "run")
    env = {**os.environ, "PYTHONPATH": ROOT, "KERAS_BACKEND": "torch", "TF_CPP_MIN_LOG_LEVEL": "3"}
    rng = np.random.default_rng(0)
    kills = 0
    for _ in range(10):
        proc = subprocess.Popen(
            [sys.executable, "-c", KILL_SCRIPT, out], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True,
        )
        line = proc.stdout.readline()  # "TRAINING", or "" if it ended
        if "TRAINING" in line:
            try:
                proc.wait(timeout=float(rng.uniform(0.05, 1.2)))
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                kills += 1
        proc.wait(timeout=400)
        proc.stdout.close()
        assert proc.returncode in (0, -signal.SIGKILL), proc.returncode
        if proc.returncode == 0:
            break
    assert kills >= 4  # the kills did interrupt training
    if not os.path.exists(os.path.join(out, "metrics.json")):
        proc = subprocess.run(
            [sys.executable, "-c", KILL_SCRIPT, out], env=env, capture_output=True, text=True,
            timeout=400,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
    model = keras.saving.load_model(os.path.join(out, "model.keras"), compile=False)
    assert model.output_shape == (None, 10)
    with open(os.path.join(out, "log.csv")) as f:
        epochs = [line.split(",")[0] for line in f.read().splitlines()[1:]]
    assert epochs == ["0", "1", "2"]  # one row per epoch across all the resumed runs
    assert not os.path.exists(os.path.join(out, "backup"))
