"""Multi-device set-up: `keras.distribution` on JAX, `tf.distribute` on TensorFlow.

`distribution_scope(mode)` returns a context manager; build, compile and fit the model inside it.

- `"data_parallel"`: `keras.distribution.DataParallel` on JAX; `tf.distribute.MirroredStrategy`
  on TensorFlow (`TPUStrategy` when a TPU is found); PyTorch (one device only): a clear error.
- `"model_parallel"`: `keras.distribution.ModelParallel` + `vit_layout_map` on JAX; not supported
  on TensorFlow (use JAX) or PyTorch: a clear error.

`None`/`"none"` is a no-op on every backend.

On JAX the devices are those of every process once `keras_vit.training.multihost.initialize` has
joined several processes (machines): the same modes then train across all of them.
"""

import contextlib

import keras

MODES = (None, "none", "data_parallel", "model_parallel")


def vit_layout_map(device_mesh, model_axis="model"):
    """A `keras.distribution.LayoutMap` sharding a ViT's attention and MLP kernels.

    Megatron-style: the query/key/value kernels `(D, H, Dh)` are split over heads, the attention
    output kernel `(H, Dh, D)` over its input heads, the first MLP kernel `(D, M)` over its
    outputs and the second `(M, D)` over its inputs, so each block needs one all-reduce after
    attention and one after the MLP. Everything else is replicated.

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


def distribution_scope(mode=None, *, model_parallel_size=None, tpu=None):
    """Returns the context manager that distributes training over the local devices.

    Args:
        mode: None, `"none"`, `"data_parallel"` or `"model_parallel"` (JAX only).
        model_parallel_size: int. Devices per model replica for `"model_parallel"` (the rest
            is data parallel). Defaults to all devices.
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
    if mode not in MODES:
        raise ValueError(f"distribution must be one of {MODES}. Received: distribution={mode!r}")
    if mode in (None, "none"):
        return contextlib.nullcontext()
    backend = keras.backend.backend()
    if backend == "jax":
        return _jax_distribution(mode, model_parallel_size).scope()
    if backend == "tensorflow":
        if mode == "model_parallel":
            raise ValueError(
                "distribution='model_parallel' uses keras.distribution, which Keras implements "
                "for JAX only. Run with KERAS_BACKEND=jax, or use 'data_parallel' on TensorFlow."
            )
        return tensorflow_strategy(tpu).scope()
    raise ValueError(
        f"distribution={mode!r} is not available on the {backend!r} backend: Keras trains on one "
        "PyTorch device. Use KERAS_BACKEND=jax (keras.distribution) or tensorflow "
        "(tf.distribute) for several devices, or drop --distribution."
    )


def batch_shards(mode=None, *, model_parallel_size=None):
    """How many parts Keras splits each global batch into under `mode` (1 off JAX or for None).

    `"data_parallel"`: one per device (of every process); `"model_parallel"`: one per model
    replica (devices / `model_parallel_size`; 1 with the default of all devices).

    Example:

    >>> batch_shards(None)
    1
    """
    if mode in (None, "none") or keras.backend.backend() != "jax":
        return 1
    devices = len(keras.distribution.list_devices())
    if mode == "data_parallel":
        return devices
    return devices // (model_parallel_size or devices)


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


def _jax_distribution(mode, model_parallel_size):
    devices = keras.distribution.list_devices()
    if mode == "data_parallel":
        return keras.distribution.DataParallel(devices=devices)
    size = model_parallel_size or len(devices)
    if len(devices) % size:
        raise ValueError(
            "model_parallel_size must divide the number of devices. "
            f"Received: model_parallel_size={size}, devices={len(devices)}"
        )
    mesh = keras.distribution.DeviceMesh(
        (len(devices) // size, size), ["batch", "model"], devices=devices
    )
    return keras.distribution.ModelParallel(layout_map=vit_layout_map(mesh), batch_dim_name="batch")


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
