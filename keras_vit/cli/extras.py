"""The optional modules the commands import and the pip extra that installs each; `require`
turns a missing one into a usage error that names the command to run."""

import importlib.util

# Optional modules the commands import, and the extra that installs each.
EXTRAS = {
    "tensorflow": "recipes",
    "tensorflow_datasets": "recipes",
    "tensorboard": "recipes",
    "sklearn": "recipes",
    "matplotlib": "recipes",
    "PIL": "recipes",
    "tf2onnx": "onnx",
    "onnx": "onnx",
    "keras_cv": "cv",
}
PIP_NAMES = {
    "sklearn": "scikit-learn",
    "PIL": "pillow",
    "tensorflow_datasets": "tensorflow-datasets",
    "keras_cv": "keras-cv",
}


class MissingExtraError(RuntimeError):
    """An optional dependency a command needs is not installed (a usage error: exit 2)."""


def require(*modules):
    """Raises `MissingExtraError` naming the extra to install when a module is missing."""
    for module in modules:
        if importlib.util.find_spec(module) is None:
            extra = EXTRAS.get(module, "all")
            raise MissingExtraError(
                f"this command needs {PIP_NAMES.get(module, module)}, which is not installed in "
                f"this Python environment. Install it with: pip install \"keras-vit[{extra}]\""
            )
