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

from keras_vit.runner import presets, pretrain
from keras_vit.runner.quickstart_defaults import DEFAULTS, quickstart_config  # noqa: F401
from keras_vit.runner.run import run_training

# The quickstart preset (the supervised digits model with the quickstart's numbers, a warm-up
# of 5% of the run) is data in keras_vit.runner.presets, read there without a framework.
DIGITS = presets.QUICKSTART_DIGITS
PRESETS = {"digits": DIGITS}
default_out = presets.quickstart_out


def get_config(preset="digits", smoke=False):
    """The quickstart config (grayscale digits, a warm-up of 5% of the run, no
    checkpoints/TensorBoard)."""
    return presets.get_config("quickstart", preset, smoke)


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
