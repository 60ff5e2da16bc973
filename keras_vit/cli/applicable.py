"""Flags that cannot apply to the run they are given to: refused, naming the flag and the
setting it needs, before any framework is imported (a flag is never silently ignored).

A training command's flag groups are shared (`keras_vit.cli.flags`), and some settings only
mean something with others: `--data-dir` and `--download` read TensorFlow Datasets, a masked
autoencoder has no classifier to pool or smooth, hard distillation has no temperature. The
rules below say, for each config key set on the command line or in an experiment file (the
preset's own values are not the user's and are never refused), when it applies.
"""

from keras_vit.runner.flag_names import flag_name


def _scheme(config):
    return str(config.get("dataset") or "").split(":", 1)[0]


_CLASSIFIER = ("pretrain", "finetune")
_FOLDERS = ("folder", "imagefolder")

# key: (applies(command, config), what it needs)
RULES = {
    "data_dir": (lambda c, cfg: _scheme(cfg) == "tfds", "a TensorFlow Datasets dataset "
                 "(--dataset tfds:NAME)"),
    "download": (lambda c, cfg: _scheme(cfg) == "tfds", "a TensorFlow Datasets dataset "
                 "(--dataset tfds:NAME)"),
    "on_corrupt": (lambda c, cfg: _scheme(cfg) in _FOLDERS, "an image-folder dataset "
                   "(--dataset folder:PATH or imagefolder:PATH)"),
    "validation_fraction": (lambda c, cfg: bool(cfg.get("validation_freq"))
                            or not cfg["validation_fraction"],
                            "per-epoch validation (pretrain and finetune; pretrain-mpp and "
                            "pretrain-mae validate nothing per epoch)"),
    "pooling": (lambda c, cfg: c in _CLASSIFIER, "a classifier (pretrain, finetune)"),
    "fc_norm": (lambda c, cfg: c in _CLASSIFIER, "a classifier (pretrain, finetune)"),
    "label_smoothing": (lambda c, cfg: c in _CLASSIFIER, "a classifier's labels (pretrain, "
                        "finetune; the self-supervised losses read no labels)"),
    "patch_dropout_rate": (lambda c, cfg: c in _CLASSIFIER, "a classifier (pretrain, "
                           "finetune; MAE drops its own patches: --mask-ratio)"),
    "distillation_tau": (lambda c, cfg: cfg.get("distillation") == "soft",
                         "soft distillation (--distillation soft)"),
    "timm_name": (lambda c, cfg: bool(cfg.get("init")), "a timm checkpoint file given with "
                  "--init FILE"),
    "crop_scale": (lambda c, cfg: not cfg.get("naflex"), "square batches (NaFlex batches keep "
                   "each image whole, at its aspect ratio)"),
    "crop_ratio": (lambda c, cfg: not cfg.get("naflex"), "square batches (NaFlex batches keep "
                   "each image whole, at its aspect ratio)"),
    "rotation": (lambda c, cfg: not cfg.get("naflex"), "square batches (NaFlex batches keep "
                 "each image whole, at its aspect ratio)"),
    "weights": (lambda c, cfg: not cfg.get("init"), "no --init (give one checkpoint)"),
}

# Flags of the command line itself that contradict another.
_RUN_ONLY = ("overwrite",)


def _given(config, key):
    """The flag as given: `--pooling gap`, `--download` (a switch), `--crop-scale 0.5,1.0`."""
    value = config.get(key)
    if value is True:
        return flag_name(key)
    if isinstance(value, (list, tuple)):
        value = ",".join(map(str, value))
    return f"{flag_name(key)} {value}"


def check_applicable(command, config, explicit, print_config=False):
    """Raises `ValueError` for the first key in `explicit` that cannot apply to this run.

    Args:
        command: str. The command (`"pretrain-mae"`).
        config: dict. The merged config.
        explicit: set of the keys the user set (flags and the experiment file).
        print_config: bool. `--print-config` was given (it writes nothing: `--overwrite`
            cannot apply).
    """
    for key in sorted(explicit):
        rule = RULES.get(key)
        if rule is None or config.get(key) is None or config.get(key) is False:
            continue
        applies, needs = rule
        if not applies(command, config):
            raise ValueError(
                f"{_given(config, key)} cannot apply to this run of keras-vit "
                f"{command}: it needs {needs}. Drop {flag_name(key)} (it would be ignored)."
            )
    if print_config:
        given = [key for key in _RUN_ONLY if key in explicit and config.get(key)]
        if given:
            raise ValueError(
                f"{flag_name(given[0])} cannot apply with --print-config, which prints the "
                f"config and writes nothing. Drop one of them."
            )
