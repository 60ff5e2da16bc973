"""Everything a run needs before its model is built: checks, processes, output folder, seed, data,
step plan, resume point and pipelines (`prepare_run` -> `RunSetup`)."""

import dataclasses
import math
import os

import keras

from keras_vit import data
from keras_vit.runner.backup import find_backup, trim_csv_log
from keras_vit.runner.callbacks import ThroughputLogger
from keras_vit.runner.config import check_config
from keras_vit.runner.output import prepare_out, release_out
from keras_vit.runner.processes import check_batch_shards, start_processes
from keras_vit.runner.resume import check_resume, resume_line
from keras_vit.runner.steps import plan_steps
from keras_vit.training import augment as augment_lib
from keras_vit.training import multihost


def _load_kwargs(config):
    return dict(
        data_dir=config["data_dir"],
        num_channels=config["num_channels"],
        on_corrupt=config["on_corrupt"],
        download=config["download"],
    )


def load_data(config):
    """Loads the train and eval (test) `Source`s of a config (no validation split: few-shot)."""
    common = _load_kwargs(config)
    train = data.load_source(config["dataset"], "train", **common)
    eval_split = config["eval_split"] or data.default_eval_split(
        config["dataset"], config["data_dir"]
    )
    evaluation = data.load_source(config["dataset"], eval_split, **common)
    return train, evaluation


def load_run_splits(config):
    """The training, validation and test splits of a training config (`data.load_splits`)."""
    return data.load_splits(
        config["dataset"],
        eval_split=config["eval_split"],
        validation_fraction=config.get("validation_fraction", 0.0),
        validation=bool(config["validation_freq"]),
        **_load_kwargs(config),
    )


# The metrics.json figures computed on each split (`RunSetup.base_metrics`).
FIGURES = {
    "train": "history: loss, accuracy (running means over each epoch's batches)",
    "validation": "history: val_* (each validated epoch); checkpoints/best.keras",
    "test": "test_* (once, after training)",
}


@dataclasses.dataclass
class RunSetup:
    """What a recipe run needs before building its model (see `prepare_run`).

    Attributes:
        out: str. The output folder.
        train_source, eval_source: the data `Source`s (`eval_source`: the test split, evaluated
            once after training).
        epochs, steps_per_epoch, total_steps, warmup_steps: the step plan (`plan_steps`).
        backup_dir: str. The backup folder.
        start_epoch: int. The epoch a backup resumes at (0 for a fresh run).
        train_ds, eval_ds: the `tf.data` pipelines (the training one starts at `start_epoch`).
        throughput: a `ThroughputLogger` for the run's callbacks.
        eval_steps: batches of one pass over `eval_ds` when it repeats (several processes: the
            padded, weighted evaluation of `data.eval_pipeline(pad=True)`), else None (to its end).
        num_processes: int. Processes training together (1 unless several were joined).
        validation_source: the validation `Source` (per-epoch validation, best.keras), or None.
        val_ds, val_steps: its pipeline and steps, as `eval_ds` and `eval_steps`.
        splits: dict. Per split, its size and origin (`data.Splits.info`), for metrics.json.
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
    batch_parts: int = 1
    preprocessing: object = None
    validation_source: object = None
    val_ds: object = None
    val_steps: int | None = None
    splits: dict = None

    def use_preprocessing(self, config, model):
        """Rebuilds the square pipelines with `model`'s input spec when it is not `[-1, 1]`.

        The model's `config.preprocessing` (a fine-tuning `--init` from timm or transformers:
        ImageNet or CLIP mean and std, its crop): the training pipeline's scaling and the
        evaluation pipeline's resize, crop and scaling become the model's. Returns the spec
        used (None: the default pipelines are kept).
        """
        from keras_vit.models.preprocessing_config import PreprocessingConfig

        spec = getattr(model, "preprocessing", None)  # a FlexiViT's is its backbone's
        if not isinstance(spec, PreprocessingConfig) or spec == PreprocessingConfig():
            return None
        self.preprocessing = spec
        if self.train_ds is not None:  # NaFlex pipelines are made by `use_naflex`
            self._set_pipelines(
                _square_pipelines(
                    config, self.train_source, self.eval_source, self.epochs,
                    self.steps_per_epoch, self.start_epoch, self.num_processes,
                    self.batch_parts, preprocessing=spec, validation=self.validation_source,
                )
            )
        return spec

    def _set_pipelines(self, pipelines):
        (self.train_ds, self.eval_ds, self.eval_steps, self.val_ds, self.val_steps) = pipelines

    def use_naflex(self, config, patch_size):
        """NaFlex pipelines (`--naflex`) at the model's `patch_size` replace the square ones."""
        from keras_vit.data.naflex_pipelines import naflex_eval_pipeline, naflex_train_pipeline

        common = dict(
            patch_size=patch_size, max_patches=config["max_patches"],
            preprocessing=self.preprocessing,
        )
        self.train_ds = naflex_train_pipeline(
            self.train_source,
            batch_size=config["batch_size"],
            epochs=self.epochs,
            steps_per_epoch=self.steps_per_epoch,
            start_epoch=min(self.start_epoch, self.epochs - 1),
            seed=config["seed"],
            flip=config["flip"],
            **common,
        )
        self.eval_ds, self.val_ds = (
            naflex_eval_pipeline(source, batch_size=config["eval_batch_size"], **common)
            if source is not None
            else None
            for source in (self.eval_source, self.validation_source)
        )

    def base_metrics(self, recipe, config):
        """The metrics.json fields every recipe writes (run, data and step plan)."""
        return {
            "recipe": recipe,
            "backend": keras.backend.backend(),
            "dataset": config["dataset"],
            "num_train_examples": self.train_source.num_examples,
            "num_validation_examples": getattr(self.validation_source, "num_examples", 0),
            "num_test_examples": self.eval_source.num_examples,
            "splits": {
                name: dict(info, figures=FIGURES[name] if info["examples"] else "none")
                for name, info in (self.splits or {}).items()
            },
            "epochs": self.epochs,
            "steps_per_epoch": self.steps_per_epoch,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
            "resumed_at_epoch": self.start_epoch,
            "num_processes": self.num_processes,
        }


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
    check_config(config)
    num_processes = start_processes(config)
    chief = multihost.is_chief()
    parts = check_batch_shards(config, num_processes)  # before a step meets a bad batch
    out = multihost.run_on_chief(lambda: prepare_out(config))
    try:
        return _prepare(config, out, num_processes, chief, parts)
    except BaseException:
        release_out(out, failed=True)
        raise


def _prepare(config, out, num_processes, chief, parts):
    keras.utils.set_random_seed(config["seed"])
    if config["mixed_precision"]:
        keras.config.set_dtype_policy(config["mixed_precision"])
    splits = load_run_splits(config)
    train_source, validation_source, eval_source = splits.train, splits.validation, splits.test
    sizes = [splits.info[name]["examples"] for name in ("train", "validation", "test")]
    sizes.append(train_source.num_classes)
    multihost.check_same("data (train, validation, test examples, classes)", sizes)
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
    # Changes printed, impossible ones refused (in every process, decided by process 0).
    multihost.run_on_chief(lambda: check_resume(config, backup_dir, start_epoch, splits.info))
    if start_epoch and chief:
        print(resume_line(backup_dir, start_epoch, epochs))
    if chief and config["validation_freq"] and validation_source is None:
        print(f"No validation split ({splits.info['validation']['source']}); the test split is "
              "evaluated once, after training.")
    if chief:
        trim_csv_log(os.path.join(out, "log.csv"), start_epoch)
    naflex = config.get("naflex")
    if naflex and num_processes > 1:
        raise ValueError("--naflex runs in one process. Received: num_processes="
                         f"{num_processes}")
    pipelines = (None,) * 5  # NaFlex: made once the model gives the patch size (`use_naflex`)
    if not naflex:
        pipelines = _square_pipelines(
            config, train_source, eval_source, epochs, per_epoch, start_epoch, num_processes,
            parts, validation=validation_source,
        )
    setup = RunSetup(
        out=out,
        train_source=train_source,
        eval_source=eval_source,
        epochs=epochs,
        steps_per_epoch=per_epoch,
        total_steps=total,
        warmup_steps=warmup,
        backup_dir=backup_dir,
        start_epoch=start_epoch,
        train_ds=None,
        eval_ds=None,
        throughput=ThroughputLogger(config["batch_size"], per_epoch),
        num_processes=num_processes,
        batch_parts=parts,
        validation_source=validation_source,
        splits=splits.info,
    )
    setup._set_pipelines(pipelines)
    return setup


def _square_pipelines(
    config, train_source, eval_source, epochs, per_epoch, start_epoch, num_processes, parts,
    preprocessing=None, validation=None,
):
    """`(train_ds, eval_ds, eval_steps, val_ds, val_steps)`: the square pipelines, scaled by
    `preprocessing` (`val_ds` None without a `validation` source)."""
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
        repeated_augmentation=config.get("repeated_augmentation", 1),
        augmenters=augment_lib.build_augmenters(
            config["augment"], seed=config["seed"], image_size=config["image_size"]
        ),
        preprocessing=preprocessing,
    )
    eval_ds, eval_steps = _eval_pipeline(config, eval_source, num_processes, parts, preprocessing)
    val_ds = val_steps = None
    if validation is not None:
        val_ds, val_steps = _eval_pipeline(config, validation, num_processes, parts, preprocessing)
    return train_ds, eval_ds, eval_steps, val_ds, val_steps


def _eval_pipeline(config, source, num_processes, parts, preprocessing):
    """`(ds, steps)`: an evaluation pipeline of `source` (`steps` None: to its end)."""
    if num_processes > 1 or parts > 1:  # equal, whole batches on every device; padding weighs 0
        eval_batch = math.ceil(config["eval_batch_size"] / parts) * parts
        ds = data.eval_pipeline(
            source, image_size=config["image_size"], batch_size=eval_batch, pad=True,
            preprocessing=preprocessing,
        ).repeat()  # Keras' sharded dataset has no known length: evaluate `steps` batches
        return ds, math.ceil(source.num_examples / eval_batch)
    ds = data.eval_pipeline(
        source, image_size=config["image_size"], batch_size=config["eval_batch_size"],
        preprocessing=preprocessing,
    )
    return ds, None
