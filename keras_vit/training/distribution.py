"""Multi-device set-up: `keras.distribution` on JAX, `tf.distribute` on TensorFlow.

`distribution_scope(mode)` returns a context manager; build, compile and fit the model inside it.

- `"data_parallel"`: `keras.distribution.DataParallel` on JAX; `tf.distribute.MirroredStrategy`
  on TensorFlow (`TPUStrategy` when a TPU is found); PyTorch (one device only): a clear error.
- `"model_parallel"`: tensor parallelism over `model_parallel_size` devices per replica, data
  parallelism over the rest (`keras_vit.distribution.model_parallel("tensor_parallel")`: the
  layouts come from the layers' roles, every block kind and family); JAX only: a clear error on
  TensorFlow or PyTorch.
- `"fsdp"`, `"tensor_parallel"`, `"fsdp_tp"`: `keras_vit.distribution.model_parallel(mode,
  mesh_shape=mesh)` (JAX only).

`None`/`"none"` is a no-op on every backend.

On JAX the devices are those of every process once `keras_vit.training.multihost.initialize` has
joined several processes (machines): the same modes then train across all of them.
"""

import contextlib

import keras

STRATEGIES = ("fsdp", "tensor_parallel", "fsdp_tp")  # keras_vit.distribution's
MODES = (None, "none", "data_parallel", "model_parallel", *STRATEGIES)


def vit_layout_map(device_mesh, model_axis="model"):
    """A `keras.distribution.LayoutMap` sharding a ViT's attention and MLP kernels.

    Megatron-style: the query/key/value kernels `(D, H, Dh)` are split over heads, the attention
    output kernel `(H, Dh, D)` over its input heads, the first MLP kernel `(D, M)` over its
    outputs and the second `(M, D)` over its inputs, so each block needs one all-reduce after
    attention and one after the MLP. Everything else is replicated.

    The regex map of the plain block's layer names, kept for code that composes it: it misses
    SwiGLU, parallel and parallel-scaling blocks (replicated silently, as any `LayoutMap` does a
    path it does not match). `keras_vit.distribution.layout_map` gives every family's layouts
    from the layers' roles; `distribution_scope("model_parallel")` uses those.

    Args:
        device_mesh: `keras.distribution.DeviceMesh` with a `model_axis` axis.
        model_axis: str. Mesh axis that shards the weights. Defaults to `"model"`.
    """
    layout_map = keras.distribution.LayoutMap(device_mesh)
    m = model_axis
    layout_map[r".*attention/(query|key|value)/kernel"] = (None, m, None)
    layout_map[r".*attention/(query|key|value)/bias"] = (m, None)
    layout_map[r".*attention/attention_output/kernel"] = (m, None, None)
    layout_map[r".*mlp_dense_1/kernel"] = (None, m)
    layout_map[r".*mlp_dense_1/bias"] = (m,)
    layout_map[r".*mlp_dense_2/kernel"] = (m, None)
    return layout_map


def distribution_scope(mode=None, *, model_parallel_size=None, mesh=None, tpu=None):
    """Returns the context manager that distributes training over the local devices.

    Args:
        mode: None, `"none"`, `"data_parallel"`, `"model_parallel"`, or one of
            `keras_vit.distribution`'s strategies `"fsdp"`, `"tensor_parallel"`, `"fsdp_tp"`
            (JAX only but for `"data_parallel"`).
        model_parallel_size: int >= 1. Devices per model replica for `"model_parallel"` (the
            rest is data parallel); it must divide the number of devices. Defaults to all
            devices.
        mesh: optional `(batch, model)` mesh (or `"2x4"`) for the strategies. Defaults to
            every device on the strategy's axis.
        tpu: optional TPU address for TensorFlow's `TPUStrategy` (`""` = the local TPU).
            Defaults to None (use a TPU only if `tf.config` lists one).

    Returns:
        A context manager; build, compile and fit inside it.

    Example:

    >>> with distribution_scope(None):  # one device: nothing changes, on every backend
    ...     model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    >>> model.count_params()
    10
    """
    check_mode(mode, model_parallel_size=model_parallel_size, mesh=mesh)
    if mode in (None, "none"):
        return contextlib.nullcontext()
    backend = keras.backend.backend()
    if backend == "jax":
        return _jax_distribution(mode, model_parallel_size, mesh).scope()
    if backend == "tensorflow":
        if mode != "data_parallel":
            raise ValueError(
                f"distribution={mode!r} uses keras.distribution's ModelParallel, which Keras "
                "implements for JAX only. Run with KERAS_BACKEND=jax, or use 'data_parallel' on "
                "TensorFlow."
            )
        return tensorflow_strategy(tpu).scope()
    raise ValueError(
        f"distribution={mode!r} is not available on the {backend!r} backend: Keras trains on one "
        "PyTorch device. Use KERAS_BACKEND=jax (keras.distribution) or tensorflow "
        "(tf.distribute) for several devices, or drop --distribution."
    )


def check_mode(mode, *, model_parallel_size=None, mesh=None):
    """Checks a mode and the arguments that go with it (no devices read); raises ValueError.

    `model_parallel_size` applies to `"model_parallel"` only, and `mesh` to the strategies:
    either given with another mode would be silently ignored, so it is refused.
    """
    if mode not in MODES:
        raise ValueError(f"distribution must be one of {MODES}. Received: distribution={mode!r}")
    if model_parallel_size is not None:
        if mode != "model_parallel":
            raise ValueError(
                "model_parallel_size sets the devices per replica of distribution="
                f"'model_parallel' only. Received: model_parallel_size={model_parallel_size!r} "
                f"with distribution={mode!r}"
            )
        if (
            isinstance(model_parallel_size, bool)
            or not isinstance(model_parallel_size, int)
            or model_parallel_size < 1
        ):
            raise ValueError(
                "model_parallel_size must be an integer >= 1 (devices per model replica; None "
                f"for all of them). Received: model_parallel_size={model_parallel_size!r}"
            )
    if mesh is not None:
        if mode not in STRATEGIES:
            raise ValueError(
                f"mesh (--mesh) sets the (batch, model) mesh of the strategies {STRATEGIES}. "
                f"Received: mesh={mesh!r} with distribution={mode!r}"
            )
        from keras_vit.distribution.mesh import check_mesh_shape

        check_mesh_shape(mesh)


def batch_shards(mode=None, *, model_parallel_size=None, mesh=None):
    """How many parts Keras splits each global batch into under `mode` (1 off JAX or for None).

    `"data_parallel"`: one per device (of every process); `"model_parallel"`: one per model
    replica (devices / `model_parallel_size`; 1 with the default of all devices); the
    strategies: the mesh's data axis. The same checks as `distribution_scope` (a size that does
    not divide the devices is an error, never 0 parts).

    Example:

    >>> batch_shards(None)
    1
    """
    check_mode(mode, model_parallel_size=model_parallel_size, mesh=mesh)
    if mode in (None, "none") or keras.backend.backend() != "jax":
        return 1
    devices = len(keras.distribution.list_devices())
    if mode == "data_parallel":
        return devices
    if mode == "model_parallel":
        return devices // _model_parallel_size(model_parallel_size, devices)
    import jax

    from keras_vit.distribution.mesh import check_mesh_shape, default_mesh_shape

    shape = default_mesh_shape(mode, devices, jax.process_count()) if mesh is None else mesh
    return check_mesh_shape(shape)[0]


def _model_parallel_size(size, devices):
    size = devices if size is None else size
    if devices % size:
        raise ValueError(
            "model_parallel_size must divide the number of devices. "
            f"Received: model_parallel_size={size}, devices={devices}"
        )
    return size


def num_devices(mode=None, *, model_parallel_size=None):
    """Devices a model trains on under `mode`: all of them (of every process) on JAX or with a
    `tf.distribute` strategy, 1 for None.

    Example:

    >>> num_devices(None)
    1
    """
    if mode in (None, "none"):
        return 1
    backend = keras.backend.backend()
    if backend == "jax":
        return len(keras.distribution.list_devices())
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.distribute.get_strategy().num_replicas_in_sync
    return 1


@contextlib.contextmanager
def without_distribution():
    """Inside, new variables are plain local ones (no `keras.distribution` layout, JAX).

    For a model read only to copy its weights (fine-tuning's `--init`): with several processes a
    model built under `ModelParallel` keeps shards in other processes, which cannot be read.

    Example:

    >>> with without_distribution():
    ...     layer = keras.layers.Dense(2)
    """
    if keras.backend.backend() != "jax":
        yield
        return
    current = keras.distribution.distribution()
    keras.distribution.set_distribution(None)
    try:
        yield
    finally:
        keras.distribution.set_distribution(current)


def _jax_distribution(mode, model_parallel_size, mesh):
    from keras_vit.distribution.data import CheckedDataParallel
    from keras_vit.distribution.parallel import model_parallel

    devices = keras.distribution.list_devices()
    if mode == "data_parallel":
        return CheckedDataParallel(devices=devices)
    if mode == "model_parallel":
        size = _model_parallel_size(model_parallel_size, len(devices))
        return model_parallel("tensor_parallel", mesh_shape=(len(devices) // size, size))
    return model_parallel(mode, mesh_shape=mesh)


def tensorflow_strategy(tpu=None):
    """`TPUStrategy` when a TPU is given or present, else `MirroredStrategy` over GPUs or CPUs."""
    import tensorflow as tf

    if tpu is not None or tf.config.list_logical_devices("TPU"):
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or "")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    gpus = tf.config.list_logical_devices("GPU")
    devices = [d.name for d in (gpus or tf.config.list_logical_devices("CPU"))]
    return tf.distribute.MirroredStrategy(devices=devices)
