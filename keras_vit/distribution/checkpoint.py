"""Sharded checkpoints: each process writes the blocks its devices own; read back on any layout.

`save_sharded(model, folder)` writes a model's variables (and its optimizer's) without gathering
them anywhere: every process writes one `.safetensors` file of the blocks its devices hold (each
distinct block once: the replica that JAX numbers 0), one block on the host at a time, and
process 0 adds `sharded.json` (the variables' paths, shapes and dtypes, the files and their
sizes, the model's Keras config). The folder appears whole or not at all (written under
`.<name>.partial` beside it, renamed when every process has finished); an existing folder is
replaced only when asked (`overwrite=True`) and only when it is a sharded checkpoint itself.

`load_sharded(model, folder)` fills a model built on any mesh (another shape, another number of
processes, one device, another backend): each variable is read block by block for the blocks
this process's devices hold under the variable's own layout, every block assembled from the
saved blocks it overlaps (`safetensors`' `get_slice`); `load_sharded_model(folder)` builds the
model from the saved config first (inside the active distribution: initialised sharded). The
bytes read are counted in `keras_vit.weights.lazy.STATISTICS`.

The format is a folder of plain `.safetensors` files (data only, no code) with a JSON index:

    sharded.json                          {"format": "keras_vit sharded", "version": 1, ...}
    process-00000-of-00002.safetensors    "weights/12/0:16,0:32": rows 0-15, columns 0-31
    process-00001-of-00002.safetensors    ...

Every process must call `save_sharded` together (it synchronises them), on a folder they all see
(a shared file system with several machines, as for any multi-host checkpoint). A folder from
anyone is read as data (`keras_vit.distribution.checkpoint_files`: the JSON index and every
block's name, bounds, shape and dtype checked before any variable changes; Keras' `safe_mode`
for the model config).

Why this format and not the two Keras offers. Keras' sharded weights (`save_weights` to a
`.weights.json` with `max_shard_size`) split the file by size, but write every variable through
`convert_to_numpy` in one process: each whole variable is gathered onto one host (and a
variable spread over several processes cannot be written at all). `keras.callbacks.
OrbaxCheckpoint` writes per-process shards and restores onto new layouts, but it needs
`orbax-checkpoint` (and tensorstore), which keras_vit does not depend on, and its state tree
is tied to the model's structure; its format is read only by Orbax. Plain `.safetensors`
blocks with a JSON index need nothing beyond what keras_vit already uses to read strangers'
checkpoints safely, are read by NumPy on every backend (a checkpoint of a sharded JAX run loads
into a TensorFlow or PyTorch model on one device), and let the runner publish backups
atomically with its own fingerprints. What it lacks against Orbax: asynchronous saving and
object stores (a shared POSIX folder is needed with several machines).
"""

import contextlib
import json
import os
import shutil
import uuid

import keras
import numpy as np

from keras_vit import saving
from keras_vit.distribution.checkpoint_files import (
    FORMAT,
    MANIFEST,
    VERSION,
    block_key,
    check_coverage,
    file_name,
    fingerprint,
    is_checkpoint_file,
    is_sharded_checkpoint,
    parse_block,
    read_manifest,
)
from keras_vit.weights import lazy, lazy_slices

__all__ = [
    "MANIFEST", "fingerprint", "is_sharded_checkpoint", "is_sharded_model", "load_sharded",
    "load_sharded_model", "read_manifest", "save_sharded",
]  # fmt: skip


def is_sharded_model(model):
    """Whether any variable of `model` (or of its optimizer) is split over devices (JAX): a
    model `save_sharded` writes without gathering, where Keras' writers would gather it."""
    if keras.backend.backend() != "jax":
        return False
    for variables in checkpoint_variables(model).values():
        for variable in variables:
            sharding = getattr(variable.value, "sharding", None)
            if sharding is not None and not sharding.is_fully_replicated:
                return True
    return False


# --- processes ----------------------------------------------------------------------------------


def _processes():
    """`(index, count)` of this process among those training together (JAX; else (0, 1))."""
    if keras.backend.backend() != "jax":
        return 0, 1
    import jax

    return jax.process_index(), jax.process_count()


def _processes_without(flag):
    """The indices of the processes whose `flag` is False (every process calls it: JAX
    gathers the flags)."""
    index, count = _processes()
    if count == 1:
        return [] if flag else [0]
    from jax.experimental import multihost_utils

    flags = np.asarray(multihost_utils.process_allgather(np.asarray([int(bool(flag))])))
    return [int(i) for i in np.flatnonzero(flags.reshape(-1) == 0)]


def _barrier(name):
    """Waits until every process gets here (a no-op with one process)."""
    if _processes()[1] == 1:
        return
    from jax.experimental import multihost_utils

    multihost_utils.sync_global_devices(name)


# --- writing ------------------------------------------------------------------------------------


def checkpoint_variables(model, include_optimizer=True):
    """`{group: [variables]}` a sharded checkpoint holds: the model's weights (what
    `save_weights` writes, trainable and not) and, when built, its optimizer's variables."""
    groups = {"weights": list(model.weights)}
    optimizer = getattr(model, "optimizer", None)
    if include_optimizer and optimizer is not None and optimizer.built:
        groups["optimizer"] = list(optimizer.variables)
    return groups


class _DeviceBlock:
    """One block of a variable on its device, copied to the host when written (`__array__`)."""

    def __init__(self, data, dtype):
        self.data = data
        self.shape = tuple(int(d) for d in data.shape)
        self.dtype = np.dtype(dtype)

    def __array__(self, dtype=None, copy=None):
        array = np.asarray(self.data)
        return array if dtype is None else array.astype(dtype)


def owned_blocks(variable):
    """`[(index, data)]`: the blocks of `variable` this process writes, each distinct block of
    the variable written by exactly one process (JAX's replica 0 of it); `index` is one
    `slice(start, stop)` per dimension."""
    value = variable.value
    shape = tuple(int(d) for d in variable.shape)
    if keras.backend.backend() == "jax":
        import jax

        if isinstance(value, jax.Array):
            return [
                (lazy_slices.normalize(shard.index, shape), shard.data)
                for shard in value.addressable_shards
                if shard.replica_id == 0
            ]
    if _processes()[0] != 0:
        return []
    return [(tuple(slice(0, d) for d in shape), keras.ops.convert_to_numpy(value))]


def _dtype_name(variable):
    return keras.backend.standardize_dtype(variable.dtype)


def _numpy_dtype(name):
    if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def _model_config(model):
    """The model's Keras config without its compile config (the optimizer is data of its own
    group; `load_sharded_model` builds the model uncompiled, as `load_model(compile=False)`)."""
    try:
        config = keras.saving.serialize_keras_object(model)
        config.pop("compile_config", None)
        json.dumps(config)
    except Exception:  # noqa: BLE001  (a model Keras cannot serialise: weights only)
        return None
    return config


def _sibling(folder, what):
    """A hidden sibling of `folder` (`.<name>.partial` while written, `.<name>.old` while
    replaced): one name every process agrees on."""
    parent, name = os.path.split(folder)
    return os.path.join(parent, f".{name}.{what}")


def _is_ours(folder):
    """Whether `folder` holds nothing but the files of a sharded checkpoint (a leftover of an
    interrupted save, which may go)."""
    return os.path.isdir(folder) and not os.path.islink(folder) and all(
        is_checkpoint_file(name) and os.path.isfile(os.path.join(folder, name))
        for name in os.listdir(folder)
    )


def _check_folder(folder, overwrite):
    folder = os.path.abspath(saving.check_path_argument(folder, "folder"))
    if os.path.lexists(folder):
        if not overwrite:
            raise FileExistsError(f"{folder!r} already exists. Pass overwrite=True to replace it.")
        if not is_sharded_checkpoint(folder) or not _is_ours(folder):
            raise FileExistsError(
                f"{folder!r} exists and is not a sharded checkpoint (no {MANIFEST}, or files of "
                "other names in it); it is not replaced. Choose another folder."
            )
    for what in ("partial", "old"):  # a leftover of an interrupted save goes; nothing else
        sibling = _sibling(folder, what)
        if os.path.lexists(sibling) and not _is_ours(sibling):
            raise FileExistsError(
                f"{sibling!r} (where save_sharded stages {folder!r}) exists and holds other "
                "files than a sharded checkpoint's; it is not replaced. Move it away."
            )
    saving.check_writable(folder, "sharded checkpoint folder")
    return folder


def save_sharded(model, folder, *, include_optimizer=True, overwrite=False):
    """Writes `model`'s variables as a sharded checkpoint: no process gathers anything.

    Every process writes the blocks its devices own into its own `.safetensors` file, one block
    on the host at a time; process 0 writes the index. Call it in every process at once.

    Args:
        model: a built `keras.Model` (sharded by a `keras.distribution` or not).
        folder: str or path-like. The checkpoint folder to create.
        include_optimizer: bool. Also write the optimizer's variables (moments, step count,
            EMA weights) when it is built. Defaults to True.
        overwrite: bool. Replace an existing sharded checkpoint at `folder` (once the new one
            is complete). Defaults to False.

    Returns:
        The folder written, as an absolute path.

    Raises:
        FileExistsError: `folder` exists and `overwrite` is False, or it is no sharded
            checkpoint (never replaced).
        PermissionError: its parent folder cannot be written.

    Example:

    >>> import os, tempfile, keras_vit
    >>> model = keras_vit.ViT("mu/8", image_size=16, num_classes=3)
    >>> folder = save_sharded(model, os.path.join(tempfile.mkdtemp(), "ckpt"))
    >>> sorted(os.listdir(folder))
    ['process-00000-of-00001.safetensors', 'sharded.json']
    """
    folder = _check_folder(folder, overwrite)
    index, count = _processes()
    groups = checkpoint_variables(model, include_optimizer)
    staging = _sibling(folder, "partial")
    if index == 0:
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(staging)
    _barrier("save_sharded: staging")
    missing = _processes_without(os.path.isdir(staging))
    if missing:
        raise FileNotFoundError(
            f"save_sharded: process(es) {missing} do not see {staging!r}, which process 0 "
            "created: every process writes its part into the same folder, so it must be on a "
            "file system they all share."
        )
    from keras_vit.weights.state_dict import write_safetensors

    blocks = {}
    for group, variables in groups.items():
        for position, variable in enumerate(variables):
            for block_index, data in owned_blocks(variable):
                key = block_key(group, position, block_index)
                blocks[key] = _DeviceBlock(data, _numpy_dtype(_dtype_name(variable)))
    path = os.path.join(staging, file_name(index, count))
    write_safetensors(blocks, path, metadata={"format": FORMAT})
    with open(path, "rb") as f:
        os.fsync(f.fileno())
    _barrier("save_sharded: written")
    if index == 0:
        _publish(model, groups, staging, folder, count)
    _barrier("save_sharded: published")
    return folder


def _publish(model, groups, staging, folder, count):
    files = {}
    for i in range(count):
        name = file_name(i, count)
        files[name] = os.path.getsize(os.path.join(staging, name))
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "id": uuid.uuid4().hex,  # two checkpoints of equal weights still differ (backups)
        "num_processes": count,
        "files": files,
        "groups": {
            group: [
                {"path": v.path, "shape": [int(d) for d in v.shape], "dtype": _dtype_name(v)}
                for v in variables
            ]
            for group, variables in groups.items()
        },
        "model": _model_config(model),
        "backend": keras.backend.backend(),
    }
    with open(os.path.join(staging, MANIFEST), "w") as f:
        json.dump(manifest, f)
        f.flush()
        os.fsync(f.fileno())
    if os.path.lexists(folder):  # overwrite (checked): the old one goes once the new is whole
        old = _sibling(folder, "old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(folder, old)
        os.replace(staging, folder)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, folder)


# --- reading ------------------------------------------------------------------------------------


def _check_group(folder, group, saved, variables):
    """Problems (strings) of assigning the saved `group` entries to `variables`."""
    if len(saved) != len(variables):
        return [
            f"{group}: the checkpoint holds {len(saved)} variables, the model {len(variables)}"
        ]
    problems = []
    for entry, variable in zip(saved, variables, strict=True):
        shape = tuple(int(d) for d in variable.shape)
        if tuple(entry["shape"]) != shape:
            problems.append(
                f"{group}: {variable.path!r} has shape {shape}; the checkpoint's "
                f"{entry['path']!r} {tuple(entry['shape'])}"
            )
        elif _is_float(entry["dtype"]) != _is_float(_dtype_name(variable)):
            problems.append(
                f"{group}: {variable.path!r} is {_dtype_name(variable)}; the checkpoint's "
                f"{entry['path']!r} {entry['dtype']}"
            )
    return problems


def _is_float(name):
    return "float" in name


class _Assembled:
    """A saved variable read block by block (the `Deferred` interface `lazy.place` takes):
    each requested block put together from the saved blocks it overlaps."""

    lazy = True

    def __init__(self, shape, dtype, blocks, files):
        self.shape = tuple(shape)
        self.dtype = _numpy_dtype(dtype)
        self.blocks = blocks  # [(file name, key, starts, stops)]
        self.files = files  # {file name: open safe_open handle}

    def block(self, index, cache=None):
        index = lazy_slices.normalize(index, self.shape)
        out = np.empty(tuple(s.stop - s.start for s in index), self.dtype)
        for name, key, starts, stops in self.blocks:
            source, target = [], []
            for s, start, stop in zip(index, starts, stops, strict=True):
                low, high = max(s.start, start), min(s.stop, stop)
                if low >= high:
                    break
                source.append(slice(low - start, high - start))
                target.append(slice(low - s.start, high - s.start))
            else:
                handle = self.files[name]
                part = handle.get_slice(key)[tuple(source)] if source else handle.get_tensor(key)
                part = np.asarray(part)
                lazy.STATISTICS["bytes_read"] += part.nbytes
                out[tuple(target)] = part
        return out


def _saved_blocks(folder, manifest, stack):
    """`{(group, position): [(file, key, starts, stops)]}` from the files' headers, each block
    checked against the index (`parse_block`, `check_coverage`); the open files entered on
    `stack`."""
    import ml_dtypes  # noqa: F401  (bfloat16 / float8 blocks need NumPy to know the types)
    from safetensors import SafetensorError, safe_open

    files, blocks = {}, {}
    for name in manifest["files"]:
        path = os.path.join(folder, name)
        try:
            handle = stack.enter_context(safe_open(path, framework="numpy"))
            headers = {key: handle.get_slice(key) for key in handle.keys()}
            headers = {k: (v.get_shape(), v.get_dtype()) for k, v in headers.items()}
        except (SafetensorError, OSError) as error:
            raise ValueError(f"{path!r} is no readable safetensors file: {error}") from None
        files[name] = handle
        for key, (shape, dtype) in headers.items():
            group, position, starts, stops = parse_block(path, key, shape, dtype, manifest)
            blocks.setdefault((group, position), []).append((name, key, starts, stops))
    check_coverage(folder, manifest, blocks)
    return files, blocks


def load_sharded(model, folder, *, include_optimizer=True):
    """Reads a sharded checkpoint into `model`, on whatever layout its variables have now.

    Each process reads only the blocks its own devices hold (each assembled from the saved
    blocks it overlaps), so the checkpoint loads on another mesh shape, another number of
    processes, one device or another backend. Everything is checked (counts, shapes, the
    files' sizes) before any variable changes.

    Args:
        model: a built `keras.Model` with the checkpoint's variables (built under the
            distribution to load onto, if any).
        folder: str or path-like. A folder written by `save_sharded`.
        include_optimizer: bool. Also restore the optimizer's variables when the checkpoint
            holds them and the model has an optimizer (built here if need be). Defaults to True.

    Returns:
        The loaded manifest (dict).

    Raises:
        FileNotFoundError: no such checkpoint.
        ValueError: the checkpoint is incomplete or damaged, or does not fit the model (each
            mismatch named).
    """
    folder = os.fspath(folder)
    manifest = read_manifest(folder)
    saved = manifest["groups"]
    targets = {"weights": list(model.weights)}
    optimizer = getattr(model, "optimizer", None)
    if include_optimizer and "optimizer" in saved and optimizer is not None:
        if not optimizer.built:
            optimizer.build(model.trainable_variables)
        targets["optimizer"] = list(optimizer.variables)
    problems = []
    for group, variables in targets.items():
        problems += _check_group(folder, group, saved[group], variables)
    if problems:
        raise ValueError(
            f"The sharded checkpoint {folder!r} does not fit model {model.name!r} "
            f"({len(problems)} problem(s)): " + "; ".join(problems[:6])
            + (" ..." if len(problems) > 6 else "")
        )
    with contextlib.ExitStack() as stack:
        files, blocks = _saved_blocks(folder, manifest, stack)
        jax_backend = keras.backend.backend() == "jax"
        for group, variables in targets.items():
            for position, variable in enumerate(variables):
                entry = saved[group][position]
                source = _Assembled(
                    entry["shape"], entry["dtype"], blocks.get((group, position), []), files
                )
                if jax_backend:
                    lazy.place(variable, source, {})
                else:
                    whole = source.block(tuple(slice(0, d) for d in source.shape))
                    variable.assign(whole.astype(_numpy_dtype(_dtype_name(variable))))
    return manifest


def load_sharded_model(folder):
    """The model a sharded checkpoint holds: built from its saved config (inside the active
    distribution, if any: initialised sharded), then `load_sharded` (without the optimizer).
    `keras_vit.load_model(folder)` calls it.

    The config is data: a `VisionTransformer`'s is checked as a `ViTConfig` first, and Keras
    builds it with `safe_mode` on.

    Raises:
        FileNotFoundError: no such checkpoint.
        ValueError: the checkpoint is damaged, or holds no model config (written from a model
            Keras cannot serialise: build the model yourself and call `load_sharded`).
    """
    folder = os.fspath(folder)
    manifest = read_manifest(folder)
    if manifest.get("model") is None:
        raise ValueError(
            f"The sharded checkpoint {folder!r} holds weights without a model config: build "
            "the model and call keras_vit.distribution.checkpoint.load_sharded(model, folder)."
        )
    config = {k: v for k, v in manifest["model"].items() if k != "compile_config"}  # uncompiled
    saving.check_archive_config(os.path.join(folder, MANIFEST), config)
    try:
        model = keras.saving.deserialize_keras_object(config, safe_mode=True)
    except (TypeError, ValueError, KeyError) as error:
        raise ValueError(
            f"{os.path.join(folder, MANIFEST)!r}: its model config does not build a model "
            f"({type(error).__name__}: {error})."
        ) from None
    if not isinstance(model, keras.Model):
        raise ValueError(
            f"{os.path.join(folder, MANIFEST)!r}: its model config describes a "
            f"{type(model).__name__}, not a keras.Model."
        )
    load_sharded(model, folder, include_optimizer=False)
    return model


# `keras_vit.load_model` (floor 2) reads a sharded folder through this reader (keras_vit/_plugins).
saving.register_sharded_reader(load_sharded_model)
