"""The recipe runner: one code path for every training recipe (and the few-shot evaluation).

`run_training(config, build_model, recipe)` checks the config and the output folder, loads the
data, plans the steps, builds and compiles the model, trains with `model.fit`, evaluates, saves
and writes metrics.json. A recipe module only holds its config (paper and digits numbers), its
model builder and what differs (`compile_model` / `finish` hooks, e.g. masked patch prediction's
loss and encoder artefact). Artefacts in `out`:
    backup/            the resume state (`AtomicBackupAndRestore`: written atomically, the previous
                       good backup kept); rerunning the same command after a kill resumes at the
                       last finished epoch; removed once the run has finished
    checkpoints/last.keras, checkpoints/best.keras (best validation accuracy); `checkpoints=False`
                       turns them off
    logs/              TensorBoard (`tensorboard=False` turns it off)
    log.csv            per-epoch metrics (one row per epoch, across resumes)
    model.keras        the trained model
    metrics.json       config, final test metrics, per-epoch history, throughput (written last:
                       its presence marks a finished run)

Nothing is replaced unless asked: the `out` of a finished run raises `FileExistsError` unless
`overwrite=True` (which first removes the old artefacts); an interrupted run resumes.

Several processes (machines) train one model on JAX when the config (`job_addresses`,
`num_processes`, `process_id`, `multi_host`) or Keras' `KERAS_DISTRIBUTION_*` variables ask for it
(`keras_vit.training.multihost`): every process runs the same command, `batch_size` is the global
batch (Keras gives each process its slice), process 0 alone writes into `out`, and every process
must read the same `out/backup` to resume (a shared folder).
"""

import copy
import dataclasses
import logging
import math
import numbers
import os
import shutil
import time

import keras
import numpy as np

from keras_vit.recipes.backup import (
    AtomicBackupAndRestore,
    AtomicModelCheckpoint,
    atomic_write,
    find_backup,
    trim_csv_log,
    write_json,
)
from keras_vit.training import augment as augment_lib
from keras_vit.training import multihost
from keras_vit.training import optimizers as optimizers_lib
from keras_vit.training.distribution import (
    batch_shards,
    distribution_scope,
    num_devices,
)
from keras_vit.training.schedules import WarmupDecay

logger = logging.getLogger("keras_vit.recipes")

# Settings of a run rather than of the experiment: shared by every training recipe.
RUNTIME = dict(
    data_dir=None,
    num_channels=3,
    on_corrupt="error",
    download=False,
    eval_batch_size=256,
    validation_freq=1,  # 0: no per-epoch validation (the test metrics are computed at the end)
    steps_per_epoch=None,  # None: one pass over the training data
    warmup_epochs=None,  # set: warm-up for this many epochs (replaces warmup_steps)
    mixed_precision=None,
    # Training steps per call of the compiled train function (Keras' `steps_per_execution`):
    # > 1 cuts the per-step host overhead (Python, callbacks) that can leave a fast GPU idle.
    steps_per_execution=1,
    distribution=None,
    # Several processes (JAX, keras.distribution.initialize): None reads Keras'
    # KERAS_DISTRIBUTION_JOB_ADDRESSES / _NUM_PROCESSES / _PROCESS_ID; multi_host=True lets JAX
    # find the cluster (Cloud TPU pod, SLURM, ...); init_timeout bounds the wait for the others.
    job_addresses=None,
    num_processes=None,
    process_id=None,
    multi_host=False,
    init_timeout=multihost.DEFAULT_TIMEOUT,
    seed=0,
    out="runs/run",
    overwrite=False,  # True: a finished run's artefacts in `out` are removed first
    backup_every=1,  # epochs between resumable backups (and always after the last epoch)
    checkpoints=True,  # checkpoints/last.keras and best.keras
    tensorboard=True,  # logs/
    verbose="auto",
)

# The one smoke shrink (tests): a 2-layer width-32 model, 16 px, batch 32, 3 epochs of 8 steps,
# validation after the last epoch only.
SMOKE = dict(
    model="mu/4",
    model_overrides={},
    image_size=16,
    batch_size=32,
    epochs=3,
    steps=None,
    steps_per_epoch=8,
    validation_freq=3,
    warmup_steps=1,
    warmup_epochs=None,
    eval_batch_size=270,
)

FINAL_ARTEFACTS = ("metrics.json", "model.keras", "encoder.keras", "log.csv")
FINAL_FOLDERS = ("checkpoints", "logs", "backup")


def make_config(presets, preset, smoke=False, runtime=None, smoke_overrides=None):
    """`presets[preset]` + `RUNTIME` (+ `runtime`), shrunk by `SMOKE` (+ `smoke_overrides`)."""
    if preset not in presets:
        raise ValueError(f"preset must be one of {sorted(presets)}. Received: preset={preset!r}")
    config = dict(presets[preset], **RUNTIME)
    config.update(runtime or {})
    if smoke:
        config.update(SMOKE, **(smoke_overrides or {}))
    return config


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
    from keras_vit import data

    return data


# Config keys whose command-line flag is not `--key-with-dashes`; keys with no flag are named as
# config keys.
FLAGS = {"learning_rate": "--lr", "dropout_rate": "--dropout",
         "gradient_accumulation_steps": "--grad-accum", "multi_host": "--multi-host"}
NO_FLAG = ("eval_batch_size", "warmup_epochs", "backup_every")


def _flag(key):
    if key in NO_FLAG:
        return "config key"
    return FLAGS.get(key, "--" + key.replace("_", "-"))


def check_config(config):
    """Checks a training config's numbers before any data is loaded; raises `ValueError`."""
    for key in ("steps", "epochs", "batch_size", "eval_batch_size", "steps_per_epoch",
                "warmup_epochs", "backup_every", "init_timeout", "steps_per_execution"):
        value = config.get(key)
        if value is None and key not in ("batch_size", "eval_batch_size"):
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(
                f"{key} ({_flag(key)}) must be a positive integer. Received: {key}={value!r}"
            )
    if config.get("steps") is not None and config.get("epochs") is not None:
        raise ValueError(
            "Give either steps (--steps) or epochs (--epochs), not both: drop one of them. "
            f"Received: steps={config['steps']!r}, epochs={config['epochs']!r}"
        )
    if config.get("steps") is None and config.get("epochs") is None:
        raise ValueError("One of steps (--steps) or epochs (--epochs) must be set. Received none.")
    if (config.get("steps_per_execution") or 1) > 1 and keras.backend.backend() == "torch":
        raise ValueError(
            "steps_per_execution (--steps-per-execution) must be 1 on the PyTorch backend "
            "(Keras runs PyTorch one step per call). Received: "
            f"steps_per_execution={config['steps_per_execution']!r}"
        )
    warmup = config.get("warmup_steps")
    if isinstance(warmup, bool) or not isinstance(warmup, numbers.Integral) or warmup < 0:
        raise ValueError(
            f"warmup_steps (--warmup-steps) must be an integer >= 0. Received: {warmup!r}"
        )
    if config.get("steps") is not None and config.get("warmup_epochs") is None:
        _check_warmup(warmup, config["steps"])
    lr = config.get("learning_rate")
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not lr > 0:
        raise ValueError(f"learning_rate (--lr) must be > 0. Received: {lr!r}")
    for key in ("label_smoothing", "dropout_rate"):
        value = config.get(key, 0.0)
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value < 1:
            raise ValueError(
                f"{key} ({_flag(key)}) must be in [0, 1). Received: {key}={value!r}"
            )
    freq = config.get("validation_freq", 1)
    if isinstance(freq, bool) or not isinstance(freq, numbers.Integral) or freq < 0:
        raise ValueError(
            f"validation_freq must be an integer >= 0 (0: no per-epoch validation). "
            f"Received: validation_freq={freq!r}"
        )


def _check_warmup(warmup, total):
    if warmup >= total:
        raise ValueError(
            f"warmup_steps ({warmup}, --warmup-steps) must be smaller than the total number of "
            f"training steps ({total}): lower --warmup-steps or train longer."
        )


def _is_finished(out):
    metrics = os.path.exists(os.path.join(out, "metrics.json"))
    model = os.path.exists(os.path.join(out, "model.keras"))
    return metrics or (model and not os.path.exists(os.path.join(out, "backup")))


def prepare_out(config):
    """Checks the output folder `config["out"]` and creates it; returns its path.

    Raises `NotADirectoryError` when `out` (or a parent) is a file, `PermissionError` when it
    cannot be written, and `FileExistsError` when it holds a finished run and `overwrite` is
    False. With `overwrite=True` the old artefacts are removed first; an interrupted run (a
    backup, no final metrics) is left in place to resume.
    """
    out = config["out"]
    if not isinstance(out, (str, os.PathLike)) or not str(out):
        raise ValueError(f"out (--out) must be a folder path. Received: out={out!r}")
    out = os.fspath(out)
    if os.path.exists(out) and not os.path.isdir(out):
        raise NotADirectoryError(
            f"--out must be a folder, but {out!r} is an existing file: choose another --out."
        )
    parent = os.path.abspath(out)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise NotADirectoryError(
            f"--out {out!r} lies under {parent!r}, which is a file, not a folder."
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PermissionError(f"--out {out!r}: the folder {parent!r} is not writable.")
    if os.path.isdir(out) and _is_finished(out):
        if not config.get("overwrite"):
            raise FileExistsError(
                f"{out!r} holds a finished run (metrics.json / model.keras). Pass --overwrite "
                "(config key overwrite=True) to replace it, or choose another --out."
            )
        for name in FINAL_ARTEFACTS:
            if os.path.exists(os.path.join(out, name)):
                os.remove(os.path.join(out, name))
        for name in FINAL_FOLDERS:
            shutil.rmtree(os.path.join(out, name), ignore_errors=True)
    os.makedirs(out, exist_ok=True)
    return out


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
    if config.get("warmup_epochs"):
        warmup = int(config["warmup_epochs"]) * per_epoch
    else:
        warmup = int(config["warmup_steps"])
    _check_warmup(warmup, total)
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
    eval_split = config["eval_split"] or data.default_eval_split(
        config["dataset"], config["data_dir"]
    )
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


def compile_kwargs(config):
    """The `model.compile` settings of a run: `jit_compile` and `steps_per_execution`."""
    return {
        "jit_compile": config.get("jit_compile", "auto"),
        "steps_per_execution": config.get("steps_per_execution") or 1,
    }


def compile_model(model, config, total_steps, warmup_steps):
    """Compiles a classifier: the config's optimizer, (smoothed) cross-entropy, accuracy.

    The accuracy is a weighted metric: the training data carry no weights (no change), and a
    multi-process evaluation's padding (weight 0) does not count.
    """
    model.compile(
        optimizer=build_optimizer(config, total_steps, warmup_steps),
        loss=optimizers_lib.build_loss(config["label_smoothing"]),
        weighted_metrics=[keras.metrics.CategoricalAccuracy(name="accuracy")],
        **compile_kwargs(config),
    )


@dataclasses.dataclass
class RunSetup:
    """What a recipe run needs before building its model (see `prepare_run`).

    Attributes:
        out: str. The output folder.
        train_source, eval_source: the data `Source`s.
        epochs, steps_per_epoch, total_steps, warmup_steps: the step plan (`plan_steps`).
        backup_dir: str. The backup folder.
        start_epoch: int. The epoch a backup resumes at (0 for a fresh run).
        train_ds, eval_ds: the `tf.data` pipelines (the training one starts at `start_epoch`).
        throughput: a `ThroughputLogger` for the run's callbacks.
        eval_steps: batches of one pass over `eval_ds` when it repeats (several processes: the
            padded, weighted evaluation of `data.eval_pipeline(pad=True)`), else None (to its end).
        num_processes: int. Processes training together (1 unless several were joined).
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
    eval_steps: int | None = None
    num_processes: int = 1

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
            "num_processes": self.num_processes,
        }


# Config keys that may differ between the processes of one run (the rest must be equal).
PER_PROCESS_KEYS = ("process_id", "job_addresses", "out", "verbose", "init_timeout")


def start_processes(config):
    """Joins the other processes when the config or Keras' variables ask for it; returns the count.

    Reads `job_addresses`, `num_processes`, `process_id`, `multi_host` (and the
    `KERAS_DISTRIBUTION_*` variables for those left None) through `multihost.cluster_spec`, refuses
    several processes off JAX and a multi-worker `TF_CONFIG` on TensorFlow, initialises JAX's
    runtime (bounded by `init_timeout`), and checks that several processes train with a
    distribution and the same settings. With one process nothing happens (returns 1).
    """
    spec = multihost.cluster_spec(
        config.get("job_addresses"),
        config.get("num_processes"),
        config.get("process_id"),
        detect=bool(config.get("multi_host")),
    )
    multihost.check_backend(spec)
    multihost.check_tensorflow_cluster()
    if spec is None and multihost.process_count() == 1:
        return 1
    if config.get("distribution") in (None, "none"):
        raise ValueError(
            "Several processes train one model only with a distribution: pass --distribution "
            "data_parallel (or model_parallel). Received: distribution=None with "
            f"num_processes={spec.num_processes if spec else multihost.process_count()}"
        )
    multihost.initialize(spec, timeout=config.get("init_timeout") or multihost.DEFAULT_TIMEOUT)
    settings = {k: v for k, v in _jsonable(config).items() if k not in PER_PROCESS_KEYS}
    multihost.check_same(
        "settings", settings, "Start every process with the same command (only --process-id "
        "differs)."
    )
    return multihost.process_count()


def _check_batch_shards(config, num_processes):
    """The global batch must split evenly over the data-parallel replicas and the processes."""
    replicas = batch_shards(config["distribution"])
    parts = replicas if replicas < num_processes else math.lcm(replicas, num_processes)
    if config["batch_size"] % parts:
        raise ValueError(
            f"batch_size (--batch-size) is the global batch and must be divisible by {parts}: "
            f"Keras splits it over {replicas} data-parallel replica(s) on {num_processes} "
            f"process(es). Received: batch_size={config['batch_size']}"
        )
    return parts


def prepare_run(config):
    """Sets up a recipe run: checks, seed, dtype policy, data, step plan, resume point, pipelines.

    Checks the config (`check_config`), joins the other processes if asked (`start_processes`),
    checks the output folder (`prepare_out`, in process 0) before anything is loaded, seeds Keras
    (`config["seed"]`), sets the mixed-precision policy if any, loads the train/eval data, plans
    the steps, finds the epoch a backup in `out/backup` resumes at (printing it), and builds the
    training pipeline from that epoch (crop, flip, `config["augment"]`) and the evaluation
    pipeline. With several processes, process 0 decides the output folder, every process must see
    the same data and the same backup, and the evaluation set is padded to whole global batches
    (weighted, so that each image counts once).

    Returns:
        A `RunSetup`.
    """
    data = _data()
    check_config(config)
    num_processes = start_processes(config)
    chief = multihost.is_chief()
    parts = _check_batch_shards(config, num_processes) if num_processes > 1 else 1
    out = multihost.run_on_chief(lambda: prepare_out(config))
    keras.utils.set_random_seed(config["seed"])
    if config["mixed_precision"]:
        keras.config.set_dtype_policy(config["mixed_precision"])
    train_source, eval_source = load_data(config)
    sizes = [train_source.num_examples, eval_source.num_examples, train_source.num_classes]
    multihost.check_same("data (train examples, eval examples, classes)", sizes)
    epochs, per_epoch, total, warmup = plan_steps(config, train_source.num_examples)
    backup_dir = os.path.join(out, "backup")
    found = find_backup(backup_dir)
    multihost.check_same(
        f"view of the backup in {backup_dir} (epoch, file)",
        found and [found[0], os.path.basename(found[1])],
        "To resume, --out must be a folder that every process reads (a shared file system): "
        "process 0 writes it.",
    )
    start_epoch = min(found[0] if found else 0, epochs)
    if start_epoch and chief:
        print(f"Resuming from the backup in {backup_dir} at epoch {start_epoch + 1}/{epochs}.")
    if chief:
        trim_csv_log(os.path.join(out, "log.csv"), start_epoch)
    train_ds = data.train_pipeline(
        train_source,
        image_size=config["image_size"],
        batch_size=config["batch_size"],
        epochs=epochs,
        steps_per_epoch=per_epoch,
        start_epoch=min(start_epoch, epochs - 1),  # == epochs: nothing left, never iterated
        seed=config["seed"],
        crop_scale=config["crop_scale"],
        crop_ratio=config["crop_ratio"],
        rotation=config["rotation"],
        flip=config["flip"],
        augmenters=augment_lib.build_augmenters(
            config["augment"], seed=config["seed"], image_size=config["image_size"]
        ),
    )
    eval_steps = None
    if num_processes > 1:  # equal, whole batches in every process; padding weighs 0
        eval_batch = math.ceil(config["eval_batch_size"] / parts) * parts
        eval_ds = data.eval_pipeline(
            eval_source, image_size=config["image_size"], batch_size=eval_batch, pad=True
        ).repeat()  # Keras' sharded dataset has no known length: evaluate `eval_steps` batches
        eval_steps = math.ceil(eval_source.num_examples / eval_batch)
    else:
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
        eval_steps=eval_steps,
        num_processes=num_processes,
    )


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


def compile_classifier(model, config, setup):
    """The default `compile` hook of `run_training`: `compile_model`, no extra metrics."""
    compile_model(model, config, setup.total_steps, setup.warmup_steps)
    return {}


def evaluate_classifier(model, setup):
    """The default `evaluate` hook of `run_training`: final test loss and accuracy."""
    test_loss, test_accuracy = model.evaluate(setup.eval_ds, steps=setup.eval_steps, verbose=0)
    return {"test_loss": float(test_loss), "test_accuracy": float(test_accuracy)}


def run_training(
    config,
    build_model,
    recipe,
    callbacks=(),
    compile=compile_classifier,
    evaluate=evaluate_classifier,
    finish=None,
):
    """Trains `build_model(num_classes, config)` on `config` with `model.fit`; writes artefacts.

    The one training path of every recipe: `prepare_run`, build and compile inside the
    distribution scope, `model.fit` with `training_callbacks`, evaluate, save `model.keras`,
    write `metrics.json`, remove the backup, print a summary. With several processes every
    process trains and evaluates; process 0 alone writes files and prints (the others' Keras
    progress is silent).

    Args:
        config: dict (see `keras_vit.recipes.pretrain.get_config`).
        build_model: callable `(num_classes, config) -> (keras.Model, info dict)`, called inside
            the distribution scope.
        recipe: str. Name recorded in metrics.json.
        callbacks: extra Keras callbacks, run after the runner's own.
        compile: callable `(model, config, setup) -> dict` that compiles the model; its dict is
            added to the metrics. Defaults to `compile_classifier`.
        evaluate: callable `(model, setup) -> dict` of final metrics. Defaults to
            `evaluate_classifier` (test loss and accuracy).
        finish: optional callable `(model, setup) -> dict` run after `model.keras` is saved
            (extra artefacts; in every process, so it must write in process 0 only); its dict
            is added to the metrics.

    Returns:
        The metrics dict also written to `out/metrics.json`.
    """
    with multihost.lost_peers_explained():
        return _run_training(config, build_model, recipe, callbacks, compile, evaluate, finish)


def _run_training(config, build_model, recipe, callbacks, compile, evaluate, finish):
    start = time.perf_counter()
    setup = prepare_run(config)
    out = setup.out
    chief = multihost.is_chief()
    validation = bool(config["validation_freq"])
    with distribution_scope(config["distribution"]):
        devices = num_devices(config["distribution"])
        model, model_info = build_model(setup.train_source.num_classes, config)
        extra = compile(model, config, setup) or {}
        history = model.fit(
            setup.train_ds,
            epochs=setup.epochs,
            steps_per_epoch=setup.steps_per_epoch,
            validation_data=setup.eval_ds if validation else None,
            validation_steps=setup.eval_steps,
            validation_freq=config["validation_freq"] or 1,
            callbacks=[*training_callbacks(setup, config, validation), *callbacks],
            shuffle=False,  # the tf.data pipeline is already shuffled (per epoch, seeded)
            verbose=config["verbose"] if chief else 0,
        )
        results = evaluate(model, setup)
    model_path = os.path.join(out, "model.keras")
    with multihost.saving(model) as writer:  # every process (sharded weights are gathered)
        if writer:
            atomic_write(model_path, model.save)
    if finish is not None:
        results.update(finish(model, setup))
    metrics = {
        **setup.base_metrics(recipe, config),
        "num_devices": devices,
        "num_classes": setup.train_source.num_classes,
        "num_params": int(model.count_params()),
        **extra,
        **results,
        "history": {k: [float(v) for v in vs] for k, vs in history.history.items()},
        "throughput": setup.throughput.summary(),
        "model": model_info,
        "model_path": model_path,
        "seconds": round(time.perf_counter() - start, 1),
        "config": _jsonable(config),
    }
    if not chief:
        return metrics
    write_json(os.path.join(out, "metrics.json"), metrics)
    shutil.rmtree(setup.backup_dir, ignore_errors=True)  # finished: nothing left to resume
    summary = ", ".join(
        f"{k.replace('_', ' ')} {v:.4f}" for k, v in results.items() if isinstance(v, float)
    )
    where = ""
    if setup.num_processes > 1:
        where = f" ({setup.num_processes} processes, {devices} devices)"
    print(
        f"{recipe}: {summary} on {setup.eval_source.num_examples} held-out examples{where}; "
        f"artefacts in {out}"
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
    """Builder keyword arguments from a config: `model_overrides` and the `ViTConfig` fields.

    A recipe config holds some builder arguments under their own names (`image_size`,
    `num_channels`, `dropout_rate`, `remat`, `pooling`, `representation_size`); the sizes of
    the variant code are changed through `model_overrides`.
    """
    from keras_vit.models.config import ViTConfig

    kwargs = dict(config["model_overrides"] or {})
    kwargs.update({key: config[key] for key in ViTConfig.field_names() if key in config})
    return kwargs
