"""Loading `.keras` files made with keras_vit: layers registered, no optimizer, clear errors."""

import os
import zipfile
import zlib

import keras

import keras_vit.layers  # noqa: F401  (registers every keras_vit layer, StdConv2D included)


def not_a_keras_archive(path, reason):
    """The `ValueError` for a file that exists but is not a readable `.keras` archive."""
    return ValueError(
        f"Model file {path!r} is not a valid .keras archive ({reason}). Is it truncated or "
        "corrupt? Save the model again with model.save()."
    )


def check_model_file(path):
    """Returns `path` as a str after checking it names a readable `.keras` zip archive.

    Raises:
        FileNotFoundError: the file does not exist.
        IsADirectoryError: `path` is a folder.
        ValueError: the file is not a zip archive (a truncated or corrupt `.keras`).
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"Model file not found: {path!r}. Expected a .keras file.")
    if os.path.isdir(path):
        raise IsADirectoryError(f"Model path {path!r} is a folder; expected a .keras file.")
    if path.endswith(".keras") and not zipfile.is_zipfile(path):
        raise not_a_keras_archive(path, "not a zip file")
    return path


def load_model(path):
    """Loads a `.keras` model without its optimizer (`compile=False`).

    Every keras_vit layer is registered first. `compile=False` matters across backends: a model
    compiled and saved under PyTorch would otherwise make another backend import PyTorch's
    optimizer module. Keras' `safe_mode` stays on.

    Args:
        path: str or path-like. A file written by `model.save()`.

    Returns:
        The `keras.Model`.

    Raises:
        FileNotFoundError, IsADirectoryError: see `check_model_file`.
        ValueError: the file is not a valid `.keras` archive (truncated or corrupt).

    Example:

    >>> import os, tempfile, keras_vit
    >>> path = os.path.join(tempfile.mkdtemp(), "tiny.keras")
    >>> keras_vit.ViT("mu/8", image_size=16, num_classes=3).save(path)
    >>> load_model(path).output_shape
    (None, 3)
    >>> os.remove(path)
    """
    path = check_model_file(path)
    try:
        return keras.saving.load_model(path, compile=False)
    except (zipfile.BadZipFile, zlib.error, EOFError) as error:
        raise not_a_keras_archive(path, f"{type(error).__name__}: {error}") from error
