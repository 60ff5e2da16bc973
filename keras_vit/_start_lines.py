"""TensorFlow's start-up lines, at the log level the user asked for (`TF_CPP_MIN_LOG_LEVEL`).

Where they come from: TensorFlow's GPU wheels carry a CUDA runtime stub in two shared libraries
(`libtensorflow_framework.so.2` and `_pywrap_profiler_plugin.so`, each with its own copy of
absl). While `import tensorflow` loads them, their static initialisers look for the CUDA
runtime and log `I... cudart_stub.cc] Could not find cuda drivers on your machine` through absl
before absl is initialised, so absl writes each line to file descriptor 2 with the notice
`WARNING: All log messages before absl::InitializeLog() is called are written to STDERR`, and
before TensorFlow has read `TF_CPP_MIN_LOG_LEVEL`: that variable cannot hide them (the test
runner sets it to 3 and still showed four lines per process). TensorFlow's first device listing
then probes the CUDA platform (`E... cuda_platform.cc] failed call to cuInit` on a machine
without a GPU), which `TF_CPP_MIN_LOG_LEVEL` does govern.

`install()` (called by `import keras_vit`, before any framework) makes TensorFlow's import,
and its first device listing, run with file descriptor 2 sent to a temporary file, then writes
back every line at or above the level: `TF_CPP_MIN_LOG_LEVEL` when set (0 all, 1 warnings, 2
errors, 3 fatal only), else 1 (the informational lines and absl's notice are left out; warnings
and errors, such as a failed cuInit on a machine whose GPU does not start, are shown).
Everything else on file descriptor 2 is written back as it was; a failing import shows all of
it. Nothing is done when TensorFlow was imported before keras_vit (too late), and no other
module's import is touched. No framework is imported here.
"""

import importlib.abc
import importlib.machinery
import os
import re
import sys
import tempfile

# absl's severity letter -> TensorFlow's TF_CPP_MIN_LOG_LEVEL scale.
_LEVELS = {"I": 0, "W": 1, "E": 2, "F": 3}
_ABSL_LINE = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:\d+\.\d+\s")
NOTICE = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
DEFAULT_LEVEL = 1


def min_log_level(environ=None):
    """The level lines are written back at: `TF_CPP_MIN_LOG_LEVEL` (0-3), else `DEFAULT_LEVEL`."""
    value = (os.environ if environ is None else environ).get("TF_CPP_MIN_LOG_LEVEL", "").strip()
    return int(value) if value in ("0", "1", "2", "3") else DEFAULT_LEVEL


def keep_lines(text, level):
    """The lines of `text` at or above `level` (an absl line's own continuation lines go with
    it; absl's notice shows only at level 0; lines of no log format are always kept).

    Example:

    >>> text = NOTICE + "\\nI0000 00:00:1.5 7 stub.cc:31] no cuda\\nE0000 00:00:2.5 7 p.cc:52] x\\n"
    >>> keep_lines(text, 1)
    'E0000 00:00:2.5 7 p.cc:52] x\\n'
    >>> keep_lines("plain words\\n", 3)
    'plain words\\n'
    """
    kept, keep = [], True
    for line in text.splitlines(keepends=True):
        if line.strip() == NOTICE:
            if level == 0:
                kept.append(line)
            continue
        match = _ABSL_LINE.match(line)
        if match:
            keep = _LEVELS[match.group(1)] >= level
        if keep:
            kept.append(line)
    return "".join(kept)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow" or "tensorflow" in sys.modules:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Loader(spec.loader)
        return spec


class _Loader(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def __getattr__(self, name):  # the rest of the loader's interface (resources, ...)
        return getattr(self.loader, name)

    def exec_module(self, module):
        text = _run_captured(lambda: self._load(module))  # a failure writes all of it back
        shown = keep_lines(text, min_log_level())
        if shown:
            try:
                os.write(2, shown.encode("utf-8", "replace"))
            except OSError:
                pass

    def _load(self, module):
        self.loader.exec_module(module)
        try:  # the CUDA platform is probed on the first device listing: capture it too
            module.config.list_physical_devices()
        except Exception:  # noqa: BLE001  (only the start-up lines are at stake here)
            pass


def _run_captured(function):
    """Runs `function` with file descriptor 2 sent to a temporary file; returns what it wrote
    there (re-raising what `function` raised, after writing all of it back)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            function()
        except BaseException:
            sys.stderr.flush()
            os.dup2(saved, 2)
            sink.seek(0)
            captured = sink.read()
            if captured:
                os.write(2, captured)
            raise
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        sink.seek(0)
        return sink.read().decode("utf-8", "replace")


_FINDER = _Finder()


def install():
    """Puts the finder first on `sys.meta_path` (once); nothing when TensorFlow is loaded."""
    if "tensorflow" in sys.modules or _FINDER in sys.meta_path:
        return
    sys.meta_path.insert(0, _FINDER)


def uninstall():
    """Takes the finder off `sys.meta_path` (`keras-vit --debug`: every line as printed)."""
    while _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
