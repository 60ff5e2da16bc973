"""The runner's Keras callbacks: CSV log, resumable backup, checkpoints, TensorBoard, throughput."""

import os
import time

import keras
import numpy as np

from keras_vit.runner.backup import AtomicBackupAndRestore, AtomicModelCheckpoint
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



def training_callbacks(setup, config, validation):
    """The runner's callbacks: CSV log, backup, checkpoints, TensorBoard, throughput.

    With several processes, the CSV log and TensorBoard run in process 0 only; the backup and
    the checkpoints run everywhere (saving may gather sharded weights) and write in process 0.
    """
    out = setup.out
    chief = multihost.is_chief()
    callbacks = []
    if chief:
        # The CSV row of an epoch is written before its backup; a resume trims later rows.
        callbacks.append(keras.callbacks.CSVLogger(os.path.join(out, "log.csv"), append=True))
    callbacks.append(
        AtomicBackupAndRestore(
            setup.backup_dir, every=config.get("backup_every", 1), epochs=setup.epochs
        )
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

