"""Quickstart: a small ViT trained from scratch on scikit-learn's digits, offline, in minutes.

Command: `keras-vit quickstart` (or `python -m keras_vit quickstart`), on any backend
(`KERAS_BACKEND=tensorflow|jax|torch`). Meant for a laptop or a 2-core CPU: about a minute with JAX
there, >= 97.5% test accuracy on the fixed stratified 30% of the digits held out
(`keras_vit.data`'s digits split). From Python: `train(out_dir, **settings)` (settings: the keys
of `DEFAULTS`) returns the main numbers.

It goes through the same runner as every recipe (`keras_vit.runner.run.run_training`, the same code
path as `keras-vit pretrain`): 16 px digits cut into 4x4 patches, the tf.data pipeline's random
resized crop and rotation (one resampling pass), AdamW with a linear warm-up and cosine decay,
label smoothing, a resumable backup; checkpoints, TensorBoard and per-epoch validation are off
(they cost time and the quickstart evaluates the test split once at the end; `--validation-fraction
F` holds out that share of the training digits and validates on it after every epoch).
"""

import functools
import os

import keras

from keras_vit.runner import pretrain
from keras_vit.runner.config import make_config
from keras_vit.runner.quickstart_defaults import DEFAULTS
from keras_vit.runner.run import run_training

# The supervised digits preset (a 4-layer width-64 ViT, 4 px patches on 16 px digits) with the
# quickstart's numbers (`DEFAULTS`: 60 epochs of batch 64, AdamW 2e-3 with
# weight decay 0.05, label smoothing 0.1), cosine decay after 3 warm-up epochs (`get_config`),
# the fine-tuning jitter (`pretrain.DIGITS_JITTER`) and no pre-logits layer.
TRAINING_SETTINGS = ("image_size", "epochs", "batch_size", "learning_rate", "weight_decay")
DIGITS = dict(
    pretrain.DIGITS,
    **pretrain.DIGITS_JITTER,
    **{key: DEFAULTS[key] for key in (*TRAINING_SETTINGS, "label_smoothing")},
    warmup_steps=0,
    decay="cosine",
    representation_size=None,
)

PRESETS = {"digits": DIGITS}


def default_out():
    """The quickstart's default folder, one per backend: `runs/quickstart/<backend>` (so that
    `KERAS_BACKEND=jax keras-vit quickstart` runs after the TensorFlow one)."""
    return os.path.join("runs", "quickstart", keras.backend.backend())


def get_config(preset="digits", smoke=False):
    """The quickstart config (grayscale digits, 3 warm-up epochs, no checkpoints/TensorBoard)."""
    return make_config(
        PRESETS,
        preset,
        smoke,
        runtime=dict(
            out=default_out(),
            num_channels=1,
            warmup_epochs=DEFAULTS["warmup_epochs"],
            validation_freq=0,
            checkpoints=False,
            tensorboard=False,
            backup_every=10,  # a 60-epoch run of seconds per epoch: back up every 10 epochs
        ),
        smoke_overrides=dict(validation_freq=0, warmup_epochs=1),
    )


# The pre-training builder, the model named `vit_quickstart`.
build_model = functools.partial(pretrain.build_model, name="vit_quickstart")


def run(config, callbacks=()):
    """Trains the quickstart model; returns the metrics (also in `out/metrics.json`)."""
    return run_training(config, build_model, "quickstart", callbacks=callbacks)


# The fields of `train`'s result and the metrics.json fields they are read from.
RESULT_FIELDS = dict(
    backend="backend",
    test_accuracy="test_accuracy",
    test_examples="num_test_examples",
    validation_examples="num_validation_examples",
    train_examples="num_train_examples",
    seconds="seconds",
    parameters="num_params",
    model_path="model_path",
    config="config",
)


def quickstart_config(out_dir=None, verbose=1, **overrides):
    """The runner config of a quickstart run (`DEFAULTS` keys as overrides); `out_dir` None:
    `default_out()`."""
    from keras_vit.models.config import ViTConfig

    unknown = set(overrides) - set(DEFAULTS)
    if unknown:
        raise ValueError(
            f"Unknown quickstart settings {sorted(unknown)}; expected some of {sorted(DEFAULTS)}"
        )
    settings = dict(DEFAULTS, **overrides)
    sizes = ViTConfig.field_names("size")
    cfg = get_config()
    cfg["model_overrides"] = {k: v for k, v in settings.items() if k in sizes}
    cfg.update(
        {k: v for k, v in settings.items() if k not in sizes},
        out=default_out() if out_dir is None else out_dir,
        verbose=verbose,
    )
    # A validation split (validation_fraction > 0) is validated on after every epoch.
    cfg["validation_freq"] = 1 if cfg["validation_fraction"] else 0
    return cfg


def train(out_dir=None, verbose=1, overwrite=False, **overrides):
    """Trains, evaluates and saves the quickstart model; returns the metrics dict.

    Writes `model.keras` and `metrics.json` in `out_dir` (default `runs/quickstart/<backend>`,
    one folder per backend; a finished run there raises
    `FileExistsError` unless `overwrite=True`; an interrupted one resumes).
    """
    cfg = quickstart_config(out_dir, verbose, **overrides)
    cfg["overwrite"] = overwrite
    metrics = run(cfg)
    result = {field: metrics[key] for field, key in RESULT_FIELDS.items()}
    result["train_loss"] = metrics["history"].get("loss", [])
    return result
