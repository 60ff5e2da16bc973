"""Killed runs resume: a smoke run killed at every kind of moment ends with the weights of a run
that was never killed.

Runs on one backend (torch: no compilation, so the subprocesses stay cheap); the mechanism
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
from keras_vit.runner import pretrain  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A smoke run (3 epochs of 8 steps) that SIGKILLs itself at the moment argv[2] names:
# "batch:E:B" at the end of batch B of epoch E, "write:E:NAME" right after the `os.replace` that
# moves a file named NAME into place while epoch E ends ("*": any epoch), "never" runs to the end.
# A SIGKILL cannot be caught: the process dies there as under an outside kill (no cleanup runs).
SCRIPT = textwrap.dedent(
    """
    import importlib, os, signal, sys
    import keras

    out, (kind, when, where) = sys.argv[1], (sys.argv[2].split(":") + ["", ""])[:3]
    recipe = sys.argv[3] if len(sys.argv) > 3 else "pretrain"
    pretrain = importlib.import_module("keras_vit.runner." + recipe)
    epoch = [None]

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    class KillAt(keras.callbacks.Callback):
        def on_epoch_begin(self, e, logs=None):
            epoch[0] = e

        def on_train_batch_end(self, batch, logs=None):
            if kind == "batch" and epoch[0] == int(when) and batch == int(where):
                die()

    replace = os.replace

    def replace_then_die(src, dst):  # every artefact and backup file is moved in by os.replace
        replace(src, dst)
        if kind == "write" and os.path.basename(dst) == where and when in ("*", str(epoch[0])):
            die()

    os.replace = replace_then_die
    config = pretrain.get_config(smoke=True)
    config.update(out=out, verbose=0, validation_freq=100, jit_compile=False)
    if recipe == "pretrain_mae":  # 3 epochs of 4 steps, as `mae_config`
        config.update(epochs=3, steps=None, steps_per_epoch=4)
    pretrain.run(config, callbacks=[KillAt()])
    """
)


def config(out):
    """The script's config (the uninterrupted reference run)."""
    config = pretrain.get_config(smoke=True)
    config.update(out=out, verbose=0, validation_freq=100, jit_compile=False)
    return config


def mae_config(out):
    """The masked-autoencoder recipe's smoke config over 3 epochs (the MAE resume test)."""
    from keras_vit.runner import pretrain_mae

    config = pretrain_mae.get_config(smoke=True)
    config.update(out=out, verbose=0, validation_freq=100, jit_compile=False)
    config.update(epochs=3, steps=None, steps_per_epoch=4)
    return config


def run(out, kill, recipe="pretrain"):
    env = {**os.environ, "PYTHONPATH": ROOT, "KERAS_BACKEND": "torch", "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, out, kill, recipe], env=env, capture_output=True,
        text=True, timeout=400,
    )


# Each attempt resumes what the one before left (epochs counted from 0; the backup of epoch E is
# written as E ends and resumes at E + 1; "at epoch N/3" counts from 1):
KILLS = [
    # The first backup half done (weights moved in, no metadata yet): nothing to resume.
    ("write:0:latest.weights.h5", None),
    # The second backup, after its first move (the first backup's weights are now
    # previous.weights.h5, its metadata still training_metadata.json) and after the new
    # weights are moved in (latest.weights.h5 matches no metadata yet; the first backup is the
    # previous pair): both resume from the first backup, found by its recorded SHA-256.
    ("write:1:previous.weights.h5", None),
    ("write:1:latest.weights.h5", 2),
    # Mid-epoch after a complete backup and the checkpoints (the CSV log's rows are trimmed).
    ("batch:2:3", 2),
    # After training and the final model.keras, before metrics.json: resumes with nothing left
    # to train, then evaluates and writes the artefacts.
    ("write:*:model.keras", 3),
]


@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() != "torch", reason="runs once, on the torch backend")
def test_kills_at_every_kind_of_moment_resume_to_the_weights_of_an_uninterrupted_run(tmp_path):
    killed = str(tmp_path / "killed")
    for kill, resumed_at in KILLS:
        proc = run(killed, kill)
        assert proc.returncode == -signal.SIGKILL, (kill, proc.stderr[-2000:])
        if resumed_at is None:
            assert "Resuming" not in proc.stdout, (kill, proc.stdout)
        else:
            assert f"Resuming from the backup in {os.path.join(killed, 'backup')} at epoch " \
                f"{resumed_at}/3." in proc.stdout, (kill, proc.stdout)
        assert not os.path.exists(os.path.join(killed, "metrics.json")), kill
        assert os.path.exists(os.path.join(killed, "model.keras")) == (kill == KILLS[-1][0])
    proc = run(killed, "never")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Resuming from the backup" in proc.stdout, proc.stdout
    assert os.path.exists(os.path.join(killed, "metrics.json"))
    assert not os.path.exists(os.path.join(killed, "backup"))
    with open(os.path.join(killed, "log.csv")) as f:
        epochs = [line.split(",")[0] for line in f.read().splitlines()[1:]]
    assert epochs == ["0", "1", "2"]  # one row per epoch across all the resumed runs

    straight = str(tmp_path / "straight")
    pretrain.run(config(straight))  # in this process: the reference was never killed
    a = keras.saving.load_model(os.path.join(killed, "model.keras"), compile=False)
    b = keras.saving.load_model(os.path.join(straight, "model.keras"), compile=False)
    assert a.output_shape == (None, 10)
    for wa, wb in zip(a.weights, b.weights, strict=True):
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(wa), keras.ops.convert_to_numpy(wb), rtol=0, atol=1e-6,
            err_msg=wa.path,
        )


@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() != "torch", reason="runs once, on the torch backend")
def test_a_killed_masked_autoencoder_run_resumes_to_the_uninterrupted_weights(tmp_path):
    """`keras-vit pretrain-mae` (issue 44) resumes like every run: killed mid-epoch after a
    backup, rerun, it ends with the weights of a run never killed (the masks are drawn from the
    model's seed generator, whose state the backup restores)."""
    from keras_vit.runner import pretrain_mae

    killed = str(tmp_path / "killed")
    proc = run(killed, "batch:1:2", "pretrain_mae")
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert not os.path.exists(os.path.join(killed, "metrics.json"))
    proc = run(killed, "never", "pretrain_mae")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"Resuming from the backup in {os.path.join(killed, 'backup')} at epoch 2/3." \
        in proc.stdout, proc.stdout
    straight = str(tmp_path / "straight")
    pretrain_mae.run(mae_config(straight))
    for name in ("model.keras", "encoder.keras"):
        a = keras.saving.load_model(os.path.join(killed, name), compile=False)
        b = keras.saving.load_model(os.path.join(straight, name), compile=False)
        assert len(a.weights) == len(b.weights) > 0
        for wa, wb in zip(a.weights, b.weights, strict=True):
            np.testing.assert_allclose(
                keras.ops.convert_to_numpy(wa), keras.ops.convert_to_numpy(wb), rtol=0,
                atol=1e-6, err_msg=f"{name}: {wa.path}",
            )
