"""The output-folder policy: a finished run is never replaced unless asked (`overwrite`), an
interrupted one is resumed; a bad `out` is refused before anything is loaded.

Files a run writes (`keras_vit.runner.run_files`, by exact name) found in a folder that holds
no run to resume are not replaced unless asked either (a user's own `log.csv`), and
`overwrite` removes exactly those, never a user's other files. Every run first writes its marker
(`.keras_vit_run.json`): a folder an unfinished run left (a Ctrl-C or a kill at any moment, even
before the first backup) is resumed, or rerun, by the same command. A folder in use by a
live run is refused, with or without `overwrite`: the run holds `out/.keras_vit.lock` (naming
its process and host) until it ends; a lock whose process has died on this host is taken over.
A run that fails leaves no empty folder behind that it created.

Ctrl-C: the run's SIGINT handler is installed before the lock file is written (`take_lock`) and
records every interrupt; a run interrupted at any moment, even inside a library that swallows
`KeyboardInterrupt`, raises it again before it could be recorded as finished
(`check_not_interrupted`), so it ends with exit 130 and stays resumable.
"""

import json
import os
import socket

from keras_vit import version
from keras_vit.runner import interrupts
from keras_vit.runner.interrupts import _on_sigint  # noqa: F401  (the handler, for tests)
from keras_vit.runner.run_files import (
    LOCK,
    MARKER,
    is_run_folder,
    remove_run_entries,
    run_entries,
)
from keras_vit.saving import check_writable

# The run's SIGINT record (`keras_vit.runner.interrupts`), under the names the runner uses.
install_interrupt_handler = interrupts.install
restore_interrupt_handler = interrupts.restore
check_not_interrupted = interrupts.check

FINAL_ARTEFACTS = ("metrics.json", "model.keras", "encoder.keras", "log.csv")
# (`model.sharded`, `encoder.sharded`: a model sharded over devices, keras_vit.distribution)
FINAL_FOLDERS = ("checkpoints", "logs", "backup", "model.sharded", "encoder.sharded")


def is_finished(out):
    metrics = os.path.lexists(os.path.join(out, "metrics.json"))
    model = any(os.path.lexists(os.path.join(out, n)) for n in ("model.keras", "model.sharded"))
    return metrics or (model and not os.path.lexists(os.path.join(out, "backup")))


def _top_level(entries):
    names = []
    for entry in entries:
        name = entry.split("/", 1)[0]
        if name not in names and name != MARKER:
            names.append(name)
    return names


def prepare_out(config):
    """Checks the output folder `config["out"]` and creates it; returns its path.

    Raises `NotADirectoryError` when `out` (or a parent) is a file, `PermissionError` when it
    cannot be written, and `FileExistsError` when it holds a finished run, or files a run
    writes that no unfinished run of keras_vit left (a user's own `log.csv`), and `overwrite`
    is False. The folder of an unfinished run (its marker `.keras_vit_run.json`, written
    first by every run) is resumed from its backup, or rerun when it has none (a Ctrl-C in the
    first epoch). With `overwrite=True` exactly what a run writes is removed first
    (`keras_vit.runner.run_files`), never a user's other files, and a new run starts.
    """
    out = config["out"]
    if not isinstance(out, (str, os.PathLike)) or not str(out):
        raise ValueError(f"out (--out) must be a folder path. Received: out={out!r}")
    out = os.fspath(out)
    if os.path.lexists(out) and not os.path.isdir(out):
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
    if os.path.isdir(out) and not os.access(out, os.W_OK | os.X_OK):
        raise PermissionError(f"--out {out!r} is not writable.")
    check_writable(out, "--out folder")  # also a read-only file system, before any work
    entries = []
    if os.path.isdir(out):
        check_lock(out)
        entries = run_entries(out)
    finished = is_finished(out)
    # An unfinished run: ours (its marker), or an earlier version's with a backup.
    unfinished = not finished and (is_run_folder(out) or os.path.isdir(os.path.join(out, "backup")))
    if entries and not unfinished and not config.get("overwrite"):
        what = "a finished run" if finished else "files a run writes"
        raise FileExistsError(
            f"{out!r} holds {what} ({', '.join(_top_level(entries))}) and no run to resume. "
            "Pass --overwrite (config key overwrite=True) to replace them (only the files a run "
            "writes: your other files stay), or choose another --out."
        )
    if entries and config.get("overwrite"):
        remove_run_entries(out)  # exactly what a run writes; a new run starts
    if not os.path.isdir(out):
        os.makedirs(out)
        _created.add(os.path.abspath(out))
    take_lock(out)
    _write_marker(out)
    return out


def _write_marker(out):
    """Marks `out` as a keras_vit run's folder (before the run writes anything else)."""
    path = os.path.join(out, MARKER)
    if os.path.isfile(path):
        return
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump({"keras_vit": version.__version__}, f)
    os.replace(tmp, path)


_created = set()  # folders prepare_out created in this process (removed again if left empty)


def _lock_owner(out):
    """`{"pid", "host"}` of the lock in `out`, `{}` for an unreadable one, None without one."""
    try:
        with open(os.path.join(out, LOCK)) as f:
            owner = json.load(f)
        return owner if isinstance(owner, dict) else {}
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _mine(owner):
    return owner.get("host") == socket.gethostname() and owner.get("pid") == os.getpid()


def check_lock(out):
    """Raises `FileExistsError` when a live run (another process) holds `out`'s lock."""
    owner = _lock_owner(out)
    if not owner or _mine(owner):
        return
    pid, host = owner.get("pid"), owner.get("host")
    if host == socket.gethostname() and isinstance(pid, int) and not _alive(pid):
        return  # stale: its process is gone; taken over by take_lock
    where = "this machine" if host == socket.gethostname() else f"host {host!r}"
    raise FileExistsError(
        f"{out!r} is in use by a running keras-vit run (process {pid} on {where}; lock file "
        f"{os.path.join(out, LOCK)!r}), with or without --overwrite: choose another --out, or "
        "wait for it to end (delete the lock file only if no run uses the folder)."
    )


def take_lock(out):
    """Writes `out/.keras_vit.lock` naming this process (after `check_lock`)."""
    check_lock(out)
    interrupts.install()  # before the lock file: a Ctrl-C from now on is recorded
    path = os.path.join(out, LOCK)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump({"pid": os.getpid(), "host": socket.gethostname()}, f)
    os.replace(tmp, path)


def release_out(out, failed=False):
    """Removes this process's lock from `out`; after a failure that left nothing of a run
    (only the marker and the recorded settings), removes those too, and the folder
    `prepare_out` created when nothing else is in it."""
    owner = _lock_owner(out)
    if owner and _mine(owner):
        os.remove(os.path.join(out, LOCK))
    interrupts.restore()
    folder = os.path.abspath(out)
    if not failed:  # the run's folder now holds its results: never removed
        _created.discard(folder)
        return
    if not os.path.isdir(folder):
        return
    if set(run_entries(folder)) <= {MARKER, "backup", "backup/run_config.json"}:
        for name in (MARKER, os.path.join("backup", "run_config.json")):
            if os.path.isfile(os.path.join(folder, name)):
                os.remove(os.path.join(folder, name))
        backup = os.path.join(folder, "backup")
        if os.path.isdir(backup) and not os.listdir(backup):
            os.rmdir(backup)
    if folder in _created and not os.listdir(folder):
        os.rmdir(folder)
        _created.discard(folder)
