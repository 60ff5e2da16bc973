"""Reading and writing model files: `.keras` loading with clear errors, atomic writes."""

import collections
import json
import os
import re
import shutil
import tempfile
import zipfile
import zlib

import keras

import keras_vit.layers  # noqa: F401  (registers every keras_vit layer, StdConv2D included)
from keras_vit import _plugins
from keras_vit.models import legacy

# The index of a sharded checkpoint folder (`keras_vit.distribution.checkpoint.MANIFEST`).
SHARDED_MANIFEST = "sharded.json"
_SHARDED_READER = []  # its reader, which keras_vit.distribution.checkpoint registers


def register_sharded_reader(reader):
    """Sets the callable `(folder) -> keras.Model` that `load_model` calls for a sharded
    checkpoint folder (the `SHARDED_CHECKPOINTS` extension point, keras_vit/_plugins.py)."""
    _SHARDED_READER[:] = [reader]


def atomic_write(target, write, name=None):
    """Calls `write(staged_path)` beside `target`, then moves the result onto `target`.

    The staged file or folder lies in a temporary folder next to `target` (same file system) and
    is named `name` (default: `target`'s own name, so extensions such as `.keras` or
    `.weights.h5` are kept); `os.replace` then puts it in place, so a kill leaves the old target
    or the new one, never half of one. An existing folder at `target` is removed first when what
    was written is a folder too (the caller decided it may be replaced); a file never replaces a
    folder (`IsADirectoryError`).

    Args:
        target: str or path-like. The file or folder to write.
        write: callable taking the staged path; its return value is returned.
        name: optional str. The staged entry's name.

    Example:

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "notes.txt")
    >>> def write(staged):
    ...     with open(staged, "w") as f:
    ...         _ = f.write("done")
    >>> atomic_write(path, write)
    >>> open(path).read(), os.listdir(os.path.dirname(path))
    ('done', ['notes.txt'])
    """
    target = os.fspath(target)
    parent = os.path.dirname(target) or "."
    staging = staging_folder(target, parent)
    try:
        staged = os.path.join(staging, name or os.path.basename(target))
        result = write(staged)
        if os.path.isfile(staged) and not os.path.islink(staged):
            os.chmod(staged, file_mode(target))
        if os.path.isdir(target) and not os.path.islink(target):
            if not os.path.isdir(staged):  # never a user's folder for a file
                raise IsADirectoryError(
                    f"{target!r} is a folder; the file written in its place was not moved "
                    "there. Choose another path, or remove the folder yourself."
                )
            shutil.rmtree(target)
        os.replace(staged, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return result


def staging_folder(target, parent):
    """A new hidden folder in `parent` (created) to write `target` in; errors name `target`."""
    try:
        os.makedirs(parent, exist_ok=True)
        return tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.tmp-", dir=parent)
    except OSError as error:  # a read-only folder: name the user's path, not the hidden one
        raise PermissionError(
            f"Cannot write {target!r}: the folder {os.path.abspath(parent)!r} is not writable "
            f"({error.strerror or error}). Choose another path or change its permissions."
        ) from None


def file_mode(target):
    """The permission bits a file written at `target` gets.

    An existing regular file keeps its own mode (replacing a user's 0644 file with `overwrite`
    leaves it 0644); a new file gets `0o666` less the process's umask, as `open()` would give it
    (a temporary file from `tempfile` is 0600 whatever the umask).
    """
    if os.path.isfile(target) and not os.path.islink(target):
        return os.stat(target).st_mode & 0o7777
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


# What each file suffix says a file holds (to refuse writing one format under another's name).
SUFFIX_FORMATS = {
    ".keras": "a Keras model archive",
    ".safetensors": "a safetensors file",
    ".pth": "a pickled PyTorch checkpoint",
    ".pt": "a pickled PyTorch checkpoint",
    ".bin": "a pickled PyTorch checkpoint",
    ".ckpt": "a pickled PyTorch checkpoint",
    ".npz": "a NumPy .npz archive",
    ".npy": "a NumPy array",
    ".h5": "an HDF5 file",
    ".onnx": "an ONNX model",
    ".tflite": "a LiteRT (TFLite) model",
    ".json": "a JSON file",
}


def check_path_argument(path, argument="path"):
    """`path` as a str; a `TypeError` naming `argument` when it is no str or path-like."""
    try:
        path = os.fspath(path)
    except TypeError:
        raise TypeError(
            f"{argument} must be a str or path-like file path. Received: {argument}={path!r} "
            f"of type {type(path).__name__}"
        ) from None
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not path:
        raise ValueError(f"{argument} must name a file. Received: {argument}=''")
    return path


def check_suffix(path, suffixes, content, argument="path"):
    """Refuses to write `content` under a name whose suffix says another format.

    Args:
        path: str. The file to write.
        suffixes: tuple of str, the suffixes `content` may have (the first is named).
        content: str, what is written (`"a safetensors file"`), for the message.
        argument: str, the argument or flag the user typed, for the message.

    Raises:
        ValueError: `path` does not end with one of `suffixes`.
    """
    if path.lower().endswith(tuple(s.lower() for s in suffixes)):
        return
    suffix = os.path.splitext(path.rstrip("/" + os.sep))[1].lower()
    said = SUFFIX_FORMATS.get(suffix)
    why = f"{suffix!r} names {said}" if said else f"its suffix is {suffix or 'missing'!r}"
    raise ValueError(
        f"{argument}={path!r} would hold {content}, but {why}: readers (keras_vit included) "
        f"pick the reader by suffix. Expected a name ending in {suffixes[0]!r}; nothing was "
        "written."
    )


def check_folder_name(path, content, argument="path"):
    """Refuses a folder to write whose name ends with a file format's suffix (`out.keras`)."""
    suffix = os.path.splitext(path.rstrip("/" + os.sep))[1].lower()
    if suffix in SUFFIX_FORMATS:
        raise ValueError(
            f"{argument}={path!r} would be a folder holding {content}, but {suffix!r} names "
            f"{SUFFIX_FORMATS[suffix]}. Expected a folder name without a file suffix; nothing "
            "was written."
        )


def check_writable(path, what="output"):
    """Raises before any work when `path` (a file or folder to write) cannot be written.

    The nearest existing folder of `path` must be a folder in which a file can be created (a
    probe file is made and removed: permissions and read-only file systems both show).

    Raises:
        NotADirectoryError: a parent of `path` is a file.
        PermissionError: the folder cannot be written.
    """
    path = os.path.abspath(os.fspath(path))
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        raise NotADirectoryError(f"The {what} {path!r} lies under {folder!r}, which is a file.")
    try:
        handle, probe = tempfile.mkstemp(prefix=".keras_vit-write-check-", dir=folder)
    except OSError as error:
        raise PermissionError(
            f"Cannot write the {what} {path!r}: the folder {folder!r} is not writable "
            f"({error.strerror or error})."
        ) from None
    os.close(handle)
    os.remove(probe)


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
        ValueError: the file is not a zip archive (a truncated or corrupt `.keras`), or an
            archive without the `config.json` every `.keras` file holds.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"Model file not found: {path!r}. Expected a .keras file.")
    if os.path.isdir(path):
        raise IsADirectoryError(f"Model path {path!r} is a folder; expected a .keras file.")
    if path.endswith(".keras") and not zipfile.is_zipfile(path):
        raise not_a_keras_archive(path, "not a zip file")
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as archive:
                names = set(archive.namelist())
        except (zipfile.BadZipFile, OSError) as error:
            raise not_a_keras_archive(path, f"{type(error).__name__}: {error}") from None
        if "config.json" not in names:
            raise not_a_keras_archive(path, "it has no config.json")
        if not any(name.startswith("model.weights.") for name in names):
            raise not_a_keras_archive(path, "it has no model.weights.h5 (the weights)")
    return path


def archive_config(path):
    """The model config (`config.json`) of a checked `.keras` archive, as a dict.

    Raises:
        ValueError: `config.json` is not JSON or not an object (naming the file).
    """
    with zipfile.ZipFile(path) as archive:
        raw = archive.read("config.json")
    try:
        config = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise not_a_keras_archive(path, f"its config.json is not valid JSON: {error}") from None
    if not isinstance(config, dict):
        raise not_a_keras_archive(path, "its config.json holds no JSON object")
    return config


def check_archive_config(path, config):
    """Refuses a `VisionTransformer` config that does not make a `ViTConfig` (a missing,
    unknown or ill-typed key), naming the file and the key, before Keras builds anything."""
    from keras_vit.models.config import ViTConfig

    if config.get("class_name") != "VisionTransformer":
        return
    inner = config.get("config")
    fields = inner.get("config") if isinstance(inner, dict) else None
    if not isinstance(fields, dict):
        raise ValueError(
            f"{path}: its config.json describes a VisionTransformer without its ViTConfig (the "
            "'config' -> 'config' object). Save the model again with model.save()."
        )
    try:
        ViTConfig.from_dict(fields)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"{path}: its config.json does not describe a valid ViTConfig: {error}. Was it "
            "edited, or written by another keras_vit version? Save the model again with "
            "model.save()."
        ) from error


def load_model(path):
    """Loads a `.keras` model without its optimizer (`compile=False`), or a sharded checkpoint.

    Every keras_vit layer is registered first. A plain functional ViT saved by an earlier
    version comes back as a `keras_vit.models.VisionTransformer` with the same weights and
    outputs (`keras_vit.models.legacy.upgrade`). `compile=False` matters across backends: a model
    compiled and saved under PyTorch would otherwise make another backend import PyTorch's
    optimizer module. Keras' `safe_mode` stays on.

    Args:
        path: str or path-like. A file written by `model.save()`, or a folder written by
            `keras_vit.distribution.save_sharded` (a sharded run's `model.sharded`; read onto the
            active distribution's layouts, one block at a time).

    Returns:
        The `keras.Model` (a `VisionTransformer` for a ViT).

    Raises:
        FileNotFoundError, IsADirectoryError: see `check_model_file`.
        ValueError: the file is not a valid `.keras` archive (truncated or corrupt).

    Example:

    >>> import os, tempfile, keras_vit
    >>> path = os.path.join(tempfile.mkdtemp(), "tiny.keras")
    >>> keras_vit.ViT("mu/8", image_size=16, num_classes=3).save(path)
    >>> model = load_model(path)
    >>> type(model).__name__, model.output_shape
    ('VisionTransformer', (None, 3))
    >>> os.remove(path)
    """
    if os.path.isfile(os.path.join(os.fspath(path), SHARDED_MANIFEST)):
        # A sharded checkpoint (a sharded run's `model.sharded`), read by its plug-in:
        # `keras_vit.distribution` sits above this floor.
        if not _SHARDED_READER:
            _plugins.load(_plugins.SHARDED_CHECKPOINTS)
        return _SHARDED_READER[0](path)
    path = check_model_file(path)
    config = archive_config(path)
    check_archive_config(path, config)
    try:
        model = keras.saving.load_model(path, compile=False)
    except ValueError as error:
        if not str(error).startswith("A total of"):
            raise
        raise ValueError(
            f"{path}: the weights in the file do not fit the model its config.json describes"
            f"{_patch_embedding_disagreement(path, config)} (was the config edited?). Keras: "
            f"{error}"
        ) from error
    except (zipfile.BadZipFile, zlib.error, EOFError, KeyError) as error:
        raise not_a_keras_archive(path, f"{type(error).__name__}: {error}") from error
    except OSError as error:  # h5py: the archive's model.weights.h5 is truncated or corrupt
        if isinstance(error, PermissionError | FileNotFoundError) or not _inner_h5(error):
            raise
        reason = f"its model.weights.h5 cannot be read: {error}"
        raise not_a_keras_archive(path, reason) from error
    check_all_weights_taken(path, model)
    return legacy.upgrade(model)


def _patch_embedding_disagreement(path, config):
    """`": config.json says hidden_dim=64, the weights are for 32"` for the ViTConfig keys the
    file's patch embedding kernel `(ph, pw, C, D)` contradicts, or ""."""
    import h5py

    fields = ((config.get("config") or {}).get("config") or {}) if isinstance(config, dict) else {}
    try:
        with zipfile.ZipFile(path) as archive, archive.open("model.weights.h5") as handle:
            with h5py.File(handle, "r") as weights:
                shape = tuple(weights["layers/patch_encoder/vars/0"].shape)
    except (KeyError, OSError):
        return ""
    if len(shape) != 4:
        return ""
    patch = fields.get("patch_size")
    patch = list(patch) if isinstance(patch, (list, tuple)) else [patch, patch]
    found = {
        "patch_size": (list(shape[:2]), patch),
        "num_channels": (shape[2], fields.get("num_channels")),
        "hidden_dim": (shape[3], fields.get("hidden_dim")),
    }
    wrong = [
        f"{key}={said!r} (the weights: {saved!r})"
        for key, (saved, said) in found.items()
        if said is not None and saved != said
    ]
    return f": config.json says {', '.join(wrong)}" if wrong else ""


def check_all_weights_taken(path, model):
    """Refuses a model that left weights of its file unread (Keras skips them silently).

    A `.keras` file whose config says fewer layers (or blocks) than its `model.weights.h5`
    holds loads without the extra arrays; the file's arrays (optimizer state aside) must be
    exactly the model's.
    """
    import h5py

    with zipfile.ZipFile(path) as archive:
        if "model.weights.h5" not in archive.namelist():
            return  # sharded or NumPy weights: Keras checks those itself
        with archive.open("model.weights.h5") as handle, h5py.File(handle, "r") as weights:
            arrays = []
            weights.visititems(
                lambda name, item: arrays.append(name) if isinstance(item, h5py.Dataset) else None
            )
    arrays = [name for name in arrays if not name.startswith("optimizer/")]
    if len(arrays) <= len(model.weights):
        return
    # Keras files a functional model's layers as `layers/<class in snake case>[_<n>]/...`.
    in_file = collections.Counter(
        re.sub(r"_\d+$", "", group)
        for group in {name.split("/")[1] for name in arrays if name.startswith("layers/")}
    )
    in_model = collections.Counter(
        re.sub(r"(?<!^)(?=[A-Z])", "_", type(layer).__name__).lower()
        for layer in getattr(model, "layers", ())
    )
    extra = [f"{count} more {kind}" for kind, count in (in_file - in_model).items()]
    where = f" (the file has {', '.join(extra)})" if extra else ""
    raise ValueError(
        f"{path} holds {len(arrays)} weight arrays but the model its config.json describes "
        f"takes {len(model.weights)}{where}. The config was changed after saving (fewer "
        "layers or blocks?); loading would drop weights silently. Save the model again with "
        "model.save()."
    )


def _inner_h5(error):
    """Whether an OSError comes from h5py reading the archive's weights (not the file system)."""
    return getattr(error, "filename", None) is None and "file" in str(error).lower()
