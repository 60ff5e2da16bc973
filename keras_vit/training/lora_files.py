"""LoRA files: the adapters (and every other trainable weight) of a LoRA model in a small `.npz`.

`save_lora_weights(model, path)` writes them with the LoRA settings; `load_lora_weights(model,
path)` checks settings, names, shapes and dtypes before assigning anything and then puts them on a
freshly built base model; `exact_lora_variables` lets a run's backup keep `W`, A and B exactly
(Keras' `save_weights` would merge them). `keras_vit.training.lora` enables and merges LoRA.
"""

import contextlib
import os
import zipfile
import zlib

import keras
import numpy as np

from keras_vit.saving import SUFFIX_FORMATS, atomic_write, check_path_argument, check_suffix
from keras_vit.training.lora import (
    _check_model,
    _lora_layers,
    _own_variables,
    _target_layers,
    _walk,
    enable_lora,
    get_lora_settings,
    transformer_blocks,
)
from keras_vit.training.settings import check_lora_alpha, check_lora_rank, check_lora_targets
from keras_vit.weights.loading import dtype_problems

_META = "__lora__/"
_FORMAT_VERSION = 1


def _save_exact(layer, store):
    for i, variable in enumerate(layer.weights):
        store[str(i)] = variable


def _load_exact(layer, store):
    if len(store.keys()) != len(layer.weights):
        raise ValueError(
            f"Layer {layer.path!r} has LoRA, and its {len(layer.weights)} variables were not "
            f"saved with exact_lora_variables: the file holds {len(store.keys())}."
        )
    for i, variable in enumerate(layer.weights):
        variable.assign(store[str(i)])


@contextlib.contextmanager
def exact_lora_variables(model):
    """Within it, `model.save_weights` / `load_weights` keep the LoRA layers as they are.

    Keras writes a LoRA layer's merged kernel (`W + scale * A @ B`) and no adapters, and
    loading sets the adapters to zero: the outputs survive, the split into frozen `W` and
    trained `A`, `B` does not. Within this context each LoRA layer of `model` writes and reads
    its variables as they are (`W`, bias, `A`, `B`). The recipe runner's resumable backups use
    it, so that a resumed LoRA run's adapters (`save_lora_weights`) still fit the base model.

    Example:

    >>> import os, tempfile
    >>> from keras_vit.models.vit import ViT
    >>> model = enable_lora(ViT("mu/8", image_size=16, num_classes=3), rank=2)
    >>> path = os.path.join(tempfile.mkdtemp(), "backup.weights.h5")
    >>> with exact_lora_variables(model):
    ...     model.save_weights(path)
    ...     model.load_weights(path)
    """
    layers = _lora_layers(model)
    for layer in layers:  # instance attributes: saving_lib calls them instead of the class's
        object.__setattr__(
            layer, "save_own_variables", lambda store, la=layer: _save_exact(la, store)
        )
        object.__setattr__(
            layer, "load_own_variables", lambda store, la=layer: _load_exact(la, store)
        )
    try:
        yield model
    finally:
        for layer in layers:
            object.__delattr__(layer, "save_own_variables")
            object.__delattr__(layer, "load_own_variables")


def _variable_keys(model):
    """`{id(variable): "layer/sublayer/variable"}` for every variable of `model`."""
    keys = {}
    for name, layer in _walk(model):
        for variable in _own_variables(layer):
            keys.setdefault(id(variable), f"{name}/{variable.name}")
    return keys


def _array(variable):
    return np.asarray(keras.ops.convert_to_numpy(variable), dtype="float32")


def save_lora_weights(model, path):
    """Writes `model`'s LoRA adapters and other trainable weights to a small `.npz` file.

    The file holds every trainable weight (after `enable_lora`: the `lora_kernel_a` /
    `lora_kernel_b` of each adapted layer, the head, and whatever was unfrozen), keyed by
    layer path (`encoderblock_0/attention/query/lora_kernel_a`, `head/kernel`), float32, plus
    the LoRA settings (`__lora__/rank`, `__lora__/alpha`, `__lora__/targets`). Written
    atomically. `load_lora_weights` puts it on a base model built the same way.

    Args:
        model: a keras_vit model with LoRA enabled.
        path: str or path. The file to write (any name; `.lora.npz` is a good suffix).

    Returns:
        The path, as a str.

    Raises:
        ValueError: the model has no LoRA.

    Example:

    >>> import os, tempfile
    >>> from keras_vit.models.vit import ViT
    >>> model = enable_lora(ViT("mu/8", image_size=16, num_classes=3), rank=2)
    >>> path = save_lora_weights(model, os.path.join(tempfile.mkdtemp(), "a.lora.npz"))
    >>> os.path.basename(path)
    'a.lora.npz'
    """
    _check_model(model, "save_lora_weights")
    config = get_lora_settings(model)
    if config is None:
        raise ValueError(
            f"save_lora_weights needs a model with LoRA (keras_vit.enable_lora). Received: "
            f"model {model.name!r} without LoRA"
        )
    keys = _variable_keys(model)
    arrays = {keys[id(v)]: _array(v) for v in model.trainable_weights}
    arrays[_META + "format_version"] = np.asarray(_FORMAT_VERSION)
    arrays[_META + "rank"] = np.asarray(config["rank"])
    arrays[_META + "alpha"] = np.asarray(config["alpha"], dtype="float64")
    arrays[_META + "targets"] = np.asarray(config["targets"])
    path = check_path_argument(path)
    suffix = os.path.splitext(path)[1].lower()
    if suffix in SUFFIX_FORMATS and suffix != ".npz":  # any name, but none of another format
        check_suffix(path, (".npz",), "a NumPy .npz archive of LoRA weights")

    def write(staged):
        with open(staged, "wb") as f:  # a file object: np.savez adds no ".npz"
            np.savez(f, **arrays)

    atomic_write(path, write)
    return path


def _read_lora_file(path):
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"LoRA weights path {path!r} is a folder; expected a file.")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"LoRA weights file not found: {path!r}")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
    except PermissionError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error) as error:
        raise ValueError(
            f"{path!r} is not a LoRA weights file written by save_lora_weights that can be "
            f"read (truncated or corrupt? {type(error).__name__}: {error})."
        ) from None
    bad = dtype_problems({k: a for k, a in arrays.items() if not k.startswith(_META)})
    if bad:
        raise ValueError(
            f"{path!r} holds arrays that cannot be weights: "
            + "; ".join(f"{key} {why}" for key, why in list(bad.items())[:5])
        )
    missing = [k for k in ("rank", "alpha", "targets") if _META + k not in arrays]
    if missing:
        raise ValueError(
            f"{path!r} is not a LoRA weights file written by save_lora_weights: it has no "
            f"{[_META + k for k in missing]}."
        )
    try:
        config = {
            "rank": int(arrays.pop(_META + "rank")),
            "alpha": float(arrays.pop(_META + "alpha")),
            "targets": tuple(str(t) for t in arrays.pop(_META + "targets").reshape(-1)),
        }
    except (TypeError, ValueError) as error:
        raise ValueError(f"{path!r} holds unreadable LoRA settings ({error}).") from None
    arrays.pop(_META + "format_version", None)
    return config, arrays


def _expected_lora_shapes(model, config):
    """`{key: shape}` of the LoRA matrices `enable_lora(model, **config)` would create."""
    names = {id(layer): name for name, layer in _walk(model)}
    shapes = {}
    for block in transformer_blocks(model):
        for target in config["targets"]:
            for layer in _target_layers(block, target):
                kernel_shape = tuple(layer.kernel.shape)
                name = names[id(layer)]
                shapes[f"{name}/lora_kernel_a"] = kernel_shape[:-1] + (config["rank"],)
                shapes[f"{name}/lora_kernel_b"] = (config["rank"], kernel_shape[-1])
    return shapes


def load_lora_weights(model, path):
    """Loads a `save_lora_weights` file onto `model`, enabling LoRA first if needed.

    On a base model without LoRA (e.g. freshly built, or loaded from the `.keras` of the
    model the adapters were trained from), it calls `enable_lora` with the file's rank,
    targets and alpha, then assigns every weight in the file. A model that already has LoRA
    must have the same settings. Everything is checked before anything changes: on any
    error the model is left as it was.

    Args:
        model: a keras_vit model of the architecture the file was saved from.
        path: str or path. A file written by `save_lora_weights`.

    Returns:
        `model`, changed in place.

    Raises:
        FileNotFoundError: no such file.
        ValueError: not a LoRA weights file; the model's LoRA settings (rank, alpha,
            targets) differ from the file's; a weight of the file that the model lacks, or
            with another shape (both named); an adapter of the model missing in the file.

    Example:

    >>> import os, tempfile
    >>> from keras_vit.models.vit import ViT
    >>> trained = enable_lora(ViT("mu/8", image_size=16, num_classes=3), rank=2, alpha=4)
    >>> path = save_lora_weights(trained, os.path.join(tempfile.mkdtemp(), "a.lora.npz"))
    >>> base = ViT("mu/8", image_size=16, num_classes=3)
    >>> get_lora_settings(load_lora_weights(base, path))
    {'rank': 2, 'alpha': 4.0, 'targets': ('query', 'value')}
    """
    _check_model(model, "load_lora_weights")
    file_config, arrays = _read_lora_file(path)
    try:
        targets = check_lora_targets(file_config["targets"])
        rank = check_lora_rank(file_config["rank"])
        alpha = check_lora_alpha(file_config["alpha"])
    except ValueError as error:
        raise ValueError(f"{os.fspath(path)!r} holds bad LoRA settings: {error}") from None
    current = get_lora_settings(model)
    if current is not None and current != file_config:
        raise ValueError(
            f"The model's LoRA settings differ from the file's. Expected (file "
            f"{os.fspath(path)!r}): {file_config}. Received (model): {current}"
        )
    # Shapes of everything the file assigns, as the model has (or will have) them.
    keys = _variable_keys(model)
    shapes = {key: tuple(v.shape) for v in model.weights if (key := keys.get(id(v)))}
    lora_shapes = _expected_lora_shapes(model, file_config)
    shapes.update(lora_shapes)
    unknown = sorted(k for k in arrays if k not in shapes)
    if unknown:
        raise ValueError(
            f"{os.fspath(path)!r} holds weights model {model.name!r} does not have: {unknown[:5]}"
            f"{' ...' if len(unknown) > 5 else ''}. Was it saved from another architecture?"
        )
    wrong = [
        f"{k}: expected {shapes[k]}, received {tuple(a.shape)}"
        for k, a in arrays.items()
        if tuple(a.shape) != shapes[k]
    ]
    if wrong:
        raise ValueError(
            f"Weights in {os.fspath(path)!r} have other shapes than model {model.name!r}'s: "
            + "; ".join(wrong[:5])
        )
    absent = sorted(k for k in lora_shapes if k not in arrays)
    if absent:
        raise ValueError(
            f"{os.fspath(path)!r} lacks LoRA weights the model needs: {absent[:5]}"
            f"{' ...' if len(absent) > 5 else ''}"
        )
    if current is None:
        enable_lora(model, rank, targets=targets, alpha=alpha)
        keys = _variable_keys(model)
    by_key = {keys[id(v)]: v for v in model.weights if id(v) in keys}
    for key, value in arrays.items():
        variable = by_key[key]
        variable.assign(value.astype(variable.dtype))
    return model
