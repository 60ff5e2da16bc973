"""What every exporter checks and does the same way: arguments, target paths, model files.

Nothing here imports TensorFlow at import time, nor the top-level `keras_vit`
package (which imports `keras_vit.export`).
"""

import os

import keras

import keras_vit.saving as saving
from keras_vit.distribution import checkpoint_files
from keras_vit.layers._checks import check_bool
from keras_vit.models.config import ViTConfig, check_not_pretraining_model

METHODS = ("auto", "subprocess")


def check_method(method):
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}. Received: method={method!r}")


def check_flags(**flags):
    """The exporters' bool arguments (`overwrite`, `verbose`), each a bool, in order."""
    values = tuple(check_bool(value, name) for name, value in flags.items())
    return values if len(values) > 1 else values[0]


def import_tensorflow():
    """Returns the `tensorflow` module, or raises an ImportError saying why it is needed."""
    try:
        import tensorflow as tf
    except ImportError as error:
        raise ImportError(
            "keras_vit.export writes its files with TensorFlow and needs it, whatever Keras "
            "backend the model was trained on. Install it with `pip install tensorflow`."
        ) from error
    return tf


def check_model_argument(model):
    """Returns `model` (a `keras.Model`) or its path as a str, after checking the file.

    Raises:
        ValueError: neither a model nor a path, or a file that is not a
            `.keras` zip archive (truncated or corrupt).
        FileNotFoundError: the file does not exist.
    """
    if isinstance(model, keras.Model):
        check_not_pretraining_model(model, "Exporting (keras_vit.export)")
        return model
    if not isinstance(model, (str, os.PathLike)):
        raise ValueError(
            "model must be a keras.Model, a path to a .keras file or a sharded checkpoint "
            f"folder (a sharded run's model.sharded). Received: {type(model).__name__}"
        )
    if checkpoint_files.is_sharded_checkpoint(model):
        return check_sharded_checkpoint(model)
    path = saving.check_model_file(model)
    config = saving.archive_config(path)
    check_not_pretraining_model(
        path, "Exporting (keras_vit.export)", class_name=config.get("class_name")
    )
    return path


def check_sharded_checkpoint(folder):
    """Returns a sharded checkpoint folder's path (`keras_vit.distribution.save_sharded`: a
    sharded run's `model.sharded`) after checking its index, that it holds the model's config
    and that the model is no pre-training model. Exporting it loads it onto one device, one
    tensor at a time (`keras_vit.load_model`), in whichever process traces the model.

    Raises:
        ValueError: a damaged or incomplete checkpoint, one without a model config, or a
            pre-training model's.
    """
    folder = os.fspath(folder)
    config = checkpoint_files.read_manifest(folder).get("model")
    if not isinstance(config, dict):
        raise ValueError(
            f"The sharded checkpoint {folder!r} holds weights without a model config, so there "
            "is no model to export: build the model, read the weights with "
            "keras_vit.distribution.checkpoint.load_sharded(model, folder) and export the model."
        )
    check_not_pretraining_model(
        folder, "Exporting (keras_vit.export)", class_name=config.get("class_name")
    )
    return folder


load_model = saving.load_model


def image_input_shape(model, exporter, allow_dynamic=False):
    """The `(batch, H, W, C)` shape of the model's one image input; H, W and C must be known.

    With `allow_dynamic`, H and W may be None for a model whose patch encoder has
    `dynamic_image_size` (C must be known).
    """
    shapes = [tuple(i.shape) for i in model.inputs]
    if len(shapes) != 1 or len(shapes[0]) != 4:
        raise ValueError(
            f"{exporter} expects a model with one (batch, height, width, channels) image input. "
            f"Received: input shapes {shapes}"
        )
    if allow_dynamic and shapes[0][3] is not None and is_dynamic_vit(model):
        return shapes[0]
    if None in shapes[0][1:]:
        raise ValueError(
            f"{exporter} needs a model with a fixed image size and channel count. Build the "
            f"model with image_size=(H, W). Received: input shape {shapes[0]}"
        )
    return shapes[0]


def is_dynamic_vit(model):
    """Whether `model` is a keras_vit model built with `dynamic_image_size`."""
    config = getattr(model, "config", None)
    return isinstance(config, ViTConfig) and config.dynamic_image_size


def native_image_size(model):
    """The image size a dynamic-size ViT's position embedding is made for, `(H, W)`."""
    return tuple(ViTConfig.from_model(model).image_size)


def check_writable_parent(target):
    """Raises a clear error when `target` cannot be created: under a file, or read-only."""
    folder = os.path.dirname(os.path.abspath(target))
    while not os.path.lexists(folder):
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        raise ValueError(
            f"Cannot export to {target!r}: {folder!r} is a file, not a folder. "
            "Choose a target outside it."
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(
            f"Cannot export to {target!r}: the folder {folder!r} is not writable. "
            "Choose another target or change its permissions."
        )


def check_file_target(path, overwrite, suffixes=None, content=None):
    """Checks a single-file target (ONNX, LiteRT): not a folder, new unless `overwrite`.

    With `suffixes` (e.g. `(".onnx",)`), a name whose suffix says another format is refused
    (`keras_vit.saving.check_suffix`): `content` would be misread under it.
    """
    if suffixes is not None:
        saving.check_suffix(path, suffixes, content, "path")
    if os.path.isdir(path):
        raise FileExistsError(f"Export path {path!r} is a folder; give a file path.")
    if os.path.lexists(path) and not overwrite:
        raise FileExistsError(
            f"Export file {path!r} exists. Pass overwrite=True (--overwrite on the command "
            "line) to replace it."
        )
    check_writable_parent(path)
