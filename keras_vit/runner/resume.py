"""What a resumed run may change: the settings of the interrupted run are kept beside its backup
(`backup/run_config.json`); a rerun into the same `--out` prints each changed setting on one
line, and refuses in one short paragraph the changes its backup cannot take (another model,
image size, class set, LoRA or patch sizes: the saved weights would not fit; other data
splits: the training examples would change)."""

import json
import os

from keras_vit.runner.backup import write_json
from keras_vit.runner.config import jsonable
from keras_vit.runner.flag_names import flag_or_key

CONFIG_FILE = "run_config.json"
# Recorded beside the settings: the run's data splits (sizes and origin, `load_splits`). Another
# validation split would change the training examples, so a resume must find the same.
SPLITS = "splits"
SPLITS_LABEL = "data splits (--validation-fraction, --eval-split, validation_freq)"
# Settings that shape the weights in the backup: a resume cannot change them.
ARCHITECTURE = (
    "model", "model_overrides", "image_size", "num_channels", "representation_size", "pooling",
    "fc_norm",
    "dataset", "init", "timm_name", "weights", "naflex", "max_patches", "lora_rank",
    "lora_targets", "lora_alpha", "patch_sizes", "target", "mixed_precision", SPLITS,
)  # fmt: skip
# Settings of where and how verbosely a run writes: never reported.
IGNORED = ("out", "overwrite", "verbose", "download", "data_dir", "init_timeout")


def _show(value):
    return json.dumps(value)


def _label(key):
    return SPLITS_LABEL if key == SPLITS else f"{key} ({flag_or_key(key)})"


def resume_line(backup_dir, start_epoch, epochs):
    """The line a resumed run prints: the epoch it goes on from, or that none is left to train."""
    if start_epoch >= epochs:
        return (f"Resuming from the backup in {backup_dir}: all {epochs} epochs are trained; "
                "evaluating and writing the results.")
    return f"Resuming from the backup in {backup_dir} at epoch {start_epoch + 1}/{epochs}."


def check_resume(config, backup_dir, start_epoch, splits=None):
    """Compares `config` with the interrupted run's; prints changes, raises for impossible ones.

    Without a backup to resume (`start_epoch == 0`) it records `config` (and `splits`, the
    run's data splits, under `SPLITS`) for a later resume.

    Returns:
        The lines printed (one per changed setting).

    Raises:
        ValueError: a setting in `ARCHITECTURE` differs (all such differences in one paragraph).
    """
    path = os.path.join(backup_dir, CONFIG_FILE)
    current = jsonable(config)
    if splits is not None:
        current[SPLITS] = jsonable(splits)
    if not start_epoch or not os.path.exists(path):
        os.makedirs(backup_dir, exist_ok=True)
        write_json(path, current)
        return []
    try:
        with open(path) as f:
            before = json.load(f)
    except (OSError, ValueError):
        before = None
    if not isinstance(before, dict):
        write_json(path, current)
        return []
    changed = [
        key
        for key in sorted(set(before) | set(current))
        if key not in IGNORED and before.get(key) != current.get(key)
    ]
    fixed = [key for key in changed if key in ARCHITECTURE]
    if fixed:
        what = "; ".join(
            f"{_label(key)} {_show(before.get(key))} -> {_show(current.get(key))}"
            for key in fixed
        )
        raise ValueError(
            f"Cannot resume the run in {os.path.dirname(backup_dir)!r} with other settings of "
            f"the model or data: {what}. Its backup holds weights of the old settings. Rerun "
            "with the old settings to resume, or pass --overwrite (or choose another --out) to "
            "start a new run."
        )
    lines = [
        f"Resuming with a changed setting: {_label(key)} "
        f"{_show(before.get(key))} -> {_show(current.get(key))}"
        for key in changed
    ]
    for line in lines:
        print(line)
    write_json(path, current)
    return lines
