"""From a variable's role (`keras_vit.layers.sharding`) to its layout under a strategy.

`Rules(strategy, mesh_shape).spec(...)` gives the axes of one variable, a tuple of mesh axis
names or None per dimension:

1. tensor parallelism (`"tensor_parallel"`, `"fsdp_tp"`, a model axis above 1) puts the
   `"model"` axis on the dimension the role names (`COLUMN`: the outputs; `ROW`: the inputs;
   ...). A strict role (`COLUMN`, `ROW`, `HEADS`) whose dimension the axis does not divide is a
   `ValueError` naming the dimension (the heads, the MLP width) and a mesh that fits;
2. FSDP (`"fsdp"`, `"fsdp_tp"`, a data axis above 1) puts the `"batch"` axis on the largest
   remaining dimension it divides (big_vision's `fsdp` rule), for a variable of at least
   `min_shard_bytes`;
3. a variable of at least `min_shard_bytes` that neither shards is a `ValueError` naming the
   variable, its shape and the strategy: never a silent replica on every device.
"""

import math

import numpy as np

from keras_vit.layers.sharding import (
    COLUMN,
    HEADS,
    KEY_VALUE,
    PROJECTION,
    REPLICATED,
    ROW,
    WIDTH,
)

MIN_SHARD_BYTES = 1 << 20  # 1 MiB: smaller variables may stay whole; larger ones must shard

# Bytes per element of the dtypes NumPy does not know.
_ITEMSIZES = {"bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1, "int4": 1}


def itemsize(dtype):
    """Bytes per element of a dtype name (`"float32"`, `"bfloat16"`, ...)."""
    name = str(dtype).replace("torch.", "")
    if name in _ITEMSIZES:
        return _ITEMSIZES[name]
    return np.dtype(name).itemsize


def check_min_shard_bytes(value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            f"min_shard_bytes must be an integer >= 0. Received: min_shard_bytes={value!r}"
        )
    return value


def tensor_parallel_axis(role, name, shape):
    """`(axis, what it is, strict)` that tensor parallelism splits, or `(None, "", False)`.

    Example:

    >>> tensor_parallel_axis("column", "kernel", (768, 12, 64))
    (1, 'attention heads', True)
    >>> tensor_parallel_axis("row", "kernel", (3072, 768))
    (0, 'input features', True)
    """
    rank = len(shape)
    nothing = (None, "", False)
    if rank == 0 or role == REPLICATED:
        return nothing
    if role in (HEADS, WIDTH):
        return rank - 1, "attention heads" if role == HEADS else "model width", role == HEADS
    in_role = role in (COLUMN, KEY_VALUE, PROJECTION)
    strict = role in (COLUMN, ROW)
    if name == "kernel":
        heads = (1, "attention heads") if in_role else (0, "attention heads")
        if in_role:
            where = {2: (1, "output features"), 3: heads, 4: (3, "output channels")}
        else:
            where = {2: (0, "input features"), 3: heads, 4: (2, "input channels")}
    elif name == "bias" and in_role:
        where = {1: (0, "output features"), 2: (0, "attention heads")}
    else:  # a row bias (added after the all-reduce), LoRA factors, quantization scales
        return nothing
    if rank not in where:
        return nothing
    axis, what = where[rank]
    return axis, what, strict


class Rules:
    """How `strategy` lays out variables on a `(batch, model)` mesh (see the module docstring).

    Args:
        strategy: `"fsdp"`, `"tensor_parallel"` or `"fsdp_tp"`.
        mesh_shape: `(batch, model)` sizes.
        min_shard_bytes: int. Variables smaller than this may stay whole (FSDP leaves them
            so); at least this large they must shard. Defaults to 1 MiB.
    """

    def __init__(self, strategy, mesh_shape, min_shard_bytes=MIN_SHARD_BYTES):
        self.strategy = strategy
        self.batch, self.model = (int(d) for d in mesh_shape)
        self.min_shard_bytes = check_min_shard_bytes(min_shard_bytes)
        self.tensor_parallel = strategy in ("tensor_parallel", "fsdp_tp") and self.model > 1
        self.fsdp = strategy in ("fsdp", "fsdp_tp") and self.batch > 1

    def spec(self, path, shape, dtype, role, name, source="generic"):
        """The axes of one variable: a tuple of `"batch"`, `"model"` or None per dimension.

        Args:
            path: str. The variable's path (for messages).
            shape: its shape.
            dtype: its dtype name.
            role: its role (`keras_vit.layers.sharding.role_of`).
            name: its own name (`"kernel"`, `"bias"`, ...).
            source: who gave the role (a layer class name or `"generic"`), for messages.
        """
        shape = tuple(int(d) for d in shape)
        axes = [None] * len(shape)
        nbytes = math.prod(shape) * itemsize(dtype)
        if self.tensor_parallel:
            self._tensor_parallel(axes, path, shape, role, name)
        if self.fsdp and nbytes >= self.min_shard_bytes and shape:
            free = [i for i, d in enumerate(shape) if axes[i] is None and d % self.batch == 0]
            if free:
                axes[max(free, key=lambda i: (shape[i], -i))] = "batch"
        sharding = self.tensor_parallel or self.fsdp
        # (a scalar cannot shard, and is never large)
        if sharding and shape and nbytes >= self.min_shard_bytes and all(a is None for a in axes):
            raise ValueError(
                f"strategy={self.strategy!r} on the mesh (batch={self.batch}, "
                f"model={self.model}): no rule shards the variable {path!r} of shape {shape} "
                f"({nbytes} bytes, role {role!r} from {source}), which would be a whole replica "
                f"on every device. No dimension of it is divisible by the data axis "
                f"({self.batch}) or fits its tensor-parallel role. Give it a layout "
                "(layout_map[path] = ...), choose another mesh_shape, or raise min_shard_bytes "
                f"(now {self.min_shard_bytes})."
            )
        return tuple(axes)

    def _tensor_parallel(self, axes, path, shape, role, name):
        axis, what, strict = tensor_parallel_axis(role, name, shape)
        if axis is None:
            return
        if shape[axis] % self.model == 0:
            axes[axis] = "model"
            return
        if role == PROJECTION:  # an unclaimed projection: its inputs, if not its outputs
            other, _, _ = tensor_parallel_axis(ROW, name, shape)
            if other is not None and shape[other] % self.model == 0:
                axes[other] = "model"
            return
        if strict:
            size = shape[axis]
            fits = [m for m in range(self.model, 0, -1) if size % m == 0 and self.model % m == 0]
            devices = self.batch * self.model
            suggestion = f"mesh_shape={(devices // fits[0], fits[0])}"
            if self.strategy == "tensor_parallel":
                suggestion = f"strategy='fsdp_tp', {suggestion}"
            raise ValueError(
                f"strategy={self.strategy!r} splits {path!r} {shape} over its {what} (axis "
                f"{axis}: {size}) on the model axis of {self.model} devices, which does not "
                f"divide {size}. Choose a mesh whose model axis divides {size}, e.g. "
                f"{suggestion}, or strategy='fsdp'."
            )
