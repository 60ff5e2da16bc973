"""What a resumed run may change: the settings of the interrupted run are kept beside its backup
(`backup/run_config.json`, written with each backup: the settings that made it); a rerun into
the same `--out` prints each changed setting on one line, and refuses in one short paragraph,
before anything is rewritten, the changes its backup cannot take (another model, decoder, image
size, class set, optimizer, LoRA or patch sizes: the saved weights and optimizer state would not
fit; other data splits: the training examples would change). A change that is not in
`ARCHITECTURE` but still does not fit the backup is refused when the backup is restored
(`AtomicBackupAndRestore`), naming the changed settings; `run_config.json` is then unchanged."""

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
    # The masked autoencoder's decoder (its weights are in the backup).
    "decoder_hidden_dim", "decoder_num_layers", "decoder_num_heads", "decoder_mlp_dim",
    # The optimizer's state in the backup (its slots, the weight average, the accumulators).
    "optimizer", "ema", "gradient_accumulation_steps", "layer_decay",
    # A teacher's weights and the student's distillation token.
    "teacher", "distillation",
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


def run_config(config, splits=None):
    """What `backup/run_config.json` records: the config (as JSON) and the data splits."""
    current = jsonable(config)
    if splits is not None:
        current[SPLITS] = jsonable(splits)
    return current


def record_run_config(backup_dir, current):
    """Writes `current` (`run_config`) as the settings of the backup in `backup_dir`."""
    os.makedirs(backup_dir, exist_ok=True)
    write_json(os.path.join(backup_dir, CONFIG_FILE), current)


def changed_settings(backup_dir, current):
    """`(key, before, now)` of each setting that differs from the backup's (`IGNORED` left out);
    [] without a readable record."""
    path = os.path.join(backup_dir, CONFIG_FILE)
    try:
        with open(path) as f:
            before = json.load(f)
    except (OSError, ValueError):
        return []
    if not isinstance(before, dict):
        return []
    return [
        (key, before.get(key), current.get(key))
        for key in sorted(set(before) | set(current))
        if key not in IGNORED and before.get(key) != current.get(key)
    ]


def describe_changes(changes):
    return "; ".join(f"{_label(key)} {_show(old)} -> {_show(new)}" for key, old, new in changes)


def changes_since(backup_dir, current):
    """The settings changed since the backup in `backup_dir`, described on one line ("" for
    none)."""
    return describe_changes(changed_settings(backup_dir, current))


def check_resume(config, backup_dir, start_epoch, splits=None):
    """Compares `config` with the interrupted run's; prints changes, raises for impossible ones.

    Without a backup to resume (`start_epoch == 0`) it records `config` (and `splits`, the
    run's data splits, under `SPLITS`) for a later resume. A resumed run's record is rewritten
    with its next backup (`AtomicBackupAndRestore`), never before: a refused or failed resume
    leaves it as it was.

    Returns:
        The lines printed (one per changed setting).

    Raises:
        ValueError: a setting in `ARCHITECTURE` differs (all such differences in one paragraph).
    """
    current = run_config(config, splits)
    if not start_epoch or not os.path.exists(os.path.join(backup_dir, CONFIG_FILE)):
        record_run_config(backup_dir, current)
        return []
    changes = changed_settings(backup_dir, current)
    fixed = [change for change in changes if change[0] in ARCHITECTURE]
    if fixed:
        raise ValueError(
            f"Cannot resume the run in {os.path.dirname(backup_dir)!r} with other settings of "
            f"the model or data: {describe_changes(fixed)}. Its backup holds weights of the old "
            "settings. Rerun with the old settings to resume, or pass --overwrite (or choose "
            "another --out) to start a new run."
        )
    lines = [
        f"Resuming with a changed setting: {_label(key)} {_show(old)} -> {_show(new)}"
        for key, old, new in changes
    ]
    for line in lines:
        print(line)
    return lines
