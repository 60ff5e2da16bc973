"""Official ViT checkpoints: `load_npz` and `save_npz` for google-research/vision_transformer files.

The official `.npz` files hold flat arrays named by their Flax scope joined with
"/" (`Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel`, ...). `NAME_TABLE`
(`keras_vit.weights.npz.names`, re-exported here) is the one place that maps those names to
our Keras variables; it is matched against the *layer names* of the model (never the model's
name), so it serves plain and hybrid models, any size, with or without a head.

Loading follows the official `vit_jax` loader:

- `opt/target/` and `params/` prefixes of training-run files are stripped;
- BiT GroupNorm parameters stored as `(1, 1, 1, C)` are accepted as `(C,)`;
- the position embedding is resampled when the grids differ: the class-token row
  is split off, the rest is reshaped to its grid and resized with
  `scipy.ndimage.zoom(order=1)` (one zoom factor per axis, so non-square target
  grids work), and the class-token row is put back;
- the classifier `head` is loaded only when its shape matches the model's;
  otherwise the model keeps its own (zero-initialised) head, the paper's
  fine-tuning set-up. `pre_logits` is loaded when the model has that layer
  (`representation_size`) and dropped otherwise. Both are logged.

Everything is checked before anything is assigned: a failed load leaves every
weight of the model as it was. A file that is not a readable `.npz` (a
truncated download, an HTML error page) raises a `ValueError` naming it.
"""

import logging
import os
import zipfile
import zlib

import keras
import numpy as np

from keras_vit.layers import position_embedding as pe
from keras_vit.layers._checks import check_positive_int_pair
from keras_vit.weights.loading import commit, dtype_problems, integer_problem, walk_layers
from keras_vit.weights.loading import shape_of as _shape
from keras_vit.weights.npz.names import (  # noqa: F401 (re-exports: the official names)
    CLASS_TOKEN,
    NAME_TABLE,
    POSITION_EMBEDDING,
    official_variables,
)

# The logger keeps the module's former, documented name (`keras-vit convert` prints it).
logger = logging.getLogger(__name__)

# Training-run files nest the parameters under one of these scopes.
PREFIXES = ("opt/target/", "params/")

_GROUP_NORM_LEAVES = ("gn_root/", "/gn")  # names of GroupNorm arrays contain one of these
_HEAD = ("head/kernel", "head/bias")  # the model's head is loaded only when its shape fits
_PRE_LOGITS = ("pre_logits/kernel", "pre_logits/bias")
_HINTS = {
    ("missing", CLASS_TOKEN): "the checkpoint has no class token (trained with pooling='gap'); "
    "build the model with pooling='gap'",
    ("unexpected", CLASS_TOKEN): "the model has no class token; build it with class_token=True",
    ("missing", "pre_logits/kernel"): "the checkpoint has no pre_logits; build the model "
    "without representation_size",
}


class _NpzLog:
    """The module's logger with every line prefixed `load_npz: ` (the messages it always had)."""

    def warning(self, message, *args):
        logger.warning("load_npz: " + message, *args)

    def info(self, message, *args):
        logger.info("load_npz: " + message, *args)


def _hint(kind, name):
    hint = _HINTS.get((kind, name))
    return f" ({hint})" if hint else ""


# What NumPy and zipfile raise on a file that is not a readable .npz archive.
_UNREADABLE = (zipfile.BadZipFile, zlib.error, EOFError, ValueError, OSError)


def _not_npz(path, reason):
    return ValueError(
        f"{path!r} is not a valid .npz checkpoint ({reason}). A truncated or corrupt "
        "download? Download the file again."
    )


def _read_arrays(path):
    """{name: array} of every member of a zip archive; raises one of `_UNREADABLE` otherwise.

    Under a `keras.distribution` (JAX) the arrays are `keras_vit.weights.lazy.LazyTensor`s,
    read one at a time when assigned."""
    from keras_vit.weights import lazy

    if lazy.sharded_read_wanted():
        return lazy.open_npz(path)
    with np.load(path, allow_pickle=False) as data:
        return {name: data[name] for name in data.files}


def check_npz(path, deep=False):
    """Returns None when `path` is a readable .npz holding arrays, else the reason it is not.

    Args:
        path: str. The file to check.
        deep: bool. Also read every member and check its CRC (reads the whole
            file). Defaults to False.
    """
    try:
        if not zipfile.is_zipfile(path):
            return "not a zip archive (truncated download or an HTML error page?)"
        with zipfile.ZipFile(path) as archive:
            if deep:
                bad = archive.testzip()  # reads every member and checks its CRC
                if bad is not None:
                    return f"member {bad!r} fails its CRC check"
        with np.load(path, allow_pickle=False) as data:
            if not data.files:
                return "it holds no arrays"
    except _UNREADABLE as error:
        return f"{type(error).__name__}: {error}"
    return None


def read_npz(path):
    """Reads an official checkpoint into a dict {name: array}, stripping training prefixes.

    Args:
        path: str or path-like to a `.npz` file.

    Returns:
        dict of NumPy arrays. When some names start with `opt/target/` or
        `params/`, only those are kept (the rest is optimizer state) and the
        prefix is removed.

    Raises:
        FileNotFoundError: `path` does not exist.
        IsADirectoryError: `path` is a folder.
        ValueError: `path` is not a readable `.npz` archive (truncated,
            corrupt, or another kind of file).
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"Checkpoint file not found: {path!r}")
    if os.path.isdir(path):
        raise IsADirectoryError(f"Checkpoint path {path!r} is a folder; expected a .npz file.")
    if not zipfile.is_zipfile(path):
        raise _not_npz(path, "not a zip archive")
    try:
        arrays = _read_arrays(path)
    except PermissionError:
        raise
    except _UNREADABLE as error:
        raise _not_npz(path, f"{type(error).__name__}: {error}") from error
    for prefix in PREFIXES:
        if any(name.startswith(prefix) for name in arrays):
            kept = {n[len(prefix) :]: a for n, a in arrays.items() if n.startswith(prefix)}
            if len(kept) < len(arrays):
                logger.info(
                    "load_npz: ignored %d arrays outside %r (optimizer state) in %s",
                    len(arrays) - len(kept),
                    prefix,
                    path,
                )
            arrays = kept
    return arrays


def _is_group_norm(name):
    return any(part in name for part in _GROUP_NORM_LEAVES) and name.endswith(("/scale", "/bias"))


def _encoder_of(model, variable):
    """The patch encoder owning the position-embedding `variable` (None if not found)."""
    for layer in walk_layers(model):
        if getattr(layer, "position_embeddings", None) is variable:
            return layer
    return None


def _resample(name, value, variable, model, source_grid, has_class_token, notes):
    """Fits a checkpoint position embedding to the model's grid; returns (array, problem)."""
    expected = _shape(variable)
    if value.ndim != 3 or value.shape[0] != 1 or value.shape[2] != expected[2]:
        return None, f"found {_shape(value)}"
    encoder = _encoder_of(model, variable)
    grid = getattr(encoder, "grid_size", None)
    if grid is None:
        return None, f"found {_shape(value)}, but the model's patch encoder has no known grid"
    grid = tuple(grid)
    # Rows of the model's table before the grid: 0 (no prefix rows), 1 (class token), or more
    # (distillation / register tokens after it).
    model_prefix = getattr(encoder, "num_prefix_positions", None)
    if model_prefix is None:
        model_prefix = getattr(encoder, "num_prefix_tokens", 1)
    class_row = bool(model_prefix and getattr(encoder, "class_token", True))
    file_prefix = 1 if has_class_token else 0  # the official split: 1 row for token, 0 for gap
    prefix_rows, grid_rows = value[:, :file_prefix], value[:, file_prefix:]
    num_rows = grid_rows.shape[1]
    if source_grid is not None:
        source = tuple(source_grid)
    elif num_rows == grid[0] * grid[1]:
        source = grid
    else:
        try:
            source = pe.infer_grid(num_rows)
        except ValueError:
            return None, (
                f"found {_shape(value)}: {num_rows} patch rows are not a square grid; "
                "pass source_grid=(height, width)"
            )
    if source[0] * source[1] != num_rows:
        return None, f"found {_shape(value)}, which does not hold source_grid={source}"
    if source != grid:
        notes.append(
            f"resized the position embedding from grid {source} to {grid} "
            f"({_shape(value)} -> {expected})"
        )
        grid_rows = pe.resample_position_embedding(
            grid_rows, grid, num_prefix_tokens=0, old_grid=source
        )
    own_rows = keras.ops.convert_to_numpy(variable)[:, :model_prefix]
    if file_prefix and not class_row:  # token checkpoint, model table without a class row
        notes.append(
            f"dropped the class-token row of {name} (the model's position embedding has no "
            "class-token row)"
        )
        prefix_rows = own_rows
    elif file_prefix:  # the file's class row, the model's own rows after it (dist, registers)
        prefix_rows = np.concatenate([prefix_rows, own_rows[:, 1:]], axis=1)
        if model_prefix > 1:
            notes.append(
                f"kept the model's own {model_prefix - 1} distillation/register rows of {name} "
                "(the checkpoint has none)"
            )
    elif model_prefix:  # gap checkpoint, model with prefix rows: keep them
        prefix_rows = own_rows
        one_class_row = model_prefix == 1 and class_row
        what = "class-token row" if one_class_row else f"{model_prefix} prefix rows"
        notes.append(f"kept the model's {what} of {name} (the checkpoint has none)")
    return np.concatenate([prefix_rows.astype("float32"), grid_rows.astype("float32")], 1), None


def _plan(model, arrays, source_grid):
    """Pairs every array with its variable, changing nothing.

    Returns:
        `(assignments, problems, notes)`: `[(name, variable, value)]`, a dict
        {"dtype" | "missing" | "unexpected" | "shape": [line]}, and log lines (an array
        that cannot be a weight is a "dtype" problem, never a missing one).
    """
    table, unmapped = official_variables(model)
    problems = {"dtype": [], "missing": [], "unexpected": [], "shape": []}
    notes = []
    assignments = []
    optional = set(_HEAD) | set(_PRE_LOGITS)
    bad = dtype_problems(arrays)
    problems["dtype"] += [f"{name}: {why}" for name, why in bad.items()]
    for name, value in arrays.items():
        if name not in table and name not in optional:
            problems["unexpected"].append(
                f"{name}: found {_shape(value)}, no such model weight{_hint('unexpected', name)}"
            )
    for name, variable in table.items():
        expected = _shape(variable)
        if name in _HEAD:
            continue  # handled below
        if name not in arrays:
            problems["missing"].append(
                f"{name}: expected {expected}, not in the file{_hint('missing', name)}"
            )
            continue
        if name in bad:
            continue
        value = arrays[name]
        why = integer_problem(value, variable)
        if why:
            problems["dtype"].append(f"{name}: {why}")
            continue
        if name == POSITION_EMBEDDING:
            value, problem = _resample(
                name, value, variable, model, source_grid, CLASS_TOKEN in arrays, notes
            )
            if problem:
                problems["shape"].append(f"{name}: expected {expected}, {problem}")
                continue
        elif _is_group_norm(name) and value.ndim == 4 and value.shape[:3] == (1, 1, 1):
            value = value.reshape(-1)  # BiT files store GroupNorm parameters as (1, 1, 1, C)
        if _shape(value) != expected:
            problems["shape"].append(f"{name}: expected {expected}, found {_shape(value)}")
            continue
        assignments.append((name, variable, value))

    # Head and pre-logits: the fine-tuning semantics of the official loader.
    model_head = [n for n in _HEAD if n in table]
    file_head = _shape(arrays["head/kernel"]) if "head/kernel" in arrays else None
    if model_head:
        if any(n in bad for n in model_head):
            pass  # a "dtype" problem already
        elif any(n in arrays and integer_problem(arrays[n], table[n]) for n in model_head):
            problems["dtype"] += [
                f"{n}: {integer_problem(arrays[n], table[n])}"
                for n in model_head
                if n in arrays and integer_problem(arrays[n], table[n])
            ]
        elif all(n in arrays and _shape(arrays[n]) == _shape(table[n]) for n in model_head):
            assignments += [(n, table[n], arrays[n]) for n in model_head]
        else:
            model_kernel = _shape(table["head/kernel"]) if "head/kernel" in table else None
            why = (
                "the file has no head"
                if file_head is None
                else "a different class count (the paper's fine-tuning set-up)"
                if model_kernel is None or file_head[-1] != model_kernel[-1]
                else "a different input width (pre_logits differ)"
            )
            notes.append(
                f"kept the model's own head {model_kernel}, not the checkpoint head "
                f"{file_head}: {why}"
            )
    elif file_head:
        notes.append(f"dropped the checkpoint head {file_head} (the model has no head)")
    if not any(n in table for n in _PRE_LOGITS) and "pre_logits/kernel" in arrays:
        notes.append(
            f"dropped pre_logits {_shape(arrays['pre_logits/kernel'])} (the model has no "
            "pre_logits layer; build it with representation_size to keep it)"
        )
    if unmapped:
        notes.append(
            f"{len(unmapped)} model weights have no official name and stay as they are: "
            + ", ".join(w.path for w in unmapped)
        )
    return assignments, problems, notes


def load_npz(model, path, *, strict=True, source_grid=None):
    """Loads an official ViT `.npz` checkpoint into a keras_vit model, on any backend.

    Maps the official array names to the model's variables (see `NAME_TABLE`),
    resamples the position embedding to the model's grid the way the official
    loader does, keeps the model's own head when the class count differs, and
    drops `pre_logits` when the model has no such layer (each logged on the
    `keras_vit.weights.npz.checkpoints` logger). Everything is validated before any
    variable is assigned.

    A checkpoint without a class token (trained with `gap`) has a position
    embedding without the class row; it loads into a model without a class
    token. Loading it into a model with one reports `cls` as missing (with
    `strict=False` the model keeps its class token and its class row). A
    checkpoint with a class token loaded into a model without one reports
    `cls` as unexpected (with `strict=False` the class row is dropped).

    Args:
        model: a built `keras.Model` from `keras_vit.ViT` (plain or hybrid).
        path: str or path-like to the `.npz` file.
        strict: bool. When True, any missing array, unexpected array or shape
            mismatch raises one `ValueError` listing them all and nothing is
            assigned. When False those are logged and skipped (partial load).
            Defaults to True.
        source_grid: optional (height, width) patch grid of the checkpoint's
            position embedding. Only needed for a non-square checkpoint grid
            that differs from the model's; square grids are inferred.

    Returns:
        The model.

    Raises:
        ValueError: in strict mode, listing every offending array with its
            expected and found shape; also when nothing at all matches, and
            for a file that is not a readable `.npz` (naming it).
        FileNotFoundError: `path` does not exist.
        IsADirectoryError: `path` is a folder.

    Example:

    >>> import os, tempfile
    >>> from keras_vit.models.vit import ViT
    >>> path = os.path.join(tempfile.mkdtemp(), "mu.npz")
    >>> _ = save_npz(ViT("mu/8", image_size=32, num_classes=10), path)
    >>> model = load_npz(ViT("mu/8", image_size=48, num_classes=10), path)

    Reference:
        Dosovitskiy et al., 2021, Sec. 3.2 (fine-tuning at higher resolution);
        `vit_jax/checkpoint.py` (`load_pretrained`).
    """
    path = os.fspath(path)
    arrays = read_npz(path)
    if source_grid is not None:
        source_grid = check_positive_int_pair(source_grid, "source_grid")
    assignments, problems, notes = _plan(model, arrays, source_grid)
    commit(
        model,
        [(variable, value) for _, variable, value in assignments],
        problems,
        notes,
        source=repr(path),
        strict=strict,
        logger=_NpzLog(),
        hint=" (pass strict=False to load only what matches)",
        keys=arrays,
    )
    return model


def save_npz(model, path, *, strict=True):
    """Writes a keras_vit model as an official ViT `.npz` checkpoint.

    The file has the official flat names and shapes (`cls` (1, 1, D), q/k/v
    biases (H, D/H), GroupNorm parameters (C,), ...), uncompressed like the
    official files, so it loads with `load_npz`, the official `vit_jax` code
    and timm.

    Args:
        model: a built `keras.Model` from `keras_vit.ViT` (plain or hybrid).
        path: str or path-like; written as given (no extension is appended).
        strict: bool. When True, model weights that have no official name
            (LayerScale, a mask embedding) raise a `ValueError`; when False
            they are left out with a log line. Defaults to True.

    Returns:
        The path written, as a str.

    Example:

    >>> import os, tempfile
    >>> from keras_vit.models.vit import ViT
    >>> path = save_npz(ViT("mu/8", image_size=32, num_classes=10),
    ...                 os.path.join(tempfile.mkdtemp(), "mu.npz"))
    >>> sorted(np.load(path).files)[:2]
    ['Transformer/encoder_norm/bias', 'Transformer/encoder_norm/scale']
    """
    path = os.fspath(path)
    table, unmapped = official_variables(model)
    if unmapped:
        names = ", ".join(f"{w.path} {_shape(w)}" for w in unmapped)
        if strict:
            raise ValueError(
                f"Model '{model.name}' has weights with no name in the official checkpoint "
                f"layout (pass strict=False to leave them out): {names}"
            )
        logger.info("save_npz: left out %d weights with no official name: %s", len(unmapped), names)
    if not table:
        raise ValueError(f"Model '{model.name}' has no weight of the official ViT layout.")
    arrays = {name: keras.ops.convert_to_numpy(v) for name, v in table.items()}
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return path
