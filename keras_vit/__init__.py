"""keras_vit: Vision Transformers (Dosovitskiy et al., ICLR 2021) for Keras 3 on TensorFlow, JAX
and PyTorch.

The public names (`keras_vit.ViT`, `keras_vit.load_model`, ...) live in `keras_vit._api` and are
imported on first use, so that importing the package, or running `keras-vit --help`, loads no
framework until a name that needs one is used.
"""

import importlib
import importlib.util
import sys as _sys

from keras_vit import _plugins, _start_lines
from keras_vit._import_order import install_triton_guard as _install_triton_guard
from keras_vit.version import __version__ as __version__  # no framework imported

_start_lines.install()  # TensorFlow's start-up lines at TF_CPP_MIN_LOG_LEVEL (_start_lines.py)

# triton loaded after TensorFlow crashes the process; from now on it loads safely in any order
# (keras_vit/_import_order.py). Imports nothing.
_install_triton_guard()

# Who provides what the lower floors read (keras_vit/_plugins.py): the family folders fill the
# registry of keras_vit.weights, the weights package lends the builders .npz files and
# presets, and keras_vit.distribution.checkpoint reads load_model's sharded folders. Nothing is
# imported here; each provider is imported the first time its point is read.
_plugins.provide(_plugins.MODEL_FAMILIES, "keras_vit.families", subpackages=True)
_plugins.provide(_plugins.WEIGHTS_HANDLER, "keras_vit.weights")
_plugins.provide(_plugins.SHARDED_CHECKPOINTS, "keras_vit.distribution.checkpoint")


def _load_api():
    if "keras_vit._api" not in _sys.modules:
        # Before Keras loads TensorFlow, or a later `import timm` crashes (_import_order.py).
        importlib.import_module("keras_vit._import_order").load_triton_before_tensorflow()
    return importlib.import_module("keras_vit._api")


def __getattr__(name):
    if name.startswith("__") and name != "__all__":
        raise AttributeError(name)
    api = _load_api()
    if name == "__all__":
        return api.__all__
    if name in globals():  # a submodule that importing the API imported
        return globals()[name]
    if hasattr(api, name):
        value = getattr(api, name)
    elif not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}"):
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module 'keras_vit' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_load_api().__all__))


# Keras already loaded (`import keras` before `import keras_vit`): nothing is saved by deferring,
# so load the API now; that registers every keras_vit class, and a plain
# `keras.saving.load_model(...)` finds them (`keras_vit.load_model` always does).
if "keras" in _sys.modules:
    _load_api()
