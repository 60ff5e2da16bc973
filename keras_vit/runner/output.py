"""The output-folder policy: a finished run is never replaced unless asked (`overwrite`), an
interrupted one is resumed; a bad `out` is refused before anything is loaded."""

import os
import shutil

FINAL_ARTEFACTS = ("metrics.json", "model.keras", "encoder.keras", "log.csv")
FINAL_FOLDERS = ("checkpoints", "logs", "backup")


def is_finished(out):
    metrics = os.path.exists(os.path.join(out, "metrics.json"))
    model = os.path.exists(os.path.join(out, "model.keras"))
    return metrics or (model and not os.path.exists(os.path.join(out, "backup")))


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
    if os.path.exists(out) and not os.path.isdir(out):
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
    if os.path.isdir(out) and is_finished(out):
        if not config.get("overwrite"):
            raise FileExistsError(
                f"{out!r} holds a finished run (metrics.json / model.keras). Pass --overwrite "
                "(config key overwrite=True) to replace it, or choose another --out."
            )
        for name in FINAL_ARTEFACTS:
            if os.path.exists(os.path.join(out, name)):
                os.remove(os.path.join(out, name))
        for name in FINAL_FOLDERS:
            shutil.rmtree(os.path.join(out, name), ignore_errors=True)
    os.makedirs(out, exist_ok=True)
    return out

