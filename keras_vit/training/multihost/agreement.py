"""Decisions taken by process 0 (`run_on_chief`) and checks that every process agrees
(`check_same`); an error reaches every process, so none is left waiting."""

import hashlib
import json

import numpy as np

from keras_vit.training.multihost.processes import (
    allgather,
    broadcast_json,
    is_chief,
    process_count,
    process_index,
    raise_everywhere,
)

_ERROR_TYPES = {
    cls.__name__: cls
    for cls in (
        ValueError,
        FileExistsError,
        FileNotFoundError,
        PermissionError,
        NotADirectoryError,
        IsADirectoryError,
        ConnectionError,
    )
}


def run_on_chief(fn):
    """Runs `fn()` in process 0 only and returns its (JSON-able) result in every process.

    An exception in process 0 is raised in every process (same type for the usual `OSError` and
    `ValueError` kinds, else `RuntimeError`), so no process waits for one that stopped. With one
    process this is just `fn()`.
    """
    if process_count() == 1:
        return fn()
    outcome, error = None, None
    if is_chief():
        try:
            outcome = {"value": fn()}
        except Exception as caught:  # noqa: BLE001  (reported to every process, then raised)
            error = caught
            outcome = {"error": [type(caught).__name__, str(caught)]}
    outcome = broadcast_json(outcome)
    if "error" in outcome:
        if error is None:
            kind, message = outcome["error"]
            error = _ERROR_TYPES.get(kind, RuntimeError)(
                message if kind in _ERROR_TYPES else f"{kind} in process 0: {message}"
            )
        raise_everywhere(error)
    return outcome["value"]


def _digest(value):
    text = json.dumps(value, sort_keys=True, default=repr).encode()
    return np.frombuffer(hashlib.sha256(text).digest()[:16], dtype=np.int32)


def check_same(what, value, hint=""):
    """Checks that every process has the same JSON-able `value`; else raises everywhere.

    The `ValueError` names `what`, the processes that differ from process 0 and, in those
    processes, the keys (for dicts) or the values that differ; `hint` says what to do.
    """
    if process_count() == 1:
        return
    digests = allgather(_digest(value))
    differ = [i for i in range(len(digests)) if not np.array_equal(digests[i], digests[0])]
    if not differ:
        return
    reference = broadcast_json(value)
    detail = ""
    if process_index() in differ:
        if isinstance(value, dict) and isinstance(reference, dict):
            keys = sorted(
                k for k in set(value) | set(reference)
                if _digest(value.get(k)).tobytes() != _digest(reference.get(k)).tobytes()
            )
            pairs = ", ".join(f"{k}={value.get(k)!r} (process 0: {reference.get(k)!r})"
                              for k in keys[:6])
            detail = f" This process (process {process_index()}) has {pairs}."
        else:
            detail = (
                f" This process (process {process_index()}) has {value!r}; process 0 has "
                f"{reference!r}."
            )
    raise_everywhere(
        ValueError(
            f"Every process must have the same {what}, but process(es) "
            f"{', '.join(map(str, differ))} differ from process 0.{detail} {hint}".rstrip()
        )
    )

