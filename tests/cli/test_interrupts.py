"""Ctrl-C at any moment (issue 56): the command exits 130 with one line, no traceback, and the
same command then resumes the run, or reruns it, without --overwrite.

The interrupts are real SIGINTs the process sends itself at controlled moments (in the first
batch, before any backup; while TensorFlow traces the train step; right after model.keras is
written, before metrics.json), so the run's own handler (keras_vit/runner/interrupts.py) meets
them as it meets a Ctrl-C.
"""

import dataclasses
import os
import signal

import keras
import pytest

from keras_vit.cli import COMMANDS, main
from tests.helpers import backend_independent

pytest.importorskip("tensorflow")

INTERRUPTED = "interrupted. Rerun the same command to resume it."


def _sigint():
    os.kill(os.getpid(), signal.SIGINT)  # the handler runs as os.kill returns


def _one_line(capsys):
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


@backend_independent  # no framework: a stand-in command
def test_an_interrupt_a_library_turned_into_its_own_error_is_still_exit_130(monkeypatch, capsys):
    """TensorFlow tracing a function turns the KeyboardInterrupt into pybind11's RuntimeError
    ("MISMATCH of original and normalized active exception types: ORIGINAL InvalidArgumentError
    REPLACED BY KeyboardInterrupt", with the whole stack): the recorded SIGINT decides."""

    def run(args):
        try:
            _sigint()
        except KeyboardInterrupt:
            raise RuntimeError(
                "pybind11::error_already_set: MISMATCH of original and normalized active "
                "exception types: ORIGINAL InvalidArgumentError REPLACED BY KeyboardInterrupt"
            ) from None

    monkeypatch.setitem(COMMANDS, "weights", dataclasses.replace(COMMANDS["weights"], run=run))
    assert main(["weights"]) == 130
    err = _one_line(capsys)
    assert err == "keras-vit weights: interrupted." and "MISMATCH" not in err
    monkeypatch.setitem(
        COMMANDS, "weights", dataclasses.replace(COMMANDS["weights"], run=lambda a: 0)
    )
    assert main(["weights"]) == 0  # the next command starts with no interrupt on record


ARGV = ["pretrain", "--smoke", "--epochs", "2", "--steps-per-epoch", "2", "--validation-fraction",
        "0", "--verbose", "0", "--jit-compile", "false"]  # fmt: skip


@pytest.mark.slow  # three short runs of the CLI in this process (30-90 s on 2 busy cores)
# Once, on PyTorch (the fastest to train): the interrupt handling here is the runner's Python
# (signals, the run marker, atomic writes); saving and resuming per backend are
# tests/runner/test_runner.py's backup tests, and TensorFlow's tracing interrupt is its own test.
@pytest.mark.skipif(keras.backend.backend() != "torch", reason="runner interrupts, once")
def test_interrupted_before_the_first_backup_and_while_saving_then_resumed(
    tmp_path, monkeypatch, capsys
):
    """A Ctrl-C in the first batch leaves the marker, an empty log.csv and the events file: the
    same command reruns there without --overwrite. A Ctrl-C right after model.keras is
    written: the same command resumes ("all 2 epochs are trained") and writes the results."""
    from keras_vit.runner import run as run_module

    out = tmp_path / "run"
    argv = [*ARGV, "--out", str(out)]

    class InterruptFirstBatch(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            _sigint()

    callbacks = run_module.training_callbacks
    monkeypatch.setattr(
        run_module, "training_callbacks",
        lambda *a, **k: [*callbacks(*a, **k), InterruptFirstBatch()],
    )  # fmt: skip
    assert main(argv) == 130
    assert _one_line(capsys) == f"keras-vit pretrain: {INTERRUPTED}"
    assert {"log.csv", ".keras_vit_run.json"} <= set(os.listdir(out))
    assert not (out / "backup" / "latest.weights.h5").exists()  # before the first backup
    monkeypatch.setattr(run_module, "training_callbacks", callbacks)

    write = run_module.atomic_write

    def write_then_interrupt(path, function):
        write(path, function)
        if os.path.basename(path) == "model.keras":
            _sigint()

    monkeypatch.setattr(run_module, "atomic_write", write_then_interrupt)
    assert main(argv) == 130  # no --overwrite: the first attempt is rerun
    assert _one_line(capsys) == f"keras-vit pretrain: {INTERRUPTED}"
    assert (out / "model.keras").exists() and not (out / "metrics.json").exists()
    monkeypatch.setattr(run_module, "atomic_write", write)
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "all 2 epochs are trained" in printed
    assert (out / "metrics.json").exists() and not (out / "backup").exists()


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="TensorFlow's tracing")
def test_interrupted_while_tensorflow_traces_the_train_step(tmp_path, monkeypatch, capsys):
    """The battery's case: a Ctrl-C while TensorFlow traces ended in exit 1 and pybind11's
    MISMATCH error with the whole stack. Now: exit 130, one line, and the folder is the same
    command's to rerun (no --overwrite needed)."""
    from keras_vit.runner import pretrain
    from keras_vit.runner.output import prepare_out, release_out

    build = pretrain.build_model

    def build_interrupting(num_classes, config, name=None):
        model, info = build(num_classes, config, name=name)
        call = model.call

        def traced_call(*args, **kwargs):
            if not getattr(traced_call, "done", False):
                traced_call.done = True
                _sigint()  # inside the first call: TensorFlow is tracing the train step
            return call(*args, **kwargs)

        model.call = traced_call
        return model, info

    monkeypatch.setattr(pretrain, "build_model", build_interrupting)
    out = tmp_path / "run"
    argv = [*ARGV, "--epochs", "1", "--out", str(out)]
    assert main(argv) == 130
    assert _one_line(capsys) == f"keras-vit pretrain: {INTERRUPTED}"
    assert prepare_out({"out": str(out)}) == str(out)  # what the rerun does first: no refusal
    release_out(str(out))
