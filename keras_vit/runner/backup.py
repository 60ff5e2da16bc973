"""Files of a training run that survive a kill at any moment.

Every artefact is written to a temporary file in the same folder and moved into place with
`os.replace` (`atomic_write`, `write_json`), so a kill leaves the old file or the new one, never
half of one. `AtomicBackupAndRestore` keeps the previous backup and records each backup's SHA-256,
so a rerun resumes from the newest consistent backup (`find_backup`), and `trim_csv_log` drops the
CSV rows of epochs a resume repeats. Used by the recipe runner (`keras_vit.runner`).

A model sharded over devices (`keras_vit.distribution`) is backed up and checkpointed as
sharded checkpoints (`keras_vit.distribution.checkpoint`: every process writes its own blocks,
nothing is gathered), `latest.sharded` and `previous.sharded`, which a resume reads onto the
layouts of its own mesh, whatever shape it has.

With several processes (`keras_vit.training.multihost`) every process runs these callbacks (saving
may gather weights sharded over processes, which takes all of them) and process 0 alone writes.
"""

import hashlib
import json
import os
import shutil
import warnings

import keras
import numpy as np

from keras_vit.distribution.checkpoint import (
    fingerprint,
    is_sharded_checkpoint,
    is_sharded_model,
    load_sharded,
    save_sharded,
)
from keras_vit.saving import atomic_write
from keras_vit.training import lora, multihost
from keras_vit.training.lora_files import exact_lora_variables


def write_json(path, value):
    """Writes `value` as JSON to `path` atomically."""

    def write(tmp):
        with open(tmp, "w") as f:
            json.dump(value, f, indent=2)

    atomic_write(path, write)


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


BACKUP_WEIGHTS = ("latest.weights.h5", "previous.weights.h5")
SHARDED_WEIGHTS = ("latest.sharded", "previous.sharded")  # a sharded model's backups
# (staged as `next.sharded`; keras_vit.runner.run_files names them all)
BACKUP_METADATA = ("training_metadata.json", "previous_metadata.json")


def find_backup(backup_dir):
    """The newest consistent backup in `backup_dir`: `(epoch, weights_path)` or `None`.

    A backup is a metadata file (`training_metadata.json`, or `previous_metadata.json` for the
    one before) whose recorded SHA-256 matches one of the weights files: a truncated or
    half-written file never matches. Damaged or unmatched files are named in a warning.
    """
    found = _find_backup(backup_dir)
    return found[:2] if found else None


def _find_backup(backup_dir):
    """`find_backup`'s `(epoch, weights_path, metadata dict)`, or `None`."""
    candidates, damaged = [], []
    for name in BACKUP_METADATA:
        path = os.path.join(backup_dir, name)
        if not os.path.exists(path):
            continue
        try:
            with open(path) as f:
                meta = json.load(f)
            candidates.append((int(meta["epoch"]), meta.get("weights_sha256"), path, meta))
        except (OSError, ValueError, KeyError, TypeError):
            damaged.append(path)
    hashes = {}
    for name in BACKUP_WEIGHTS:
        path = os.path.join(backup_dir, name)
        if os.path.isfile(path) and os.path.getsize(path) > 0:
            hashes.setdefault(_sha256(path), path)
    for name in SHARDED_WEIGHTS:  # complete ones only (the files their index lists, all there)
        path = os.path.join(backup_dir, name)
        found = fingerprint(path) if os.path.isdir(path) else None
        if found is not None:
            hashes.setdefault(found, path)
    found = None
    for epoch, sha, path, meta in sorted(candidates, key=lambda c: c[:3], reverse=True):
        weights = hashes.get(sha)
        latest = os.path.join(backup_dir, BACKUP_WEIGHTS[0])
        if sha is None and latest in hashes.values():  # a plain Keras backup (no hash recorded)
            weights = latest
        if weights is not None:
            found = (epoch, weights, meta)
            break
        damaged.append(path)
    if damaged:
        others = [os.path.join(backup_dir, n) for n in BACKUP_WEIGHTS]
        what = f"resuming from {found[1]} (epoch {found[0]})" if found else "restarting"
        warnings.warn(
            f"Damaged or unmatched backup files {damaged} (weights {others}): {what}.",
            stacklevel=2,
        )
    return found


def random_states(model):
    """The model's random-number states: the `keras.random.SeedGenerator` states of its layers
    (dropout, drop path, MAE's masking, MPP's corruption), which `save_weights` leaves out, in
    `model.variables` order."""
    weights = {id(v) for v in model.weights}
    return [
        v for v in model.variables
        if id(v) not in weights and v.path.endswith("seed_generator_state")
    ]  # fmt: skip


def _restore_random_states(model, saved):
    """Sets `random_states(model)` to `saved` (lists from a backup's metadata); a backup written
    before they were recorded (None) or for another model (a different count or shape) leaves
    them as they are, with a warning in the second case."""
    if saved is None:
        return
    states = random_states(model)
    shapes = [tuple(v.shape) for v in states]
    values = [np.asarray(value) for value in saved]
    if [value.shape for value in values] != shapes:
        warnings.warn(
            f"The backup's random-number states (shapes {[v.shape for v in values]}) do not fit "
            f"this model's ({shapes}): the random draws (dropout, masking) restart from the "
            "model's seed instead of continuing.",
            stacklevel=2,
        )
        return
    for variable, value in zip(states, values, strict=True):
        variable.assign(value.astype(keras.backend.standardize_dtype(variable.dtype)))


def backup_epoch(backup_dir):
    """The epoch a backup in `backup_dir` resumes at (0 without a usable one)."""
    found = find_backup(backup_dir)
    return found[0] if found else 0


class AtomicBackupAndRestore(keras.callbacks.BackupAndRestore):
    """`keras.callbacks.BackupAndRestore` whose backups survive a kill at any moment.

    Every save writes the weights to a temporary file, keeps the previous backup
    (`previous.weights.h5`, `previous_metadata.json`), moves the new weights in (`os.replace`)
    and then writes `training_metadata.json` (atomically) with the epoch and the SHA-256 of its
    weights, so the metadata never points to weights that do not exist or are incomplete.
    Restoring takes the newest consistent pair (`find_backup`). The backup is not deleted at the
    end of `fit`: the runner removes it once the final artefacts are written, so a kill in
    between still resumes.

    Args:
        backup_dir: str. The backup folder.
        every: int. Epochs between backups; the last epoch (`epochs`) is always backed up.
            Defaults to 1.
        epochs: optional int. The run's last epoch.
        run_config: optional dict. The run's settings (`keras_vit.runner.resume.run_config`),
            recorded as `run_config.json` with each backup (the settings that made it).
        describe_changes: optional callable `(backup_dir, run_config) -> str` naming the
            settings changed since the backup (`keras_vit.runner.resume.changes_since`), for
            the message of a backup that does not fit the model.
    """

    def __init__(self, backup_dir, every=1, epochs=None, run_config=None, describe_changes=None):
        super().__init__(backup_dir, delete_checkpoint=False)
        self.every = every
        self.epochs = epochs
        self.run_config = run_config
        self.describe_changes = describe_changes

    def on_epoch_end(self, epoch, logs=None):
        self._current_epoch = epoch + 1
        self._last_batch_seen = 0
        if self._current_epoch % self.every == 0 or self._current_epoch == self.epochs:
            self._save_model()

    def on_train_begin(self, logs=None):
        found = _find_backup(self.backup_dir)
        if found is None:
            return
        epoch, weights, meta = found
        if self.model.optimizer is not None and not self.model.optimizer.built:
            self.model.optimizer.build(self.model.trainable_variables)
        try:
            if is_sharded_checkpoint(weights):  # onto this run's layouts, whatever its mesh
                load_sharded(self.model, weights)
            else:
                with exact_lora_variables(self.model):  # LoRA: frozen kernels and adapters
                    self.model.load_weights(weights)
        except ValueError as error:  # settings changed since the backup that shape the weights
            raise self._unfit(weights, error) from None
        # The random draws continue where the backed-up run was (an uninterrupted run's masks
        # and dropout), which the weights file does not hold.
        _restore_random_states(self.model, meta.get("random_states"))
        self.model._initial_epoch = epoch

    def _unfit(self, weights, error):
        changed = None
        if self.describe_changes is not None:
            changed = self.describe_changes(self.backup_dir, self.run_config or {})
        changed = changed or "none recorded"
        first = " ".join(str(error).split())[:300]
        return ValueError(
            f"Cannot resume the run in {os.path.dirname(self.backup_dir)!r}: its backup "
            f"{weights!r} does not fit this model ({first}). Settings changed since the backup: "
            f"{changed}. Rerun with the old settings to resume, or pass --overwrite (or choose "
            "another --out) to start a new run. Nothing was changed."
        )

    def _save_model(self):
        if is_sharded_model(self.model):  # every process writes its own blocks
            self._write_sharded_backup()
            return
        with multihost.saving(self.model) as writer:
            if writer:
                self._write_backup()

    def _write_sharded_backup(self):
        staged = os.path.join(self.backup_dir, "next.sharded")
        save_sharded(self.model, staged, overwrite=True)  # in every process, synchronised
        multihost.run_on_chief(lambda: self._publish_sharded(staged))

    def _publish_sharded(self, staged):
        # As `_write_backup`: at every moment one metadata file matches a complete backup.
        latest, previous = (os.path.join(self.backup_dir, n) for n in SHARDED_WEIGHTS)
        meta, previous_meta = (os.path.join(self.backup_dir, n) for n in BACKUP_METADATA)
        sha = fingerprint(staged)
        if os.path.exists(latest):
            shutil.rmtree(previous, ignore_errors=True)
            os.replace(latest, previous)
        if os.path.exists(meta):
            os.replace(meta, previous_meta)
        os.replace(staged, latest)
        self._write_metadata(meta, sha)

    def _write_backup(self):
        os.makedirs(self.backup_dir, exist_ok=True)
        latest, previous = (os.path.join(self.backup_dir, n) for n in BACKUP_WEIGHTS)
        meta, previous_meta = (os.path.join(self.backup_dir, n) for n in BACKUP_METADATA)
        tmp = os.path.join(self.backup_dir, f".tmp-{os.getpid()}.weights.h5")
        with exact_lora_variables(self.model):
            self.model.save_weights(tmp, overwrite=True)
        sha = _sha256(tmp)
        # At every moment one metadata file matches an existing weights file (see find_backup).
        if os.path.exists(latest):
            os.replace(latest, previous)
        if os.path.exists(meta):
            os.replace(meta, previous_meta)
        os.replace(tmp, latest)
        self._write_metadata(meta, sha)

    def _write_metadata(self, meta, sha):
        states = [keras.ops.convert_to_numpy(v).tolist() for v in random_states(self.model)]
        if self.run_config is not None:  # the settings of this backup, before it is pointed to
            write_json(os.path.join(self.backup_dir, "run_config.json"), self.run_config)
        write_json(
            meta,
            {"epoch": self._current_epoch, "batch": 0, "weights_sha256": sha,
             "random_states": states},
        )  # fmt: skip


class AtomicModelCheckpoint(keras.callbacks.ModelCheckpoint):
    """`keras.callbacks.ModelCheckpoint` (fixed path) that writes through a temporary file.

    A model sharded over devices is written as a sharded checkpoint beside it instead
    (`last.keras` -> `last.sharded`: every process its own blocks, nothing gathered). With
    `save_best_only`, an epoch without the monitored metric (no validation that epoch,
    `validation_freq` > 1) is skipped quietly instead of with Keras' warning.
    """

    def on_epoch_end(self, epoch, logs=None):
        if self.save_best_only and (logs or {}).get(self.monitor) is None:
            return
        super().on_epoch_end(epoch, logs)

    def _get_file_path(self, epoch, batch, logs):
        folder, name = os.path.split(self.filepath)
        return os.path.join(folder, f".tmp-{name}")

    def _save_model(self, epoch, batch, logs):
        if is_sharded_model(self.model):  # `last.sharded`: every process writes its blocks
            path = sharded_path(self.filepath)
            if self._should_save_model(epoch, batch, logs, path):
                model, with_optimizer = sharded_form(self.model)
                save_sharded(model, path, include_optimizer=with_optimizer, overwrite=True)
            return
        with multihost.saving(self.model) as writer:
            if writer:
                self._write_checkpoint(epoch, batch, logs)

    def _write_checkpoint(self, epoch, batch, logs):
        tmp = self._get_file_path(epoch, batch, logs)
        if os.path.exists(tmp):
            os.remove(tmp)
        super()._save_model(epoch, batch, logs)
        if os.path.exists(tmp):
            os.replace(tmp, self.filepath)


def sharded_form(model):
    """`(model, include_optimizer)`: what a sharded run writes as a model (`model.sharded`,
    `last.sharded`). The model itself, or for a LoRA model, as `model.save()` does, a copy with
    the adapters merged into the kernels (`lora.merged_copy`; built in the active distribution,
    on the same layouts), without the optimizer (whose moments are the adapters')."""
    if lora.get_lora_settings(model) is None:
        return model, True
    return lora.merged_copy(model), False


def sharded_path(path):
    """Where a sharded model's `.keras` artefact goes: `last.keras` -> `last.sharded`."""
    return path[: -len(".keras")] + ".sharded" if path.endswith(".keras") else path + ".sharded"


def trim_csv_log(path, start_epoch):
    """Keeps the header and the rows of epochs before `start_epoch` of a CSVLogger file."""
    if not os.path.exists(path):
        return
    if not start_epoch:
        os.remove(path)
        return
    with open(path) as f:
        lines = f.read().splitlines()
    kept = lines[:1] + [ln for ln in lines[1:] if ln and int(ln.split(",")[0]) < start_epoch]
    write_text = "\n".join(kept) + "\n"

    def write(tmp):
        with open(tmp, "w") as f:
            f.write(write_text)

    atomic_write(path, write)
