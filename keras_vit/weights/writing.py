"""keras_vit models -> PyTorch-layout state dicts: the loaders' name tables read backwards.

`keras_vit.weights.loading` pairs each array of a timm or Hugging Face checkpoint with the model
variable(s) it becomes through a name table `{source key: (variable path(s), Transform)}`. The
exporters (`export_timm`, `export_huggingface`) use the same tables the other way round:
`state_dict_from_table` reads each variable and undoes its `Transform`. No transform needs an
inverse of its own: every one is a permutation of elements (transposes, reshapes, timm's q/k/v
stacking), so `invert` runs it on the element indices of the source shape and scatters the
variables' values back through those indices.

An export is all or nothing and checked before anything is written: a variable that the target
layout has no place for (LoRA adapters, quantization scales, ...) is an error naming it, and
`write_state_dict` writes to a temporary file in the target folder, then renames it; every target
is checked (suffix, existing entries, symbolic links included, permissions) first.
"""

import os

import keras
import numpy as np

from keras_vit.models.config import ViTConfig
from keras_vit.weights.loading import model_variables, shape_of
from keras_vit.weights.state_dict import write_safetensors


def variable_value(variable):
    """A variable's value as a float32 NumPy array."""
    return np.asarray(keras.ops.convert_to_numpy(variable.value), dtype="float32")


def invert(transform, values):
    """The source array that `transform` turns into `values` (one per target variable).

    Args:
        transform: a `keras_vit.weights.loading.Transform` that permutes elements
            (identity, transposes, reshapes, fused q/k/v; a position embedding of the
            model's own grid).
        values: sequence of NumPy arrays, the target variables' values.

    Returns:
        np.ndarray of `transform.source_shape` of the values' shapes.

    Example:

    >>> from keras_vit.weights import loading as L
    >>> kernel = np.arange(6.0).reshape(2, 3)  # a Keras Dense kernel (in, out)
    >>> invert(L.LINEAR, [kernel]).shape       # the torch Linear weight (out, in)
    (3, 2)
    """
    shapes = tuple(shape_of(v) for v in values)
    source_shape = tuple(int(d) for d in transform.source_shape(shapes))
    size = int(np.prod(source_shape, dtype="int64"))
    index = np.arange(size).reshape(source_shape)
    parts = transform.apply(index, shapes)
    out = np.zeros(size, dtype="float32")
    count = np.zeros(size, dtype="int64")
    for part, value in zip(parts, values, strict=True):
        part = np.asarray(part).ravel()
        out[part] = np.asarray(value, dtype="float32").ravel()
        count[part] += 1
    if not np.all(count == 1):  # only a permutation of elements can be read backwards
        raise ValueError(
            f"The {transform.name} transform does not map every element once; it cannot be "
            "inverted."
        )
    return out.reshape(source_shape)


def state_dict_from_table(model, table):
    """The arrays a name table maps to `model`'s variables, in the source library's layout.

    Args:
        model: a built `keras.Model`.
        table: dict {source key: (variable path or tuple of paths, Transform)}, as for
            `keras_vit.weights.loading.load_state_dict`.

    Returns:
        `(arrays, used)`: dict {source key: float32 np.ndarray} in the table's order, and
        the set of variable paths read.

    Raises:
        ValueError: the table names a variable the model does not have.
    """
    variables = model_variables(model)
    arrays, used = {}, set()
    for key, (paths, transform) in table.items():
        paths = (paths,) if isinstance(paths, str) else tuple(paths)
        absent = [p for p in paths if p not in variables]
        if absent:
            raise ValueError(
                f"The name table maps {key!r} to {absent}, which model '{model.name}' does not "
                "have (a table that does not fit the model's architecture)."
            )
        arrays[key] = invert(transform, [variable_value(variables[p]) for p in paths])
        used.update(paths)
    return arrays, used


def model_values(model, target):
    """`{variable path: float32 array}` of every weight of `model`, read once (an exporter reads
    its tables from these), after `check_float_variables`."""
    check_float_variables(model, target)
    return {path: variable_value(v) for path, v in model_variables(model).items()}


def arrays_from_values(values, table, *, target, model_name, left_out=()):
    """The arrays a name table maps to `values` (`model_values`), in the source library's
    layout, after checking that every value is written or `left_out` on purpose.

    Args:
        values: dict {variable path: np.ndarray}, every weight of the model.
        table: dict {source key: (variable path or paths, Transform)}.
        target: str. The target format, for messages (`"timm"`).
        model_name: str. The model's name, for messages.
        left_out: variable paths written otherwise (folded into another array) or all zero
            where the target has none.

    Returns:
        dict {source key: float32 np.ndarray} in the table's order.

    Raises:
        ValueError: the table names a variable the model does not have, or a value would be
            lost (LoRA adapters, quantization scales, ...).
    """
    arrays, used = {}, set(left_out)
    for key, (paths, transform) in table.items():
        paths = (paths,) if isinstance(paths, str) else tuple(paths)
        absent = [p for p in paths if p not in values]
        if absent:
            raise ValueError(
                f"The name table maps {key!r} to {absent}, which model '{model_name}' does not "
                "have (a table that does not fit the model's architecture)."
            )
        arrays[key] = invert(transform, [values[p] for p in paths])
        used.update(paths)
    _check_all_used(model_name, [path for path in values if path not in used], target)
    return arrays


def check_everything_exported(model, used, target):
    """Raises a `ValueError` naming every variable of `model` not in `used` (nothing is lost).

    Args:
        model: the `keras.Model` being exported.
        used: set of variable paths the export writes (or deliberately leaves out).
        target: str. The target format, for the message (`"timm"`).
    """
    variables = model_variables(model)
    _check_all_used(model.name, [path for path in variables if path not in used], target)


def _check_all_used(model_name, left, target):
    """The error naming the variables `left` that a `target` export would lose, if any."""
    if not left:
        return
    hints = []
    if any("lora" in path for path in left):
        hints.append("LoRA adapters: call keras_vit.merge_lora(model) first")
    if any(path.endswith(("_scale", "amax_history")) for path in left):
        hints.append("quantization scales: export the float model (before keras_vit.quantize)")
    raise ValueError(
        f"Cannot export model '{model_name}' to {target}: {len(left)} variable(s) have no place "
        f"in a {target} checkpoint{' (' + '; '.join(hints) + ')' if hints else ''}: "
        + ", ".join(left[:8])
        + (" ..." if len(left) > 8 else "")
    )


def check_float_variables(model, target):
    """Raises a `ValueError` when a variable is not floating point (an int8-quantized kernel)."""
    for variable in model.weights:
        if not keras.backend.is_float_dtype(variable.dtype):
            raise ValueError(
                f"Cannot export model '{model.name}' to {target}: variable {variable.path!r} has "
                f"dtype {variable.dtype}. Export the float model (before keras_vit.quantize)."
            )


def check_destination(path, overwrite, *, suffixes=(".safetensors",),
                      content="a safetensors file", argument="path"):
    """The target file's path as a str, checked before anything is written.

    Raises:
        TypeError: `path` is no str or path-like.
        ValueError: its suffix names another format than `content` (`model.pth`).
        IsADirectoryError: it is a folder.
        FileExistsError: an entry (a file, or a symbolic link, dangling or not) is there and
            `overwrite` is False.
        PermissionError: its folder cannot be written.
    """
    from keras_vit.saving import check_path_argument, check_suffix, check_writable

    path = check_path_argument(path, argument)
    check_suffix(path, suffixes, content, argument)
    if os.path.isdir(path):
        raise IsADirectoryError(f"Expected a file path to write. Received the folder {path!r}")
    check_writable(path)
    if os.path.lexists(path) and not overwrite:
        link = " (a symbolic link)" if os.path.islink(path) else ""
        raise FileExistsError(
            f"{path!r}{link} already exists. Pass overwrite=True to replace it."
        )
    return path


def write_json_file(path, value):
    """Writes `value` as an indented JSON file, atomically (`keras_vit.saving.atomic_write`)."""
    import json

    from keras_vit.saving import atomic_write

    def write(staged):
        with open(staged, "w", encoding="utf-8") as f:
            json.dump(value, f, indent=2, sort_keys=True)

    atomic_write(path, write)
    return path


def write_state_dict(arrays, path, *, overwrite=False, metadata=None):
    """Writes `arrays` as a `.safetensors` file: staged beside it, then renamed into place.

    The file gets the mode a new file gets under the umask (an existing file keeps its own:
    `keras_vit.saving.atomic_write`).

    Args:
        arrays: dict {name: np.ndarray}.
        path: str or path-like, the `.safetensors` file to write (its folder is created).
        overwrite: bool. Replace an existing file. Defaults to False.
        metadata: optional dict {str: str}. Defaults to `{"format": "pt"}` (what PyTorch
            libraries expect).

    Returns:
        The path written, as a str.

    Raises:
        FileExistsError: `path` exists and `overwrite` is False.
        ValueError: `path` does not end with `.safetensors`.
    """
    from keras_vit.saving import atomic_write

    path = check_destination(path, overwrite)
    metadata = metadata or {"format": "pt"}
    atomic_write(path, lambda staged: write_safetensors(arrays, staged, metadata=metadata))
    return path


def model_config(model):
    """The `ViTConfig` of a keras_vit model (`model.config`; a clear error for other models).

    A model of a family's own kind (a `config` that is no `ViTConfig`: Gemma 4's towers) is
    refused by name: the writers are an allow-list of `VisionTransformer` models.
    """
    config = getattr(model, "config", None)
    if config is not None and not isinstance(config, ViTConfig):
        raise ValueError(
            "keras_vit writes timm and Hugging Face checkpoints of its VisionTransformer models "
            f"only; {type(model).__name__} {model.name!r} ({type(config).__name__}) is a model "
            "of its own kind that no exporter writes. Nothing was written; save it as a .keras "
            "file instead."
        )
    return ViTConfig.from_model(model)


def patch_encoder(model):
    """The model's `PatchEncoder` (its `patch_encoder` role)."""
    model_config(model)  # the error for a model that is no keras_vit ViT
    return model.patch_encoder


def is_zero(model, paths):
    """Whether every variable at `paths` of `model` is all zeros."""
    variables = model_variables(model)
    return all(not np.any(variable_value(variables[p])) for p in paths)
