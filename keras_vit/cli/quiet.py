"""A quiet command line: only keras_vit's own output unless `--debug`.

Within `quiet(prog, debug)` the variables TensorFlow's C++ logging reads are set
(`TF_CPP_MIN_LOG_LEVEL`, gRPC's verbosity), TensorFlow, JAX and PyTorch are imported (whenever
the command first imports them) with the process's stderr (file descriptor 2) sent to a temporary
file, so the lines absl prints before its logging is initialised (oneDNN, "Could not find cuda
drivers", `cuInit`) never reach the terminal, and the frameworks' Python loggers are lowered to
errors.
keras_vit's warnings print as one line `keras-vit COMMAND: warning: ...` (no source file and
line), each text once; other libraries' warnings are dropped. With `debug` everything shows as
the libraries print it. A failing import prints what was captured.
"""

import contextlib
import importlib.abc
import importlib.machinery
import logging
import os
import sys
import tempfile
import warnings

from keras_vit import _start_lines

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Python loggers of the frameworks, lowered to errors unless --debug.
FRAMEWORK_LOGGERS = ("absl", "tensorflow", "jax", "jax._src.xla_bridge", "torch", "h5py")
ENVIRONMENT = {"TF_CPP_MIN_LOG_LEVEL": "3", "GRPC_VERBOSITY": "ERROR", "GLOG_minloglevel": "3"}


@contextlib.contextmanager
def captured_stderr():
    """Sends file descriptor 2 to a temporary file within; yields a function reading it."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield lambda: (sink.seek(0), sink.read().decode("utf-8", "replace"))[1]
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def _issuer_file():
    """The file of the code that called `warnings.warn` (the frame below the warnings module)."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if name != __file__ and not name.endswith(("warnings.py", "<frozen warnings>")):
            return name
        frame = frame.f_back
    return ""


def is_ours(filename):
    """Whether `filename` is a file of the keras_vit package."""
    return os.path.abspath(filename).startswith(PACKAGE_DIR + os.sep)


def warning_printer(prog, shown):
    """A `warnings.showwarning` printing keras_vit's warnings once each, others dropped."""

    def show(message, category, filename, lineno, file=None, line=None):
        if not (is_ours(filename) or is_ours(_issuer_file())):
            return
        text = " ".join(str(message).split())
        if text in shown:
            return
        shown.add(text)
        print(f"{prog}: warning: {text}", file=file or sys.stderr)

    return show


class QuietImports(importlib.abc.MetaPathFinder):
    """Imports the frameworks in `NAMES` with file descriptor 2 captured (their C++ start-up
    lines), whenever the command first imports them; a failing import prints what was
    captured."""

    NAMES = ("tensorflow", "jax", "torch")

    def find_spec(self, name, path=None, target=None):
        if name not in self.NAMES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _QuietLoader(spec.loader)
        return spec


class _QuietLoader(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        with captured_stderr() as read:
            try:
                self.loader.exec_module(module)
                if module.__name__ == "tensorflow":  # cuInit and device lines come on first use
                    module.config.list_physical_devices()
            except KeyboardInterrupt:  # Ctrl-C while a framework loads: no start-up lines
                raise
            except BaseException:
                text = read()
                if text:
                    end = "" if text.endswith("\n") else "\n"
                    print(text, file=sys.__stderr__, end=end)
                raise


@contextlib.contextmanager
def quiet(prog, debug):
    """Within it a command's output is quiet (default) or everything (`debug`).

    Warning filters, `warnings.showwarning` and the loggers' levels are restored on exit (the
    command may run inside a longer process, e.g. a test).

    Args:
        prog: str. The command's name for warning lines (`keras-vit pretrain`).
        debug: bool. Show the frameworks' logs and warnings as they print them.
    """
    if debug:  # every line as the libraries print it, TensorFlow's start-up lines included
        _start_lines.uninstall()
        yield
        return
    for key, value in ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    loggers = {name: logging.getLogger(name) for name in FRAMEWORK_LOGGERS}
    levels = {name: logger.level for name, logger in loggers.items()}
    with warnings.catch_warnings():
        warnings.showwarning = warning_printer(prog, set())
        warnings.simplefilter("default")  # each warning reaches the printer, which dedupes
        for logger in loggers.values():
            logger.setLevel(logging.ERROR)
        finder = QuietImports()
        sys.meta_path.insert(0, finder)
        try:
            yield
        finally:
            sys.meta_path.remove(finder)
            for name, logger in loggers.items():
                logger.setLevel(levels[name])
