"""The recipe runner (`keras_vit.runner`): checks, output folder, atomic backups, resume."""

import json
import os
import subprocess
import sys
import warnings

import keras
import numpy as np
import pytest

pytest.importorskip("tensorflow")

from keras_vit.runner import backup as backup_lib  # noqa: E402
from keras_vit.runner import fewshot, pretrain  # noqa: E402
from keras_vit.runner.callbacks import ThroughputLogger, training_callbacks  # noqa: E402
from keras_vit.runner.config import check_config  # noqa: E402
from keras_vit.runner.output import prepare_out  # noqa: E402
from keras_vit.runner.setup import RunSetup  # noqa: E402


class Interrupt(Exception):
    pass


class InterruptAfter(keras.callbacks.Callback):
    """Stops training after `epochs` epochs (after the backup of that epoch is written)."""

    def __init__(self, epochs):
        super().__init__()
        self.epochs = epochs

    def on_epoch_end(self, epoch, logs=None):
        if epoch + 1 == self.epochs:
            raise Interrupt()


def smoke_config(out, **overrides):
    config = pretrain.get_config(smoke=True)
    config.update(out=str(out), verbose=0, jit_compile=False, **overrides)
    return config


def csv_epochs(out):
    with open(os.path.join(out, "log.csv")) as f:
        return [int(line.split(",")[0]) for line in f.read().splitlines()[1:]]


def test_damaged_backup_resumes_from_the_previous_one_then_refuses_to_overwrite(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(Interrupt):
        pretrain.run(smoke_config(out), callbacks=[InterruptAfter(2)])
    latest = out / "backup" / "latest.weights.h5"
    assert latest.exists() and (out / "backup" / "previous.weights.h5").exists()
    assert not (out / "model.keras").exists()
    latest.write_bytes(b"")  # a backup write cut short
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        metrics = pretrain.run(smoke_config(out))
    messages = [str(w.message) for w in caught]
    assert any(str(latest) in m and "resuming from" in m for m in messages), messages
    assert not any("shuffle=True" in m for m in messages), messages  # tf.data: shuffle=False
    assert metrics["resumed_at_epoch"] == 1
    assert csv_epochs(out) == [0, 1, 2]
    assert not (out / "backup").exists()
    keras.saving.load_model(out / "model.keras")

    # A finished run is never replaced silently ...
    with pytest.raises(FileExistsError, match="--overwrite") as error:
        pretrain.run(smoke_config(out))
    assert str(out) in str(error.value)
    # ... and with overwrite=True its artefacts are removed first (a fresh log.csv).
    metrics = pretrain.run(smoke_config(out, overwrite=True, epochs=1, validation_freq=1))
    assert metrics["resumed_at_epoch"] == 0 and csv_epochs(out) == [0]


def test_atomic_backup_keeps_a_consistent_pair_through_every_save_step(tmp_path, monkeypatch):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile("adam", "mse")
    backup = str(tmp_path / "backup")
    callback = backup_lib.AtomicBackupAndRestore(backup)
    callback.set_model(model)
    kernel = model.layers[0].kernel
    real_on_epoch_end = callback.on_epoch_end

    def on_epoch_end(epoch):  # different weights at every epoch
        kernel.assign(np.full((3, 2), float(epoch), "float32"))
        real_on_epoch_end(epoch)

    callback.on_epoch_end = on_epoch_end
    for epoch in range(2):
        callback.on_epoch_end(epoch)
    assert backup_lib.find_backup(backup) == (2, os.path.join(backup, "latest.weights.h5"))
    # Kill the third save after each of its file moves: a consistent backup always remains.
    real_replace = os.replace
    for stop in range(4):
        calls = []

        def replace(src, dst, calls=calls, stop=stop):
            if len(calls) == stop:
                raise KeyboardInterrupt  # the process dies here
            calls.append(dst)
            real_replace(src, dst)

        monkeypatch.setattr(os, "replace", replace)
        with pytest.raises(KeyboardInterrupt):
            callback.on_epoch_end(2)
        monkeypatch.setattr(os, "replace", real_replace)
        epoch, weights = backup_lib.find_backup(backup)
        assert epoch in (2, 3) and os.path.getsize(weights) > 0
        # Restore the two-epoch state for the next interruption point.
        callback.on_epoch_end(1)
    callback.on_epoch_end(0)
    callback.on_epoch_end(1)
    with open(os.path.join(backup, "training_metadata.json"), "w") as f:
        f.write("{half")
    with pytest.warns(UserWarning, match="training_metadata.json"):
        assert backup_lib.find_backup(backup) == (1, os.path.join(backup, "previous.weights.h5"))


def test_backup_damaged_beyond_repair_restarts_with_a_warning(tmp_path):
    backup = tmp_path / "backup"
    backup.mkdir()
    (backup / "latest.weights.h5").write_bytes(b"\x89HDF")
    (backup / "training_metadata.json").write_text(json.dumps({"epoch": 1, "weights_sha256": "0"}))
    with pytest.warns(UserWarning, match="restarting"):
        assert backup_lib.backup_epoch(str(backup)) == 0


@pytest.mark.parametrize(
    "overrides, match",
    [
        (dict(steps=10, epochs=2), "either steps .--steps. or epochs .--epochs."),
        (dict(batch_size=0), r"batch_size \(--batch-size\) must be a positive integer.*0"),
        (dict(epochs=1.5), r"epochs \(--epochs\) must be a positive integer.*1.5"),
        (dict(steps_per_epoch=-1), "steps_per_epoch"),
        (dict(eval_batch_size=0), "eval_batch_size"),
        (dict(steps=10, epochs=None, warmup_steps=10), r"warmup_steps \(10.*\(10\)"),
        (dict(learning_rate=0.0), r"learning_rate \(--lr\) must be > 0"),
        (dict(backup_every=0), r"backup_every \(config key\) must be a positive integer"),
        (dict(dropout_rate=1.0), r"dropout_rate \(--dropout\) must be in \[0, 1\)"),
        (dict(label_smoothing=1.0), r"label_smoothing .* \[0, 1\)"),
        (dict(dropout_rate=-0.1), r"dropout_rate .* \[0, 1\)"),
        (dict(steps_per_execution=0), r"steps_per_execution \(--steps-per-execution\)"),
    ],
)
def test_bad_values_fail_before_loading_data(tmp_path, overrides, match):
    # A dataset that does not exist: the check must come first.
    config = smoke_config(tmp_path / "x", dataset="folder:/does/not/exist", **overrides)
    with pytest.raises(ValueError, match=match):
        pretrain.run(config)
    assert not (tmp_path / "x").exists()


def test_warmup_longer_than_training_names_both_numbers(tmp_path):
    config = smoke_config(tmp_path / "x", warmup_steps=24)  # 3 epochs x 8 steps
    with pytest.raises(ValueError, match=r"warmup_steps \(24.*\(24\)"):
        pretrain.run(config)


def test_bad_out_folders(tmp_path):
    file = tmp_path / "file.txt"
    file.write_text("x")
    with pytest.raises(NotADirectoryError, match="file.txt"):
        prepare_out({"out": str(file)})
    with pytest.raises(NotADirectoryError, match="file.txt"):
        prepare_out({"out": str(file / "run")})
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as root: permissions are not enforced")
        with pytest.raises(PermissionError, match="locked"):
            prepare_out({"out": str(locked / "run")})
    finally:
        locked.chmod(0o700)


def test_interrupted_run_is_not_finished(tmp_path):
    (tmp_path / "backup").mkdir()
    (tmp_path / "model.keras").write_bytes(b"x")  # saved, killed before metrics.json
    assert prepare_out({"out": str(tmp_path)}) == str(tmp_path)
    (tmp_path / "metrics.json").write_text("{}")
    with pytest.raises(FileExistsError):
        prepare_out({"out": str(tmp_path)})


def test_fewshot_refuses_a_finished_out(tmp_path):
    (tmp_path / "metrics.json").write_text("{}")
    config = fewshot.get_config(smoke=True)
    config.update(out=str(tmp_path), model_path=str(tmp_path / "missing.keras"))
    with pytest.raises(FileExistsError, match="--overwrite"):
        fewshot.run(config)


def test_one_smoke_shrink_for_every_recipe():
    from keras_vit.runner import finetune, pretrain_mae, pretrain_mpp, quickstart

    for module in (pretrain, finetune, pretrain_mpp, pretrain_mae, quickstart):
        config = module.get_config(smoke=True)
        assert config["model"] == "mu/4" and config["image_size"] == 16
        assert config["overwrite"] is False
        check_config(config)
        check_config(module.get_config())
    assert pretrain.get_config("paper")["overwrite"] is False
    with pytest.raises(ValueError, match="preset"):
        pretrain.get_config("nope")


def test_trim_csv_log(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("epoch,loss\n0,1.0\n1,0.9\n2,0.8\n")
    backup_lib.trim_csv_log(str(path), 2)
    assert path.read_text() == "epoch,loss\n0,1.0\n1,0.9\n"
    backup_lib.trim_csv_log(str(path), 0)
    assert not path.exists()
    np.testing.assert_equal(backup_lib.backup_epoch(str(tmp_path / "none")), 0)


def test_backup_every_k_epochs_and_after_the_last(tmp_path, monkeypatch):
    """`backup_every=k` backs up after epochs k, 2k, ... and always after the run's last epoch."""
    from keras_vit.runner.backup import AtomicBackupAndRestore

    saved = []
    backup = AtomicBackupAndRestore(str(tmp_path / "backup"), every=3, epochs=7)
    monkeypatch.setattr(backup, "_save_model", lambda: saved.append(backup._current_epoch))
    for epoch in range(7):
        backup.on_epoch_end(epoch)
    assert saved == [3, 6, 7]


def test_a_backup_carries_the_random_states_and_restores_only_matching_ones(tmp_path):
    """The seed generators' states (dropout, MAE masking), which `save_weights` leaves out, go
    into the backup's metadata and come back on resume; an older backup without them, or one
    of another model, leaves them alone (the second with a warning)."""
    from keras_vit.models.vit import ViT

    model = ViT("mu/4", image_size=16, num_classes=3, num_layers=1, dropout_rate=0.1)
    model.compile("sgd", "categorical_crossentropy")
    states = backup_lib.random_states(model)
    assert states and all(v.path.endswith("seed_generator_state") for v in states)
    assert not {id(v) for v in states} & {id(v) for v in model.weights}
    for i, v in enumerate(states):
        v.assign(np.full(v.shape, 10 + i, "int32"))
    backup = backup_lib.AtomicBackupAndRestore(str(tmp_path / "backup"))
    backup.set_model(model)
    backup._current_epoch = 1
    backup._write_backup()
    with open(tmp_path / "backup" / "training_metadata.json") as f:
        recorded = json.load(f)["random_states"]
    assert recorded == [[10 + i] * v.shape[0] for i, v in enumerate(states)]

    def values():
        return [keras.ops.convert_to_numpy(v).tolist() for v in states]

    for v in states:
        v.assign(np.zeros(v.shape, "int32"))
    backup.on_train_begin()
    assert values() == recorded and model._initial_epoch == 1
    zeros = [[0] * v.shape[0] for v in states]
    for v in states:
        v.assign(np.zeros(v.shape, "int32"))
    backup_lib._restore_random_states(model, None)  # a backup from before they were recorded
    assert values() == zeros
    with pytest.warns(UserWarning, match="random-number states"):
        backup_lib._restore_random_states(model, recorded[:-1] + [[1, 2, 3]])
    assert values() == zeros


@pytest.mark.slow
def test_a_recipe_run_prints_no_spurious_warning(tmp_path):
    """A smoke run through the CLI, in a fresh process: no Python warning, no autograph notice."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": root, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(
        [sys.executable, "-m", "keras_vit", "pretrain", "--smoke", "--verbose", "0",
         "--out", str(tmp_path / "run")],
        env=env, capture_output=True, text=True, timeout=600,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    for notice in ("Warning:", "Unable to locate the source code", "will be ignored"):
        assert notice not in output, output


def test_runner_callbacks_let_fit_dispatch_asynchronously(tmp_path):
    """No per-step sync from the runner's callbacks: Keras runs their batch hooks off-thread."""
    setup = RunSetup(
        out=str(tmp_path), train_source=None, eval_source=None, epochs=2, steps_per_epoch=4,
        total_steps=8, warmup_steps=0, backup_dir=str(tmp_path / "backup"), start_epoch=0,
        train_ds=None, eval_ds=None, throughput=ThroughputLogger(8, 4),
    )
    config = smoke_config(tmp_path)
    callbacks = training_callbacks(setup, config, validation=True)
    assert len(callbacks) == 7 and all(c.async_safe for c in callbacks)
    dispatch = keras.callbacks.CallbackList(callbacks, add_progbar=True, add_history=True)
    # Keras' rule: asynchronous only where the backend is thread safe (not TensorFlow).
    assert dispatch._async_train == (keras.backend.backend() != "tensorflow")


def test_backup_of_a_lora_model_restores_frozen_kernels_and_adapters_exactly(tmp_path):
    # Keras' save_weights writes a LoRA layer's merged kernel and its load_weights zeroes the
    # adapters: same outputs, but the adapters of a resumed run would no longer fit the base
    # model. The backups keep W, A and B as they are.
    from keras_vit.models.vit import ViT
    from keras_vit.training.lora import enable_lora

    def lora_model():
        model = ViT("mu/8", image_size=16, num_classes=3)
        model.set_weights([np.full(w.shape, 0.01, "float32") for w in model.weights])
        model = enable_lora(model, rank=2)
        model.compile("sgd", "mse")
        return model

    model = lora_model()
    rng = np.random.default_rng(0)
    for w in model.weights:
        if "lora_kernel" in w.path:
            w.assign(rng.normal(0, 0.1, tuple(w.shape)).astype("float32"))
    callback = backup_lib.AtomicBackupAndRestore(str(tmp_path / "backup"))
    callback.set_model(model)
    callback.on_epoch_end(0)
    resumed = lora_model()
    callback = backup_lib.AtomicBackupAndRestore(str(tmp_path / "backup"))
    callback.set_model(resumed)
    callback.on_train_begin()
    for w, v in zip(resumed.weights, model.weights, strict=True):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(w), keras.ops.convert_to_numpy(v))
    query = resumed.get_layer("encoderblock_0").attention.query_dense
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(query._kernel), np.float32(0.01))
