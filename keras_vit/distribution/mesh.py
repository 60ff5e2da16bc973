"""The strategies and their `("batch", "model")` device meshes: names, shapes, checks.

- `"fsdp"`: every device on the data axis (`(n, 1)`); parameters, gradients and optimizer state
  are sharded over it (ZeRO-3) and gathered per layer by XLA.
- `"tensor_parallel"`: every device on the model axis by default (`(1, n)`; Megatron's column /
  row split); on a `(b, m)` mesh the data axis is plain data parallelism (whole replicas of the
  `m`-way split model).
- `"fsdp_tp"`: both. By default the model axis holds one process's devices when there are
  several processes (tensor parallelism inside a host, FSDP across hosts), else the largest
  divisor `m` of `n` with `m * m <= n` (`(4, 2)` on 8 devices).

`parse_mesh("2x4")` reads the command line's `--mesh`.
"""

import keras

STRATEGIES = ("fsdp", "tensor_parallel", "fsdp_tp")
AXES = ("batch", "model")


def check_strategy(strategy):
    """`strategy` if it is one of `STRATEGIES`, else a ValueError naming them."""
    if not isinstance(strategy, str) or strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}. Received: strategy={strategy!r}")
    return strategy


def check_jax(what="keras_vit.distribution"):
    """A ValueError off JAX: Keras shards variables (`ModelParallel`) on JAX only."""
    backend = keras.backend.backend()
    if backend != "jax":
        raise ValueError(
            f"{what} shards variables with keras.distribution.ModelParallel, which Keras "
            f"implements for JAX only. Run with KERAS_BACKEND=jax. Received: backend={backend!r}"
        )


def _positive_int(value, name):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer. Received: {name}={value!r}")
    return value


def parse_mesh(text):
    """`"2x4"` -> `(2, 4)`: the `(batch, model)` mesh of the command line's `--mesh`.

    Example:

    >>> parse_mesh("2x4"), parse_mesh("8")
    ((2, 4), (8, 1))
    """
    if not isinstance(text, str):
        raise ValueError(f"mesh must be a string like '2x4'. Received: {text!r}")
    parts = text.lower().replace("*", "x").split("x")
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        shape = ()
    if len(shape) == 1:
        shape = (shape[0], 1)
    if len(shape) != 2 or min(shape) < 1:
        raise ValueError(
            "mesh must be BATCHxMODEL, two positive integers (the data and model axes), e.g. "
            f"'2x4'. Received: {text!r}"
        )
    return shape


def check_mesh_shape(mesh_shape):
    """`mesh_shape` as a `(batch, model)` pair of positive ints (a `"2x4"` string read)."""
    if isinstance(mesh_shape, str):
        return parse_mesh(mesh_shape)
    if not isinstance(mesh_shape, (tuple, list)) or len(mesh_shape) != 2:
        raise ValueError(
            "mesh_shape must be (batch, model): the sizes of the data and model axes. "
            f"Received: mesh_shape={mesh_shape!r}"
        )
    return tuple(_positive_int(d, "mesh_shape") for d in mesh_shape)


def default_mesh_shape(strategy, num_devices, num_processes=1):
    """The `(batch, model)` mesh a strategy takes all `num_devices` devices in.

    Example:

    >>> [default_mesh_shape(s, 8) for s in STRATEGIES]
    [(8, 1), (1, 8), (4, 2)]
    >>> default_mesh_shape("fsdp_tp", 8, num_processes=2)
    (2, 4)
    """
    check_strategy(strategy)
    if strategy == "fsdp":
        return (num_devices, 1)
    if strategy == "tensor_parallel":
        return (1, num_devices)
    if num_processes > 1 and num_devices % num_processes == 0:
        return (num_processes, num_devices // num_processes)
    divisors = [m for m in range(1, num_devices + 1) if num_devices % m == 0]
    model = max(m for m in divisors if m * m <= num_devices)
    return (num_devices // model, model)


def device_mesh(strategy, mesh_shape=None, devices=None):
    """The `keras.distribution.DeviceMesh` `("batch", "model")` of `strategy`, checked.

    Args:
        strategy: one of `STRATEGIES`.
        mesh_shape: optional `(batch, model)` (or `"2x4"`). Defaults to
            `default_mesh_shape(strategy, len(devices))`.
        devices: optional list of devices (`keras.distribution.list_devices()` names). Defaults
            to every device of every process.

    Raises:
        ValueError: an unknown strategy; a mesh of more (or fewer) devices than given;
            `"fsdp"` on a mesh with a model axis.
    """
    check_strategy(strategy)
    available = keras.distribution.list_devices()
    if devices is None:
        devices = available
    elif not isinstance(devices, (list, tuple)) or not devices:
        raise ValueError(f"devices must be a non-empty list of devices. Received: {devices!r}")
    else:
        devices = list(devices)
        if len(devices) > len(available):
            raise ValueError(
                f"devices names {len(devices)} devices; only {len(available)} exist "
                f"({available[:4]}{' ...' if len(available) > 4 else ''})."
            )
    if mesh_shape is None:
        processes = _process_count()
        mesh_shape = default_mesh_shape(strategy, len(devices), processes)
    mesh_shape = check_mesh_shape(mesh_shape)
    size = mesh_shape[0] * mesh_shape[1]
    if size > len(available):
        raise ValueError(
            f"mesh_shape {mesh_shape} needs {size} devices; only {len(available)} exist."
        )
    if size != len(devices):
        raise ValueError(
            f"mesh_shape {mesh_shape} holds {size} devices, but {len(devices)} are given: pass "
            f"devices=keras.distribution.list_devices()[:{size}] to use fewer, or a mesh of "
            f"{len(devices)}."
        )
    batch, model = mesh_shape
    if strategy == "fsdp" and model > 1:
        raise ValueError(
            f"strategy='fsdp' shards over the data axis only; mesh_shape {mesh_shape} has "
            f"{model} on the model axis. Use strategy='fsdp_tp' for both, or "
            f"mesh_shape=({size}, 1)."
        )
    return keras.distribution.DeviceMesh(mesh_shape, list(AXES), devices=devices)


def _process_count():
    import jax

    return jax.process_count()
