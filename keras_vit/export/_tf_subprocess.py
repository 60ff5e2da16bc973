"""Runs an export function under Keras' TensorFlow backend, in this process or a child one.

Exporters (SavedModel, ONNX, later LiteRT) trace the model with TensorFlow.
Under the TensorFlow backend that happens here; under JAX or PyTorch the model
is saved to a temporary `.keras` file (weights load identically on every
backend) and a child process with `KERAS_BACKEND=tensorflow` loads it
(`compile=False`) and calls the same function. The request and the reply
travel as JSON; an exception in the child is raised again here, with its type
(when it is one of the usual ones) and its message.
"""

import importlib
import json
import os
import subprocess
import sys
import tempfile

import keras

from keras_vit.export import _checks

# Exceptions the child may raise that the parent raises again with the same type.
_ERROR_TYPES = {
    error.__name__: error
    for error in (
        ValueError,
        FileExistsError,
        FileNotFoundError,
        IsADirectoryError,
        NotADirectoryError,
        PermissionError,
        ImportError,
    )
}


def run_with_tensorflow(model, function, request, *, method="auto"):
    """Calls `function(model, **request)` with Keras' TensorFlow backend; returns its reply.

    Args:
        model: a `keras.Model`, or the path of a `.keras` file.
        function: a module-level function `(model, **request) -> dict`
            (JSON-able), e.g. the writer of one export format.
        request: dict of JSON-able keyword arguments for `function`.
        method: `"auto"` (in this process under the TensorFlow backend, a
            subprocess otherwise) or `"subprocess"` (always a subprocess).

    Returns:
        `(how, reply)`: `"in_process"` or `"subprocess"`, and what
        `function` returned.

    Raises:
        ValueError, FileExistsError, ...: what `function` raised (in the child
            process: the same type, its message naming the subprocess).
        RuntimeError: the child process died without a reply (its output's
            tail is in the message).
    """
    _checks.check_method(method)
    if method == "auto" and keras.backend.backend() == "tensorflow":
        if not isinstance(model, keras.Model):
            model = _checks.load_model(model)
        elif any(getattr(layer, "lora_enabled", False) for layer in model._flatten_layers()):
            # LoRA adapters folded into the kernels (a copy: the model is left as it is), as
            # the `.keras` file of the subprocess path has them.
            from keras_vit.training.lora import merged_copy

            model = merged_copy(model)
        return "in_process", function(model, **request)
    return "subprocess", _run_in_subprocess(model, function, request)


def _package_root():
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run_in_subprocess(model, function, request):
    with tempfile.TemporaryDirectory(prefix="keras_vit_export_") as tmp:
        if isinstance(model, keras.Model):
            model_path = os.path.join(tmp, "model.keras")
            model.save(model_path)
        else:
            model_path = os.path.abspath(os.fspath(model))
        job = dict(
            function=f"{function.__module__}:{function.__qualname__}",
            model_path=model_path,
            request=request,
            result_path=os.path.join(tmp, "result.json"),
        )
        job_path = os.path.join(tmp, "job.json")
        with open(job_path, "w") as f:
            json.dump(job, f)
        env = dict(os.environ, KERAS_BACKEND="tensorflow")
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        env["PYTHONPATH"] = os.pathsep.join(
            [_package_root()] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        )
        command = [
            sys.executable,
            "-c",
            "import sys; from keras_vit.export._tf_subprocess import _main; "
            "sys.exit(_main(sys.argv[1]))",
            job_path,
        ]
        process = subprocess.run(command, env=env, capture_output=True, text=True)
        reply = None
        if os.path.exists(job["result_path"]):
            with open(job["result_path"]) as f:
                reply = json.load(f)
    if reply is not None and "error_type" in reply:
        error_type = _ERROR_TYPES.get(reply["error_type"], RuntimeError)
        raise error_type(
            f"{reply['message']} (raised by the export subprocess with "
            f"KERAS_BACKEND=tensorflow: {reply['error_type']})"
        )
    if process.returncode != 0 or reply is None:
        tail = "\n".join((process.stderr or "").strip().splitlines()[-30:])
        raise RuntimeError(
            f"The export subprocess (KERAS_BACKEND=tensorflow) failed with exit code "
            f"{process.returncode}. Its last output:\n{tail}"
        )
    return reply["reply"]


def _main(job_path):
    """Entry point of the child process (run with KERAS_BACKEND=tensorflow)."""
    with open(job_path) as f:
        job = json.load(f)
    try:
        if keras.backend.backend() != "tensorflow":
            raise RuntimeError(
                "The export subprocess must run with KERAS_BACKEND=tensorflow. "
                f"Received: {keras.backend.backend()}"
            )
        module, name = job["function"].split(":")
        function = getattr(importlib.import_module(module), name)
        model = _checks.load_model(job["model_path"])
        result, code = dict(reply=function(model, **job["request"])), 0
    except Exception as error:  # reported to the parent, which raises it again
        result, code = dict(error_type=type(error).__name__, message=str(error)), 1
    with open(job["result_path"], "w") as f:
        json.dump(result, f)
    return code
