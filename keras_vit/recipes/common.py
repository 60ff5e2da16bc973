"""Shared recipe runner: data, model, optimizer, callbacks, `model.fit`, artefacts.

Everything trains through `model.fit`. Artefacts in `out`:
    backup/            `keras.callbacks.BackupAndRestore` state (removed when training ends);
                       rerunning the same command after a kill resumes at the last finished epoch
    checkpoints/last.keras, checkpoints/best.keras (best validation accuracy)
    logs/              TensorBoard
    log.csv            per-epoch metrics (appended across resumes)
    model.keras        the trained model
    metrics.json       config, final test metrics, per-epoch history, throughput
"""

import copy
import dataclasses
import json
import logging
import math
import os
import time

import keras
import numpy as np

from keras_vit.training import augment as augment_lib
from keras_vit.training import optimizers as optimizers_lib
from keras_vit.training.distribution import distribution_scope
from keras_vit.training.schedules import WarmupDecay

logger = logging.getLogger("keras_vit.recipes")

MODEL_SIZE_KEYS = ("num_layers", "hidden_dim", "mlp_dim", "num_heads", "patch_size")


def merge(config, overrides):
    """Returns a copy of `config` with the non-None `overrides` applied (unknown keys raise)."""
    config = copy.deepcopy(config)
    for key, value in overrides.items():
        if value is None:
            continue
        if key not in config:
            raise ValueError(f"Unknown config key {key!r}. Known: {sorted(config)}")
        config[key] = value
    return config


def _data():
    from keras_vit.training import data

    return data


def backup_epoch(backup_dir):
    """The epoch a `BackupAndRestore` backup in `backup_dir` resumes at (0 without one)."""
    path = os.path.join(backup_dir, "training_metadata.json")
    if not os.path.exists(path) or not os.path.exists(
        os.path.join(backup_dir, "latest.weights.h5")
    ):
        return 0
    with open(path) as f:
        return int(json.load(f).get("epoch", 0))


class ThroughputLogger(keras.callbacks.Callback):
    """Measures training images per second per epoch (the first epoch includes compilation)."""

    def __init__(self, batch_size, steps_per_epoch):
        super().__init__()
        self.batch_size = batch_size
        self.steps_per_epoch = steps_per_epoch
        self.epoch_seconds = []

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self._end = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        # Stop at the last training batch: validation time is not training throughput.
        self.epoch_seconds.append(getattr(self, "_end", time.perf_counter()) - self._start)

    def summary(self):
        steady = self.epoch_seconds[1:] or self.epoch_seconds
        seconds = float(np.mean(steady)) if steady else float("nan")
        return {
            "epoch_seconds": [round(s, 3) for s in self.epoch_seconds],
            "steps_per_second": round(self.steps_per_epoch / seconds, 3),
            "images_per_second": round(self.steps_per_epoch * self.batch_size / seconds, 2),
            "measured_on": "epochs after the first" if len(self.epoch_seconds) > 1 else "epoch 1",
        }


def plan_steps(config, num_train):
    """Returns `(epochs, steps_per_epoch, total_steps, warmup_steps)` for a config."""
    data = _data()
    per_epoch = data.steps_per_epoch_for(num_train, config["batch_size"])
    if config.get("steps_per_epoch"):
        per_epoch = min(per_epoch, int(config["steps_per_epoch"]))
    if config.get("steps"):
        total = int(config["steps"])
        per_epoch = min(per_epoch, total)
        epochs = data.epochs_for_steps(total, per_epoch)
        total = epochs * per_epoch
    else:
        epochs = int(config["epochs"])
        total = epochs * per_epoch
    warmup = int(config["warmup_steps"])
    if warmup >= total:
        warmup = total // 10
        logger.info("warmup_steps >= total steps (%d): using %d warm-up steps.", total, warmup)
    return epochs, per_epoch, total, warmup


def load_data(config):
    """Loads the train and eval `Source`s of a config."""
    data = _data()
    common = dict(
        data_dir=config["data_dir"],
        num_channels=config["num_channels"],
        on_corrupt=config["on_corrupt"],
        download=config["download"],
    )
    train = data.load_source(config["dataset"], "train", **common)
    eval_split = config["eval_split"] or data.default_eval_split(config["dataset"], config["data_dir"])
    evaluation = data.load_source(config["dataset"], eval_split, **common)
    return train, evaluation


def build_optimizer(config, total_steps, warmup_steps):
    """The config's optimizer with its warm-up + decay `WarmupDecay` schedule."""
    schedule = WarmupDecay(
        float(config["learning_rate"]),
        total_steps=total_steps,
        warmup_steps=warmup_steps,
        decay=config["decay"],
    )
    return optimizers_lib.build_optimizer(
        config["optimizer"],
        schedule,
        weight_decay=config["weight_decay"],
        global_clipnorm=config["global_clipnorm"],
        gradient_accumulation_steps=config["gradient_accumulation_steps"],
    )


def compile_model(model, config, total_steps, warmup_steps):
    model.compile(
        optimizer=build_optimizer(config, total_steps, warmup_steps),
        loss=optimizers_lib.build_loss(config["label_smoothing"]),
        metrics=[keras.metrics.CategoricalAccuracy(name="accuracy")],
        jit_compile=config.get("jit_compile", "auto"),
    )


@dataclasses.dataclass
class RunSetup:
    """What a recipe run needs before building its model (see `prepare_run`).

    Attributes:
        out: str. The output folder (with `checkpoints/` created).
        train_source, eval_source: the data `Source`s.
        epochs, steps_per_epoch, total_steps, warmup_steps: the step plan (`plan_steps`).
        backup_dir: str. The `BackupAndRestore` folder.
        start_epoch: int. The epoch a backup resumes at (0 for a fresh run).
        train_ds, eval_ds: the `tf.data` pipelines (the training one starts at `start_epoch`).
        throughput: a `ThroughputLogger` for the run's callbacks.
    """

    out: str
    train_source: object
    eval_source: object
    epochs: int
    steps_per_epoch: int
    total_steps: int
    warmup_steps: int
    backup_dir: str
    start_epoch: int
    train_ds: object
    eval_ds: object
    throughput: ThroughputLogger

    def base_metrics(self, recipe, config):
        """The metrics.json fields every recipe writes (run, data and step plan)."""
        return {
            "recipe": recipe,
            "backend": keras.backend.backend(),
            "dataset": config["dataset"],
            "num_train_examples": self.train_source.num_examples,
            "num_eval_examples": self.eval_source.num_examples,
            "epochs": self.epochs,
            "steps_per_epoch": self.steps_per_epoch,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
            "resumed_at_epoch": self.start_epoch,
        }


def prepare_run(config):
    """Sets up a recipe run: seed, dtype policy, data, step plan, resume point, pipelines.

    Creates `config["out"]/checkpoints`, seeds Keras (`config["seed"]`), sets the mixed-precision
    policy if any, loads the train/eval data, plans the steps, finds the epoch a backup in
    `out/backup` resumes at (printing it), and builds the training pipeline from that epoch (crop,
    flip, `config["augment"]`) and the evaluation pipeline. Shared by `run_training` and the MPP
    recipe.

    Returns:
        A `RunSetup`.
    """
    data = _data()
    out = config["out"]
    os.makedirs(os.path.join(out, "checkpoints"), exist_ok=True)
    keras.utils.set_random_seed(config["seed"])
    if config["mixed_precision"]:
        keras.config.set_dtype_policy(config["mixed_precision"])
    train_source, eval_source = load_data(config)
    epochs, per_epoch, total, warmup = plan_steps(config, train_source.num_examples)
    backup_dir = os.path.join(out, "backup")
    start_epoch = backup_epoch(backup_dir)
    if start_epoch:
        print(f"Resuming from the backup in {backup_dir} at epoch {start_epoch + 1}/{epochs}.")
    train_ds = data.train_pipeline(
        train_source,
        image_size=config["image_size"],
        batch_size=config["batch_size"],
        epochs=epochs,
        steps_per_epoch=per_epoch,
        start_epoch=start_epoch,
        seed=config["seed"],
        crop_scale=config["crop_scale"],
        crop_ratio=config["crop_ratio"],
        rotation=config["rotation"],
        flip=config["flip"],
        augmenters=augment_lib.build_augmenters(config["augment"], seed=config["seed"]),
    )
    eval_ds = data.eval_pipeline(
        eval_source, image_size=config["image_size"], batch_size=config["eval_batch_size"]
    )
    return RunSetup(
        out=out,
        train_source=train_source,
        eval_source=eval_source,
        epochs=epochs,
        steps_per_epoch=per_epoch,
        total_steps=total,
        warmup_steps=warmup,
        backup_dir=backup_dir,
        start_epoch=start_epoch,
        train_ds=train_ds,
        eval_ds=eval_ds,
        throughput=ThroughputLogger(config["batch_size"], per_epoch),
    )


def run_training(config, build_model, recipe, callbacks=()):
    """Trains `build_model(num_classes, config)` on `config` with `model.fit`; writes artefacts.

    Args:
        config: dict (see `keras_vit.recipes.pretrain.get_config`).
        build_model: callable `(num_classes, config) -> (keras.Model, info dict)`, called inside
            the distribution scope.
        recipe: str. Name recorded in metrics.json.
        callbacks: extra Keras callbacks, run after the recipe's own.

    Returns:
        The metrics dict also written to `out/metrics.json`.
    """
    setup = prepare_run(config)
    out = setup.out
    with distribution_scope(config["distribution"]):
        model, model_info = build_model(setup.train_source.num_classes, config)
        compile_model(model, config, setup.total_steps, setup.warmup_steps)
        callbacks = [
            keras.callbacks.BackupAndRestore(setup.backup_dir),
            keras.callbacks.ModelCheckpoint(os.path.join(out, "checkpoints", "last.keras")),
            keras.callbacks.ModelCheckpoint(
                os.path.join(out, "checkpoints", "best.keras"),
                monitor="val_accuracy",
                mode="max",
                save_best_only=True,
            ),
            keras.callbacks.TensorBoard(os.path.join(out, "logs")),
            keras.callbacks.CSVLogger(os.path.join(out, "log.csv"), append=True),
            setup.throughput,
            *callbacks,
        ]
        history = model.fit(
            setup.train_ds,
            epochs=setup.epochs,
            steps_per_epoch=setup.steps_per_epoch,
            validation_data=setup.eval_ds,
            validation_freq=config["validation_freq"],
            callbacks=callbacks,
            verbose=config["verbose"],
        )
        test_loss, test_accuracy = model.evaluate(setup.eval_ds, verbose=0)
    model.save(os.path.join(out, "model.keras"))
    metrics = {
        **setup.base_metrics(recipe, config),
        "num_classes": setup.train_source.num_classes,
        "num_params": int(model.count_params()),
        "test_loss": float(test_loss),
        "test_accuracy": float(test_accuracy),
        "history": {k: [float(v) for v in vs] for k, vs in history.history.items()},
        "throughput": setup.throughput.summary(),
        "model": model_info,
        "config": _jsonable(config),
    }
    with open(os.path.join(out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)
    print(
        f"{recipe}: test accuracy {test_accuracy:.4f} on {setup.eval_source.num_examples} "
        f"examples; artefacts in {out}"
    )
    return metrics


def _jsonable(value):
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


def vit_kwargs(config):
    """Builder keyword arguments from a config's model fields."""
    kwargs = dict(config["model_overrides"] or {})
    kwargs.update(
        image_size=config["image_size"],
        num_channels=config["num_channels"],
        dropout_rate=config["dropout_rate"],
        remat=config["remat"],
        pooling=config["pooling"],
        representation_size=config["representation_size"],
    )
    return kwargs

