"""PyTorch-style state dicts (timm, Hugging Face) as NumPy arrays, read safely.

`read_state_dict` takes what a PyTorch library saves and returns `{name: numpy array}`:

- a `.safetensors` file (read with the `safetensors` package when it is installed, else with the
  small NumPy reader below: an 8-byte little-endian header length, a JSON header with each
  tensor's `dtype`, `shape` and `data_offsets`, then the raw bytes; BF16 and F8 tensors, which
  NumPy has no type for, are widened to float32), or the `*.safetensors.index.json` of a sharded
  checkpoint;
- a `.pth` / `.pt` / `.bin` / `.ckpt` file, through `torch.load(..., weights_only=True,
  map_location="cpu")` only: files from strangers are data, never pickled code. This needs
  PyTorch (an `ImportError` naming the pip package otherwise);
- a `.npz` file (`allow_pickle=False`);
- a dict of arrays: NumPy arrays or PyTorch tensors (or anything `numpy.asarray` reads).

Training checkpoints nest the weights (`{"state_dict": {...}, "epoch": ...}`, `{"model": ...}`)
and wrappers prefix the names (`module.` from DataParallel / DDP, `model.` from Lightning):
`read_state_dict` unwraps the nesting and strips a prefix that every name carries.
"""

import json
import os
import pickle
import struct

import numpy as np

SAFETENSORS_SUFFIX = ".safetensors"
INDEX_SUFFIX = ".safetensors.index.json"
TORCH_SUFFIXES = (".pth", ".pt", ".bin", ".ckpt")
SUFFIXES = (SAFETENSORS_SUFFIX, INDEX_SUFFIX, *TORCH_SUFFIXES, ".npz")
# Keys under which training checkpoints nest the weights, in the order they are tried.
NESTING_KEYS = ("state_dict", "model", "module")
# Prefixes wrappers put in front of every name (DataParallel / DDP, Lightning).
PREFIXES = ("module.", "model.")

# safetensors dtype -> NumPy dtype. BF16 and the F8 types are converted by `_widen`.
_DTYPES = {
    "F64": "<f8",
    "F32": "<f4",
    "F16": "<f2",
    "I64": "<i8",
    "I32": "<i4",
    "I16": "<i2",
    "I8": "i1",
    "U64": "<u8",
    "U32": "<u4",
    "U16": "<u2",
    "U8": "u1",
    "BOOL": "?",
}
_WIDENED = {"BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1}  # dtype -> bytes per element
_NARROW = ("bfloat16", "float8_e4m3fn", "float8_e5m2")
_MAX_HEADER = 100 * 1024 * 1024  # the safetensors format's own limit


def _not_a_checkpoint(path, reason):
    return ValueError(
        f"{path!r} is not a valid {_kind(path)} checkpoint ({reason}). A truncated or corrupt "
        "download? Download the file again."
    )


def _kind(path):
    for suffix in SUFFIXES:
        if str(path).endswith(suffix):
            return suffix
    return os.path.splitext(str(path))[1] or "weights"


def _bf16_to_float32(raw):
    """bfloat16 bits (uint16) -> float32: the 16 high bits of a float32."""
    return (raw.astype("<u4") << 16).view("<f4")


def _f8_to_float32(raw, dtype):
    try:
        import ml_dtypes  # ships with JAX and TensorFlow
    except ImportError as error:  # pragma: no cover - depends on the install
        raise ImportError(
            f"Reading {dtype} tensors needs ml_dtypes: pip install ml_dtypes"
        ) from error
    kind = {"F8_E4M3": ml_dtypes.float8_e4m3fn, "F8_E5M2": ml_dtypes.float8_e5m2}[dtype]
    return raw.view(kind).astype("float32")


def _widen(raw, dtype):
    if dtype == "BF16":
        return _bf16_to_float32(raw.view("<u2"))
    return _f8_to_float32(raw.view("u1"), dtype)


def _read_safetensors_numpy(path):
    """The NumPy reader of the safetensors format (no third-party package)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        start = f.read(8)
        if len(start) < 8:
            raise _not_a_checkpoint(path, f"{size} bytes, shorter than the 8-byte header length")
        (header_size,) = struct.unpack("<Q", start)
        if header_size > min(_MAX_HEADER, size - 8):
            raise _not_a_checkpoint(
                path, f"header length {header_size} does not fit in the file of {size} bytes"
            )
        try:
            header = json.loads(f.read(header_size).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise _not_a_checkpoint(path, f"unreadable JSON header: {error}") from error
        if not isinstance(header, dict):
            raise _not_a_checkpoint(path, "the JSON header is not an object")
        data_start = 8 + header_size
        arrays = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            arrays[name] = _read_tensor(f, path, name, info, data_start, size)
    return arrays


def _read_tensor(f, path, name, info, data_start, size):
    try:
        dtype, shape = info["dtype"], [int(d) for d in info["shape"]]
        begin, end = (int(o) for o in info["data_offsets"])
    except (KeyError, TypeError, ValueError) as error:
        raise _not_a_checkpoint(path, f"tensor {name!r} has a malformed header entry") from error
    if dtype in _DTYPES:
        itemsize = np.dtype(_DTYPES[dtype]).itemsize
    elif dtype in _WIDENED:
        itemsize = _WIDENED[dtype]
    else:
        raise ValueError(
            f"{path!r}: tensor {name!r} has dtype {dtype}, which this reader does not support. "
            f"Expected one of {sorted([*_DTYPES, *_WIDENED])}."
        )
    count = int(np.prod(shape, dtype="int64"))
    if end - begin != count * itemsize or begin < 0 or data_start + end > size:
        raise _not_a_checkpoint(
            path,
            f"tensor {name!r} ({dtype} {tuple(shape)}) has byte range [{begin}, {end}), which "
            f"does not match its size or the file of {size} bytes",
        )
    f.seek(data_start + begin)
    raw = np.frombuffer(f.read(end - begin), dtype=_DTYPES.get(dtype, "u1"))
    array = _widen(raw, dtype) if dtype in _WIDENED else raw.astype(raw.dtype.newbyteorder("="))
    return array.reshape(shape)


def _read_safetensors_package(path, safe_open):
    """The `safetensors` package's reader; None when a tensor's dtype has no NumPy type."""
    arrays = {}
    with safe_open(path, framework="numpy") as f:
        for name in f.keys():
            try:
                array = f.get_tensor(name)
            except TypeError:  # bfloat16 / float8 without ml_dtypes: NumPy has no such dtype
                return None
            # With ml_dtypes imported (JAX, TensorFlow) they come as ml_dtypes arrays: widen.
            arrays[name] = array.astype("float32") if str(array.dtype) in _NARROW else array
    return arrays


def read_safetensors(path):
    """Reads every tensor of a `.safetensors` file into a dict of NumPy arrays.

    Uses the `safetensors` package when it is installed, else a NumPy reader of the
    format; BF16 (and F8) tensors are widened to float32 either way.

    Args:
        path: str or path-like.

    Returns:
        dict {name: np.ndarray}, in file order.

    Raises:
        FileNotFoundError: `path` does not exist.
        ValueError: the file is not a readable safetensors file (naming it), or holds a
            dtype NumPy cannot represent.

    Example:

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "w.safetensors")
    >>> _ = write_safetensors({"w": np.ones((2, 3), "float32")}, path)
    >>> read_safetensors(path)["w"].shape
    (2, 3)
    """
    path = _existing_file(path)
    try:
        from safetensors import SafetensorError, safe_open
    except ImportError:
        return _read_safetensors_numpy(path)
    try:
        arrays = _read_safetensors_package(path, safe_open)
    except SafetensorError as error:
        raise _not_a_checkpoint(path, f"{type(error).__name__}: {error}") from error
    return _read_safetensors_numpy(path) if arrays is None else arrays


def write_safetensors(arrays, path, metadata=None):
    """Writes a dict of NumPy arrays as a `.safetensors` file (the format, in NumPy).

    The header comes from each value's `shape` and `dtype` before any data is asked for, then
    the values are converted (`numpy.asarray`) and written one at a time: a value that computes
    or gathers its array when converted (a device shard, a tensor inverted from a model's
    variables) is on the host alone, never all of them together.

    Args:
        arrays: dict {name: array-like}; float64, float32, float16, bfloat16, float8 and integer
            arrays (or objects with `shape`, `dtype` and `__array__`).
        path: str or path-like; written as given.
        metadata: optional dict {str: str} stored as `__metadata__`.

    Returns:
        The path written, as a str.
    """
    path = os.fspath(path)
    names = _writable_dtypes()
    header, offset, values = {}, 0, []
    for name, value in arrays.items():
        if not (hasattr(value, "shape") and hasattr(value, "dtype")):
            value = np.asarray(value)
        dtype = np.dtype(value.dtype)
        little = dtype.newbyteorder("<") if dtype.byteorder == ">" else dtype
        if little not in names:
            raise ValueError(
                f"write_safetensors cannot store {name!r} of dtype {value.dtype}. "
                f"Expected one of {sorted(str(d) for d in names)}."
            )
        shape = tuple(int(d) for d in value.shape)
        size = int(np.prod(shape, dtype="int64")) * little.itemsize
        header[name] = {
            "dtype": names[little],
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        values.append((name, value, little, shape, size))
        offset += size
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)  # data starts 8-byte aligned, as the format advises
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for name, value, little, shape, size in values:
            array = np.asarray(value, dtype=little, order="C")
            if array.shape != shape or array.nbytes != size:
                raise ValueError(
                    f"write_safetensors: {name!r} announced shape {shape} but gave an array of "
                    f"shape {array.shape}."
                )
            f.write(memoryview(array.reshape(-1).view(np.uint8)))
            del array
    return path


def _writable_dtypes():
    """{NumPy dtype: safetensors dtype name} of what `write_safetensors` stores."""
    names = {np.dtype(v): k for k, v in _DTYPES.items()}
    try:
        import ml_dtypes
    except ImportError:  # bfloat16 and float8 need ml_dtypes (installed with JAX and Keras)
        return names
    names[np.dtype(ml_dtypes.bfloat16)] = "BF16"
    names[np.dtype(ml_dtypes.float8_e4m3fn)] = "F8_E4M3"
    names[np.dtype(ml_dtypes.float8_e5m2)] = "F8_E5M2"
    return names


def _read_sharded(path):
    """A `*.safetensors.index.json` (sharded checkpoint): every shard its `weight_map` names."""
    weight_map, folder, shards = _index_shards(path)
    if _lazy_wanted():
        from keras_vit.weights import lazy

        arrays = {}
        for shard in shards:
            arrays.update(lazy.open_safetensors(os.path.join(folder, shard)))
        return _check_index_covered(path, weight_map, arrays)
    arrays, failures = {}, []
    for shard in shards:  # every shard is read: a second bad one is reported with the first
        try:
            arrays.update(read_safetensors(os.path.join(folder, shard)))
        except (OSError, ValueError) as error:
            failures.append(f"  {shard}: {error}")
    if failures:
        raise ValueError(
            f"{len(failures)} of the {len(shards)} shards that {path!r} names cannot be read "
            "(download them again):\n" + "\n".join(failures)
        )
    return _check_index_covered(path, weight_map, arrays)


def _check_index_covered(path, weight_map, arrays):
    missing = sorted(set(weight_map) - set(arrays))
    if missing:
        raise _not_a_checkpoint(path, f"its shards lack {len(missing)} tensors, e.g. {missing[:3]}")
    return arrays


def _lazy_wanted():
    from keras_vit.weights.lazy import sharded_read_wanted

    return sharded_read_wanted()


def _index_shards(path):
    """`(weight_map, folder, shards)` of a `*.safetensors.index.json`, its shard names checked."""
    try:
        with open(path, encoding="utf-8") as f:
            weight_map = json.load(f)["weight_map"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as error:
        raise _not_a_checkpoint(path, f"no readable weight_map: {error}") from error
    folder = os.path.dirname(os.path.abspath(path))
    shards = list(dict.fromkeys(weight_map.values()))
    for shard in shards:
        inside = isinstance(shard, str) and (
            os.path.commonpath([folder, os.path.abspath(os.path.join(folder, shard))]) == folder
        )
        if not inside or not shard.endswith(SAFETENSORS_SUFFIX):
            raise ValueError(
                f"{path!r} names the shard {shard!r}; expected a .safetensors file inside "
                f"{folder!r}."
            )
    return weight_map, folder, shards


def _torch_load(path):
    try:
        import torch
    except ImportError as error:
        raise ImportError(
            f"Reading the PyTorch checkpoint {path!r} needs PyTorch: pip install torch (or save "
            "the weights as .safetensors, which keras_vit reads without it)."
        ) from error
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (FileNotFoundError, PermissionError):
        raise
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as error:
        # weights_only=True reads tensors and plain containers, never pickled code: a file
        # holding objects fails here too, as does a truncated one. PyTorch's own text (which
        # offers to turn that safety off) is not quoted.
        if isinstance(error, pickle.UnpicklingError) or "weights_only" in str(error):
            why = (
                "it holds pickled Python objects besides tensors, which keras_vit never "
                "unpickles (unpickling can run code)"
            )
            fix = "save its state dict alone (model.state_dict()) or as .safetensors"
        else:
            why = f"it cannot be read ({type(error).__name__})"
            fix = "if the file is truncated or corrupt, download it again"
        raise ValueError(
            f"{path!r} is not a readable PyTorch checkpoint of tensors: {why}. To load it, "
            f"{fix}."
        ) from None


def sniff(path):
    """What a checkpoint file holds by its first bytes, whatever its suffix: "safetensors" (an
    8-byte header length, then a JSON object), "torch" (a zip archive or a pickle: what
    `torch.save` writes), "npz" (a zip archive of `.npy` files) or None."""
    with open(path, "rb") as f:
        head = f.read(64)
    size = os.path.getsize(path)
    if len(head) > 8 and head[8:9] == b"{":
        (header_size,) = struct.unpack("<Q", head[:8])
        if header_size <= size - 8:
            return "safetensors"
    if head.startswith(b"PK\x03\x04"):
        return "npz" if b".npy" in head else "torch"
    if head[:1] == b"\x80":  # pickle protocol 2+ (torch's legacy format)
        return "torch"
    return None


FOLDER_FILES = ("model.safetensors.index.json", "model.safetensors")


def checkpoint_in_folder(folder):
    """The checkpoint of a folder: Hugging Face's `model.safetensors.index.json` (a checkpoint
    in several parts), else `model.safetensors`, else its one `.safetensors` file."""
    folder = os.fspath(folder)
    for name in FOLDER_FILES:
        if os.path.isfile(os.path.join(folder, name)):
            return os.path.join(folder, name)
    found = sorted(n for n in os.listdir(folder) if n.endswith(SAFETENSORS_SUFFIX))
    if len(found) == 1:
        return os.path.join(folder, found[0])
    raise IsADirectoryError(
        f"Checkpoint path {folder!r} is a folder without {' or '.join(FOLDER_FILES)}"
        + (f" and with {len(found)} .safetensors files ({found[:3]}): name one" if found else "")
        + "; expected a checkpoint file or such a folder."
    )


def _existing_file(path):
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"Checkpoint file not found: {path!r}")
    if os.path.isdir(path):
        raise IsADirectoryError(f"Checkpoint path {path!r} is a folder; expected a file.")
    return path


def to_numpy(value):
    """A NumPy array from a NumPy array, a PyTorch tensor (bfloat16 widened) or array-like
    (a `keras_vit.weights.lazy.LazyTensor` stays lazy: it is read when assigned)."""
    if getattr(type(value), "lazy", False) is True:
        return value
    if type(value).__module__.startswith("torch"):
        value = value.detach().cpu()
        if str(value.dtype).replace("torch.", "") in _NARROW:
            value = value.float()
        return value.numpy()
    return np.asarray(value)


def _is_array(value):
    return hasattr(value, "shape") and hasattr(value, "dtype")


def unwrap(state_dict):
    """Unwraps training-checkpoint nesting and strips prefixes every name carries.

    `{"state_dict": {...}, "epoch": 3}` -> the inner dict (also `model`, `module`);
    `module.blocks.0...` / `model.blocks.0...` -> `blocks.0...` when every name has the
    prefix. Arrays are converted with `to_numpy`.

    Args:
        state_dict: a mapping of names to arrays or tensors, possibly nested.

    Returns:
        dict {name: np.ndarray}.

    Raises:
        ValueError: no arrays are found.

    Example:

    >>> sorted(unwrap({"state_dict": {"module.w": np.zeros(2)}, "epoch": 3}))
    ['w']
    """
    if not isinstance(state_dict, dict):
        raise ValueError(
            "Expected a state dict: a dict of arrays or tensors (or a path to a checkpoint "
            f"file). Received: {type(state_dict).__name__}"
        )
    while not any(_is_array(v) for v in state_dict.values()):
        nested = [state_dict[k] for k in NESTING_KEYS if isinstance(state_dict.get(k), dict)]
        inner = nested[0] if nested else None
        if inner is None:
            raise ValueError(
                "Found no arrays in the state dict. Expected {name: array} or a training "
                f"checkpoint nesting it under one of {NESTING_KEYS}. Received keys: "
                f"{sorted(map(str, state_dict))[:8]}"
            )
        state_dict = inner
    broken = [f"{k}={v!r}"[:80] for k, v in state_dict.items() if not _is_array(v)
              and not isinstance(v, dict)]  # fmt: skip
    if broken:
        raise ValueError(
            "A state dict maps names to arrays or tensors, but these entries are not arrays: "
            f"{', '.join(broken[:8])}{' ...' if len(broken) > 8 else ''}. Remove them or give "
            "their arrays."
        )
    arrays = {str(k): to_numpy(v) for k, v in state_dict.items() if _is_array(v)}
    stripped = True
    while stripped:
        stripped = False
        for prefix in PREFIXES:
            if arrays and all(k.startswith(prefix) for k in arrays):
                arrays = {k[len(prefix) :]: v for k, v in arrays.items()}
                stripped = True
    return arrays


def read_state_dict(source):
    """Reads a PyTorch-style state dict from a file or a dict into `{name: np.ndarray}`.

    Args:
        source: a path to a `.safetensors`, `*.safetensors.index.json`, `.pth`, `.pt`,
            `.bin`, `.ckpt` or `.npz` file, a folder holding `model.safetensors.index.json`
            and its parts (or one `.safetensors` file), or a dict of NumPy arrays / PyTorch tensors
            (possibly nested as in a training checkpoint).

    Returns:
        dict {name: np.ndarray}, nesting unwrapped and common prefixes stripped
        (see `unwrap`).

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: an unknown file type, or a file that is not a readable checkpoint
            (naming it), or no arrays.
        ImportError: a PyTorch file without PyTorch installed.

    Example:

    >>> sorted(read_state_dict({"module.head.weight": np.zeros((3, 4))}))
    ['head.weight']
    """
    if isinstance(source, dict):
        return unwrap(source)
    if not isinstance(source, (str, os.PathLike)):
        raise ValueError(
            "Expected a checkpoint path or a dict of arrays. "
            f"Received: {type(source).__name__}"
        )
    if os.path.isdir(source):
        source = checkpoint_in_folder(source)
    path = _existing_file(source)
    if path.endswith(INDEX_SUFFIX):
        return unwrap(_read_sharded(path))
    content = sniff(path)
    if path.endswith(SAFETENSORS_SUFFIX) or (
        path.endswith(TORCH_SUFFIXES) and content == "safetensors"
    ):
        if content == "torch":
            raise ValueError(
                f"{path!r} is named .safetensors but holds a PyTorch (torch.save) checkpoint. "
                "Rename it to .pth (read with torch.load(weights_only=True))."
            )
        if _lazy_wanted():  # under a keras.distribution: one tensor at a time, when assigned
            from keras_vit.weights import lazy

            return unwrap(lazy.open_safetensors(path))
        return unwrap(read_safetensors(path))  # a .bin holding safetensors is read as such
    if path.endswith(TORCH_SUFFIXES):
        return unwrap(_torch_load(path))
    if path.endswith(".npz"):
        from keras_vit.weights.npz.checkpoints import read_npz

        return unwrap(read_npz(path))
    raise ValueError(
        f"Unknown checkpoint file type {path!r}. Expected a file ending in one of {SUFFIXES}."
    )
