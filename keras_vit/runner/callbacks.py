"""The runner's Keras callbacks: a stop on a non-finite loss, CSV log, resumable backup,
checkpoints, TensorBoard, throughput."""

import os
import time

import keras
import numpy as np

from keras_vit.runner.backup import AtomicBackupAndRestore, AtomicModelCheckpoint
from keras_vit.runner.resume import changes_since, run_config
from keras_vit.training import multihost


class ThroughputLogger(keras.callbacks.Callback):
    """Measures training images per second per epoch (the first epoch includes compilation)."""

    def __init__(self, batch_size, steps_per_epoch):
        super().__init__()
        self.batch_size = batch_size
        self.steps_per_epoch = steps_per_epoch
        self.epoch_seconds = []

    def on_epoch_begin(self, epoch, logs=None):
        self._start = self._end = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        # Under asynchronous dispatch (see `training_callbacks`) this runs on a worker thread
        # once the batch's logs are computed, possibly out of order: keep the latest time.
        self._end = max(time.perf_counter(), getattr(self, "_end", 0.0))

    def on_epoch_end(self, epoch, logs=None):
        # Stop at the last training batch: validation time is not training throughput.
        self.epoch_seconds.append(getattr(self, "_end", time.perf_counter()) - self._start)

    def summary(self):
        steady = self.epoch_seconds[1:] or self.epoch_seconds
        if not steady:
            return {"epoch_seconds": [], "measured_on": "no epoch trained in this process"}
        seconds = float(np.mean(steady))
        return {
            "epoch_seconds": [round(s, 3) for s in self.epoch_seconds],
            "steps_per_second": round(self.steps_per_epoch / seconds, 3),
            "images_per_second": round(self.steps_per_epoch * self.batch_size / seconds, 2),
            "measured_on": "epochs after the first" if len(self.epoch_seconds) > 1 else "epoch 1",
        }



class TrainingDiverged(ValueError):
    """The training loss became non-finite (NaN or infinite): the run stopped, nothing was saved
    as its result."""


class StopOnNonFiniteLoss(keras.callbacks.Callback):
    """Stops a run whose training loss becomes NaN or infinite, by raising `TrainingDiverged`.

    Unlike Keras' `TerminateOnNaN`, which ends `fit` as if training were done (so a run would
    evaluate, save `model.keras` and report `loss: nan` as its result), the error ends the run:
    nothing is claimed as a result. It is the runner's first callback, so the epoch's CSV row,
    backup and checkpoints are never written from diverged weights.

    Args:
        settings: dict of the settings to name in the message (`{"learning_rate": 1e30}`).
    """

    def __init__(self, settings=None):
        super().__init__()
        self.settings = dict(settings or {})
        self._epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        self._check((logs or {}).get("loss"), f"epoch {self._epoch + 1}, batch {batch + 1}")

    def on_epoch_end(self, epoch, logs=None):
        self._check((logs or {}).get("loss"), f"epoch {epoch + 1}")

    def _check(self, loss, where):
        if loss is None:
            return
        try:
            value = float(np.asarray(loss))
        except (TypeError, ValueError):
            return
        if np.isfinite(value):
            return
        from keras_vit.runner.flag_names import flag_or_key

        named = ", ".join(f"{k}={v!r} ({flag_or_key(k)})" for k, v in self.settings.items())
        raise TrainingDiverged(
            f"Training diverged: the loss became {value} at {where}. The run stopped; nothing "
            "was saved as its result (no model.keras, no metrics.json). Lower the learning rate "
            f"or the regularisation ({named}), then rerun with --overwrite to start again."
        )


def training_callbacks(setup, config, validation):
    """The runner's callbacks: CSV log, backup, checkpoints, TensorBoard, throughput.

    With several processes, the CSV log and TensorBoard run in process 0 only; the backup and
    the checkpoints run everywhere (saving may gather sharded weights) and write in process 0.
    """
    out = setup.out
    chief = multihost.is_chief()
    # First: an epoch whose loss is NaN ends the run before its row, backup or checkpoint.
    named = ("learning_rate", "weight_decay", "distillation_tau")
    callbacks = [StopOnNonFiniteLoss({k: config[k] for k in named if config.get(k) is not None})]
    if chief:
        # The CSV row of an epoch is written before its backup; a resume trims later rows.
        callbacks.append(keras.callbacks.CSVLogger(os.path.join(out, "log.csv"), append=True))
    callbacks.append(
        AtomicBackupAndRestore(
            setup.backup_dir, every=config.get("backup_every", 1), epochs=setup.epochs,
            run_config=run_config(config, setup.splits), describe_changes=changes_since,
        )  # fmt: skip
    )
    if config.get("checkpoints", True):
        if chief:
            os.makedirs(os.path.join(out, "checkpoints"), exist_ok=True)
        callbacks.append(AtomicModelCheckpoint(os.path.join(out, "checkpoints", "last.keras")))
        if validation:
            callbacks.append(
                AtomicModelCheckpoint(
                    os.path.join(out, "checkpoints", "best.keras"),
                    monitor="val_accuracy",
                    mode="max",
                    save_best_only=True,
                )
            )
    if config.get("tensorboard", True) and chief:
        # The train graph exists on TensorFlow only; elsewhere TensorBoard's first batch hook
        # would open its file writer on Keras' callback thread while JAX runs the next step,
        # which made JAX fail ("Buffer has been deleted or donated") in 1 of 4 runs.
        graph = keras.backend.backend() == "tensorflow"
        callbacks.append(keras.callbacks.TensorBoard(os.path.join(out, "logs"), write_graph=graph))
    callbacks.append(setup.throughput)
    # Every per-batch hook above is a no-op or a time stamp (they save and log per epoch), so
    # Keras may run them on a worker thread: otherwise `fit` converts each step's loss to a
    # Python float before starting the next step, a device sync per step that leaves a GPU
    # idle while Python prepares the next one. (Keras' own rule: JAX and PyTorch only.)
    for callback in callbacks:
        callback.async_safe = True
    return callbacks

