"""A recipe config: the run settings every recipe shares (`RUNTIME`), the smoke shrink (`SMOKE`),
presets merged into a config, the checks of its numbers, and the builder arguments it holds."""

import copy
import numbers

import keras

from keras_vit.runner.flag_names import flag_or_key
from keras_vit.training import multihost

# Settings of a run rather than of the experiment: shared by every training recipe.
RUNTIME = dict(
    data_dir=None,
    num_channels=3,
    on_corrupt="error",
    download=False,
    eval_batch_size=256,
    validation_freq=1,  # 0: no per-epoch validation (the test metrics are computed at the end)
    # Share of the training split held out for per-epoch validation and best.keras when the
    # dataset has no validation split of its own (keras_vit.data.load_splits); 0: none.
    validation_fraction=0.1,
    steps_per_epoch=None,  # None: one pass over the training data
    warmup_epochs=None,  # set: warm-up for this many epochs (replaces warmup_steps)
    mixed_precision=None,
    # Training steps per call of the compiled train function (Keras' `steps_per_execution`):
    # > 1 cuts the per-step host overhead (Python, callbacks) that can leave a fast GPU idle.
    steps_per_execution=1,
    distribution=None,
    # The (batch, model) device mesh of the sharding strategies (fsdp, tensor_parallel, fsdp_tp;
    # None: every device on the strategy's axis) and the devices per replica of model_parallel.
    mesh=None,
    model_parallel_size=None,
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
    verbose="auto",  # Keras fit verbosity; "auto": a progress bar on a terminal, else 2
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



def check_config(config):
    """Checks a training config's numbers before any data is loaded; raises `ValueError`."""
    for key in ("steps", "epochs", "batch_size", "eval_batch_size", "steps_per_epoch",
                "warmup_epochs", "backup_every", "init_timeout", "steps_per_execution"):
        value = config.get(key)
        if value is None and key not in ("batch_size", "eval_batch_size"):
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(
                f"{key} ({flag_or_key(key)}) must be a positive integer. Received: {key}={value!r}"
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
        check_warmup(warmup, config["steps"])
    lr = config.get("learning_rate")
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not lr > 0:
        raise ValueError(f"learning_rate (--lr) must be > 0. Received: {lr!r}")
    for key in ("label_smoothing", "dropout_rate"):
        value = config.get(key, 0.0)
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value < 1:
            raise ValueError(
                f"{key} ({flag_or_key(key)}) must be in [0, 1). Received: {key}={value!r}"
            )
    from keras_vit.data.pipelines import check_repeats
    from keras_vit.runner.compile import check_finetune_options

    check_repeats(config.get("repeated_augmentation", 1), config["batch_size"])
    check_finetune_options(config)
    from keras_vit.data.carve import check_fraction
    from keras_vit.training.distribution import check_mode

    check_mode(
        config.get("distribution"),
        model_parallel_size=config.get("model_parallel_size"),
        mesh=config.get("mesh"),
    )

    check_fraction(config.get("validation_fraction", 0.0))
    freq = config.get("validation_freq", 1)
    if isinstance(freq, bool) or not isinstance(freq, numbers.Integral) or freq < 0:
        raise ValueError(
            f"validation_freq must be an integer >= 0 (0: no per-epoch validation). "
            f"Received: validation_freq={freq!r}"
        )


def check_warmup(warmup, total):
    if warmup >= total:
        raise ValueError(
            f"warmup_steps ({warmup}, --warmup-steps) must be smaller than the total number of "
            f"training steps ({total}): lower --warmup-steps or train longer."
        )


def jsonable(value):
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
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


def fit_verbosity(verbose, stream=None):
    """Keras `fit` verbosity for a recipe's `verbose` setting.

    `"auto"` is a progress bar (1) when standard output is a terminal and one line per epoch
    (2) otherwise: a progress bar's ANSI escapes would fill a redirected log (what the
    quickstart's `--verbose 2` does). 0, 1 and 2 are kept as given.
    """
    if verbose != "auto":
        return verbose
    import sys

    stream = sys.stdout if stream is None else stream
    try:
        return 1 if stream.isatty() else 2
    except (AttributeError, ValueError):  # a replaced or closed stream
        return 2
