"""Ctrl-C at any moment: every SIGINT is recorded, whatever a library does with the exception.

`install()` puts in a SIGINT handler that counts the interrupt and raises `KeyboardInterrupt`.
A library that runs Python inside C++ (TensorFlow tracing a function, a `tf.data` map) may turn
that exception into one of its own (pybind11's "MISMATCH of original and normalized active
exception types ... REPLACED BY KeyboardInterrupt", a TensorFlow `UnknownError`) or swallow it;
`interrupted()` still says that Ctrl-C came, so the command line ends with exit 130 and the run
is never recorded as finished (`keras_vit.runner.output.check_not_interrupted`). No framework is
imported here.
"""

import signal
import threading

_state = {"count": 0, "previous": None}


def _on_sigint(signum, frame):
    _state["count"] += 1
    raise KeyboardInterrupt


def install(reset=True):
    """Installs the recording SIGINT handler (main thread only); `reset` clears the record."""
    if reset:
        _state["count"] = 0
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is not _on_sigint:
        _state["previous"] = previous
        signal.signal(signal.SIGINT, _on_sigint)


def restore():
    """Puts back the SIGINT handler `install` replaced."""
    if threading.current_thread() is not threading.main_thread():
        return
    previous = _state["previous"]
    if previous is not None and signal.getsignal(signal.SIGINT) is _on_sigint:
        signal.signal(signal.SIGINT, previous)
    _state["previous"] = None


def interrupted():
    """Whether Ctrl-C came since the last `install(reset=True)`."""
    return _state["count"] > 0


def check():
    """Raises `KeyboardInterrupt` when Ctrl-C came (even if a library caught the first one)."""
    if interrupted():
        raise KeyboardInterrupt
