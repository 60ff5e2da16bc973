"""The output-folder policy: a finished run is never replaced unless asked (`overwrite`), an
interrupted one is resumed; a bad `out` is refused before anything is loaded.

Files the run writes (`FINAL_ARTEFACTS`, `FINAL_FOLDERS`) found in a folder that holds no run
to resume are not replaced unless asked either (a user's own `log.csv`). A folder in use by a
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
import shutil
import signal
import socket
import threading

from keras_vit.saving import check_writable

_interrupts = {"count": 0, "previous": None}


def _on_sigint(signum, frame):
    _interrupts["count"] += 1
    raise KeyboardInterrupt


def install_interrupt_handler():
    """Installs the run's SIGINT handler (main thread only) and clears the interrupt record."""
    _interrupts["count"] = 0
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is not _on_sigint:
        _interrupts["previous"] = previous
    signal.signal(signal.SIGINT, _on_sigint)


def restore_interrupt_handler():
    """Puts back the SIGINT handler `install_interrupt_handler` replaced."""
    if threading.current_thread() is not threading.main_thread():
        return
    previous = _interrupts["previous"]
    if previous is not None and signal.getsignal(signal.SIGINT) is _on_sigint:
        signal.signal(signal.SIGINT, previous)
    _interrupts["previous"] = None


def check_not_interrupted():
    """Raises `KeyboardInterrupt` when Ctrl-C came since the run took its lock (even if a
    library caught the first `KeyboardInterrupt`): an interrupted run is never finished."""
    if _interrupts["count"]:
        raise KeyboardInterrupt

FINAL_ARTEFACTS = ("metrics.json", "model.keras", "encoder.keras", "log.csv")
FINAL_FOLDERS = ("checkpoints", "logs", "backup")


def is_finished(out):
    metrics = os.path.lexists(os.path.join(out, "metrics.json"))
    model = os.path.lexists(os.path.join(out, "model.keras"))
    return metrics or (model and not os.path.lexists(os.path.join(out, "backup")))


def prepare_out(config):
    """Checks the output folder `config["out"]` and creates it; returns its path.

    Raises `NotADirectoryError` when `out` (or a parent) is a file, `PermissionError` when it
    cannot be written, and `FileExistsError` when it holds a finished run and `overwrite` is
    False. With `overwrite=True` the old artefacts are removed first; an interrupted run (a
    backup, no final metrics) is left in place to resume.
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
    if os.path.isdir(out):
        check_lock(out)
    ours = [
        name
        for name in (*FINAL_ARTEFACTS, *FINAL_FOLDERS)
        if os.path.lexists(os.path.join(out, name))
    ]
    resumable = os.path.isdir(os.path.join(out, "backup")) and not is_finished(out)
    if ours and not resumable:
        if not config.get("overwrite"):
            what = "a finished run" if is_finished(out) else "files a run writes"
            raise FileExistsError(
                f"{out!r} holds {what} ({', '.join(ours)}) and no run to resume. Pass "
                "--overwrite (config key overwrite=True) to replace them, or choose another --out."
            )
        for name in ours:
            path = os.path.join(out, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.remove(path)
    if not os.path.isdir(out):
        os.makedirs(out)
        _created.add(os.path.abspath(out))
    take_lock(out)
    return out


LOCK = ".keras_vit.lock"
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
    install_interrupt_handler()  # before the lock file: a Ctrl-C from now on is recorded
    path = os.path.join(out, LOCK)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump({"pid": os.getpid(), "host": socket.gethostname()}, f)
    os.replace(tmp, path)


def release_out(out, failed=False):
    """Removes this process's lock from `out`; after a failure, also the folder `prepare_out`
    created when nothing else is in it."""
    owner = _lock_owner(out)
    if owner and _mine(owner):
        os.remove(os.path.join(out, LOCK))
    restore_interrupt_handler()
    folder = os.path.abspath(out)
    if not failed:  # the run's folder now holds its results: never removed
        _created.discard(folder)
    if not (failed and folder in _created and os.path.isdir(folder)):
        return
    backup = os.path.join(folder, "backup")
    if os.path.isdir(backup) and os.listdir(backup) == ["run_config.json"]:  # no weights yet
        shutil.rmtree(backup)
    if not os.listdir(folder):
        os.rmdir(folder)
        _created.discard(folder)
