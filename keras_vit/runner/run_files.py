"""What a training run writes into its `--out` folder, by exact name (no framework imported).

`--overwrite` removes these entries and nothing else: a user's own files in the folder, even in
the run's own sub-folders (`checkpoints/my_best.keras`, `logs/notes.txt`), are never touched, and
a sub-folder is removed only when it is empty afterwards. The run marker (`MARKER`), written
first by every run, says that the folder belongs to a keras_vit run: an unfinished run's folder
(interrupted at any moment, even before its first backup) is resumed or rerun by the same
command without `--overwrite`.
"""

import fnmatch
import os
import shutil

from keras_vit.distribution.checkpoint_files import is_checkpoint_file

MARKER = ".keras_vit_run.json"
LOCK = ".keras_vit.lock"

# Entries a run writes, relative to `out` (`fnmatch` patterns). A staged write of
# `keras_vit.saving.atomic_write` lives in `.<name>.tmp-*` beside its target until it is moved.
_FILES = ("metrics.json", "model.keras", "encoder.keras", "log.csv", "reconstructions.png",
          "lora.npz", MARKER)  # fmt: skip
_BACKUP = ("latest.weights.h5", "previous.weights.h5", "training_metadata.json",
           "previous_metadata.json", "run_config.json", ".tmp-*.weights.h5")  # fmt: skip
_CHECKPOINTS = ("last.keras", "best.keras", ".tmp-last.keras", ".tmp-best.keras")
_EVENTS = "events.out.tfevents.*"
# A run sharded over devices (keras_vit.distribution) writes sharded checkpoint folders instead
# of .keras / .weights.h5 files, each staged in `.<name>.partial` (and the one it replaces
# moved to `.<name>.old`) by keras_vit.distribution.checkpoint.save_sharded.
SHARDED = ("model.sharded", "encoder.sharded", "backup/latest.sharded",
           "backup/previous.sharded", "backup/next.sharded", "checkpoints/last.sharded",
           "checkpoints/best.sharded")  # fmt: skip


def _sharded_names(path):
    folder, name = os.path.split(path)
    return [os.path.join(folder, n) for n in (name, f".{name}.partial", f".{name}.old")]


_SHARDED_ENTRIES = tuple(n for path in SHARDED for n in _sharded_names(path))
# The run's own folders, deepest first: removed when nothing else is left in them.
FOLDERS = ("logs/train", "logs/validation", "logs", "checkpoints", "backup")
RUN_ENTRIES = (
    *_FILES,
    *(f"backup/{name}" for name in _BACKUP),
    *(f"checkpoints/{name}" for name in _CHECKPOINTS),
    f"logs/{_EVENTS}",
    f"logs/train/{_EVENTS}",
    f"logs/validation/{_EVENTS}",
    *_SHARDED_ENTRIES,
)


def _staged(name):
    """The pattern of `atomic_write`'s staging folder for an entry named `name`."""
    folder, base = os.path.split(name)
    return os.path.join(folder, f".{base}.tmp-*")


def _through_link(out, folder):
    parts = folder.split("/") if folder else []
    return any(os.path.islink(os.path.join(out, *parts[: i + 1])) for i in range(len(parts)))


def run_entries(out):
    """The paths under `out` that a run wrote, by the names in `RUN_ENTRIES` (sorted, relative).

    Example:

    >>> import tempfile
    >>> out = tempfile.mkdtemp()
    >>> os.makedirs(os.path.join(out, "checkpoints"))
    >>> for name in ("log.csv", "notes.txt", "checkpoints/last.keras", "checkpoints/mine.keras"):
    ...     open(os.path.join(out, name), "w").close()
    >>> run_entries(out)
    ['checkpoints/last.keras', 'log.csv']
    """
    found = []
    patterns = [
        *RUN_ENTRIES,
        *(_staged(p) for p in RUN_ENTRIES if "*" not in p and p not in _SHARDED_ENTRIES),
    ]
    folders = {os.path.dirname(p) for p in patterns}
    for folder in sorted(folders):
        path = os.path.join(out, folder)
        if not os.path.isdir(path) or _through_link(out, folder):
            continue  # never into a folder a link points to (it may be anything of the user's)
        for name in sorted(os.listdir(path)):
            relative = os.path.join(folder, name) if folder else name
            if any(fnmatch.fnmatchcase(relative, p) for p in patterns):
                found.append(relative)
    return sorted(found)


def remove_run_entries(out):
    """Removes what a run wrote in `out` (`run_entries`), then its folders left empty.

    Returns the relative paths removed. A user's file anywhere in `out` stays, and so does
    every folder that still holds something.
    """
    removed = []
    for relative in run_entries(out):
        path = os.path.join(out, relative)
        if relative in _SHARDED_ENTRIES and os.path.isdir(path) and not os.path.islink(path):
            _remove_sharded(path)  # a sharded checkpoint: its own files (a user's stay)
        elif os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)  # a staging folder of ours (`.<name>.tmp-*`)
        else:
            os.remove(path)
        removed.append(relative)
    for folder in FOLDERS:
        path = os.path.join(out, folder)
        if os.path.isdir(path) and not _through_link(out, folder) and not os.listdir(path):
            os.rmdir(path)
            removed.append(folder)
    return removed


def _remove_sharded(path):
    """Removes a sharded checkpoint's own files from the folder `path` (its index and parts,
    by name), then the folder if nothing else is left in it."""
    for name in os.listdir(path):
        if is_checkpoint_file(name) and os.path.isfile(os.path.join(path, name)):
            os.remove(os.path.join(path, name))
    if not os.listdir(path):
        os.rmdir(path)


def is_run_folder(out):
    """Whether a keras_vit run wrote its marker into `out`."""
    return os.path.isfile(os.path.join(out, MARKER))
