"""Checkpoints read one tensor at a time, straight onto sharded variables (the sharded read path).

Under an active `keras.distribution` (JAX) the loaders read a `.safetensors` file, a
`model.safetensors.index.json` with its parts, or an official `.npz`, lazily
(`read_state_dict` / `read_npz` return `LazyTensor`s: shape and dtype from the file's header,
no data), check everything as before (names, shapes, dtypes from the headers), then fill each
variable with `place`: for every block of the variable that this process's devices hold, the
matching block of the source tensor is read (`safetensors`' `get_slice`; a whole `.npz` member)
and put on its device. Peak host memory is the sharded model plus about one tensor; in a run
of several processes each reads only its own devices' blocks.

`place` is the JAX adapter (`jax.make_array_from_callback` on the variable's own sharding);
its portable equal is `variable.assign(whole array)`, which the tests compare it with.
"""

import sys
import zipfile

import numpy as np

from keras_vit.weights import lazy_slices

# safetensors dtype -> the NumPy dtype a read returns (BF16 / F8 widened to float32).
_DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "float32",
    "F8_E4M3": "float32", "F8_E5M2": "float32", "I64": "int64", "I32": "int32",
    "I16": "int16", "I8": "int8", "U64": "uint64", "U32": "uint32", "U16": "uint16",
    "U8": "uint8", "BOOL": "bool",
}  # fmt: skip
_NARROW = ("bfloat16", "float8_e4m3fn", "float8_e5m2")
# Bytes the lazy tensors of this process have read from files (what `assign` logs).
STATISTICS = {"bytes_read": 0}


def sharded_read_wanted():
    """Whether the loaders read lazily now: JAX with a `keras.distribution` set."""
    if "keras" not in sys.modules:
        return False
    import keras

    # (the distribution first: without one, the backend is never asked)
    if keras.distribution.distribution() is None:
        return False
    return keras.backend.backend() == "jax"


class LazyTensor:
    """One tensor of a checkpoint file, read when asked (`read`, `np.asarray`, slicing).

    Attributes:
        shape: tuple of ints, from the file's header.
        dtype: the NumPy dtype a read returns (bfloat16 / float8 widened to float32).
        lazy: True (what `is_lazy` and the loaders look for).
    """

    lazy = True

    def __init__(self, path, name, shape, dtype, reader):
        self.path = path
        self.name = name
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self._reader = reader  # (index or None) -> np.ndarray

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype="int64"))

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize

    def read(self, index=None):
        """The tensor (or `tensor[index]`, a tuple of slices) as a NumPy array."""
        array = np.asarray(self._reader(index))
        STATISTICS["bytes_read"] += array.nbytes
        return array.astype("float32") if str(array.dtype) in _NARROW else array

    def __array__(self, dtype=None, copy=None):
        array = self.read()
        return array if dtype is None else array.astype(dtype)

    def __len__(self):
        return self.shape[0]

    def __getitem__(self, index):
        try:
            index = lazy_slices.normalize(index, self.shape)
        except (TypeError, ValueError):  # a mask, a list, a step: read whole, then index
            return self.read()[index]
        return self.read(index)

    def __getattr__(self, name):
        # Code that treats the value as an array (`.T`, `.reshape`, ...) reads it whole; any
        # other attribute is missing, as on an array.
        if name.startswith("_") or not hasattr(np.ndarray, name):
            raise AttributeError(name)
        return getattr(self.read(), name)

    def __repr__(self):
        return f"LazyTensor({self.name!r}, shape={self.shape}, dtype={self.dtype}, {self.path!r})"


def is_lazy(value):
    """Whether `value` is read later (a `LazyTensor` or a `Deferred` transform of one)."""
    return getattr(type(value), "lazy", False) is True


def _safetensors_reader(path, name):
    def read(index):
        from safetensors import safe_open

        with safe_open(path, framework="numpy") as f:
            if index is None:
                return f.get_tensor(name)
            return f.get_slice(name)[index]

    return read


def open_safetensors(path):
    """`{name: LazyTensor}` of a `.safetensors` file (its header only is read)."""
    import ml_dtypes  # noqa: F401 (bfloat16 / float8 reads need NumPy to know the types)
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(path, framework="numpy") as f:
            tensors = {}
            for name in f.keys():
                part = f.get_slice(name)
                kind = part.get_dtype()
                if kind not in _DTYPES:
                    raise ValueError(
                        f"{path!r}: tensor {name!r} has dtype {kind}, which this reader does not "
                        f"support. Expected one of {sorted(_DTYPES)}."
                    )
                tensors[name] = LazyTensor(
                    path, name, part.get_shape(), _DTYPES[kind], _safetensors_reader(path, name)
                )
    except SafetensorError as error:
        raise ValueError(
            f"{path!r} is not a valid .safetensors checkpoint ({type(error).__name__}: {error}). "
            "A truncated or corrupt download? Download the file again."
        ) from error
    return tensors


def open_npz(path):
    """`{name: LazyTensor}` of an `.npz` archive (each member's `.npy` header only is read)."""
    tensors = {}
    with zipfile.ZipFile(path) as archive:
        for member in archive.namelist():
            if not member.endswith(".npy"):
                continue
            with archive.open(member) as f:
                version = np.lib.format.read_magic(f)
                read_header = (
                    np.lib.format.read_array_header_1_0
                    if version == (1, 0)
                    else np.lib.format.read_array_header_2_0
                )
                shape, _, dtype = read_header(f)
            name = member[: -len(".npy")]
            tensors[name] = LazyTensor(path, name, shape, dtype, _npz_reader(path, name))
    return tensors


def _npz_reader(path, name):
    def read(index):
        with np.load(path, allow_pickle=False) as data:
            array = data[name]
        return array if index is None else array[index]

    return read


class Deferred:
    """Target `index` of `transform` (None: the identity) applied to a `LazyTensor`, read
    block by block later."""

    lazy = True

    def __init__(self, source, transform, shapes, index):
        self.source = source
        self.transform = transform
        self.shapes = tuple(tuple(s) for s in shapes)
        self.index = index
        self.shape = self.shapes[index]
        self.dtype = source.dtype

    def block(self, target_index, cache):
        """`result[target_index]` (a tuple of slices): a slice of the source where the
        transform allows (`lazy_slices`), else the whole source transformed once (`cache`)."""
        sliced = lazy_slices.source_block(self.transform, target_index, self.shapes, self.index)
        if sliced is not None:
            source_index, finish = sliced
            return finish(self.source.read(source_index))
        key = id(self.source)
        if cache.get("key") != key:
            cache.clear()
            cache["key"] = key
            whole = self.source.read()
            results = (whole,) if self.transform is None else None
            cache["results"] = results or self.transform.apply(whole, self.shapes)
        return np.asarray(cache["results"][self.index])[target_index]


def deferred(source, transform, shapes):
    """The results of `transform` on the lazy `source`, one `Deferred` per target shape."""
    return tuple(Deferred(source, transform, shapes, i) for i in range(len(shapes)))


def _as_deferred(value, shape):
    if isinstance(value, Deferred):
        return value
    return Deferred(value, None, (shape,), 0)  # the identity


def assign(assignments, logger=None):
    """Assigns `[(variable, value)]`; lazy values are read block by block (`place`)."""
    cache = {}
    start = STATISTICS["bytes_read"]
    total = 0
    for variable, value in assignments:
        if is_lazy(value):
            value = _as_deferred(value, tuple(variable.shape))
            total += value.source.nbytes if value.index == 0 else 0
            place(variable, value, cache)
        else:
            variable.assign(value)
    cache.clear()
    if total and logger is not None:
        logger.info(
            "read %d bytes of the checkpoint's %d (this process's shards, one tensor at a time)",
            STATISTICS["bytes_read"] - start,
            total,
        )


def place(variable, value, cache):
    """Fills `variable` from the `Deferred` `value`, each device's block read on its own.

    The JAX adapter of `variable.assign(whole array)`: `jax.make_array_from_callback` asks
    for the blocks this process's devices hold under the variable's sharding; replicated
    blocks are read once.
    """
    import jax
    import jax.numpy as jnp

    dtype = jnp.dtype(variable.dtype)
    shape = tuple(int(d) for d in variable.shape)
    sharding = getattr(variable.value, "sharding", None)
    full = tuple(slice(0, d) for d in shape)
    if sharding is None:
        variable.assign(np.asarray(value.block(full, cache)).astype(dtype))
        return
    blocks = {}

    def callback(index):
        index = lazy_slices.normalize(index, shape)
        key = tuple((s.start, s.stop) for s in index)
        if key not in blocks:
            blocks[key] = np.asarray(value.block(index, cache)).astype(dtype)
        return blocks[key]

    variable.assign(jax.make_array_from_callback(shape, sharding, callback))
