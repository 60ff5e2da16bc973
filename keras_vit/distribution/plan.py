"""`memory_plan`: the bytes per device of training a model under a strategy, without building it.

- parameters, gradients and optimizer state: every variable's bytes divided by the devices its
  layout splits it over (`variable_layouts` of an `abstract_model`, which takes no memory);
- activations: XLA's compiled memory analysis (`jax.jit(...).lower(...).compile()
  .memory_analysis()`) of the training step (forward, backward, gradients on their layouts)
  of the same model with one block and with two, on the same mesh: the one-block program's
  temporaries plus, per further block, what a second block adds (its saved activations).
  Nothing is allocated: the programs are lowered from shapes.

The compiled programs are XLA's for this host's devices (CPU: `XLA_FLAGS=
--xla_force_host_platform_device_count=N` gives N of them); an accelerator's compiler fuses
differently, so read the activations as an estimate of the same order. `format_plan` prints a
table (`keras-vit plan`).
"""

import contextlib
import math

import keras
import numpy as np

from keras_vit.distribution.abstract import abstract_model, forget, model_config
from keras_vit.distribution.mesh import check_jax, check_mesh_shape, check_strategy
from keras_vit.distribution.parallel import variable_layouts
from keras_vit.distribution.rules import MIN_SHARD_BYTES, itemsize

# Optimizer slots per trainable variable (each of the variable's shape and dtype).
OPTIMIZER_SLOTS = {"adamw": 2, "adam": 2, "lion": 1, "momentum": 1, "sgd": 0}
DTYPES = ("float32", "bfloat16", "mixed_bfloat16", "float16", "mixed_float16")
KEYS = ("params", "gradients", "optimizer", "activations", "total")


def _check_arguments(mesh_shape, strategy, optimizer, batch_size, dtype):
    check_strategy(strategy)
    mesh_shape = check_mesh_shape(mesh_shape)
    if optimizer not in OPTIMIZER_SLOTS:
        raise ValueError(
            f"optimizer must be one of {tuple(OPTIMIZER_SLOTS)}. Received: optimizer={optimizer!r}"
        )
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer. Received: {batch_size!r}")
    if batch_size % mesh_shape[0]:
        raise ValueError(
            f"batch_size {batch_size} does not split over the data axis of mesh_shape "
            f"{mesh_shape} ({mesh_shape[0]} devices): use a multiple of {mesh_shape[0]}."
        )
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}. Received: dtype={dtype!r}")
    return mesh_shape


@contextlib.contextmanager
def _dtype_policy(dtype):
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(dtype)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def _per_device(shape, dtype, axes, mesh_shape):
    sizes = dict(zip(("batch", "model"), mesh_shape, strict=True))
    split = math.prod(sizes[a] for a in axes if a is not None)
    return math.prod(shape) * itemsize(dtype) // split


def memory_plan(
    name_or_config,
    mesh_shape,
    *,
    strategy,
    optimizer="adamw",
    batch_size,
    image_size=None,
    dtype="float32",
    remat=False,
    min_shard_bytes=MIN_SHARD_BYTES,
):
    """Bytes per device of training a model under `strategy` on `mesh_shape` (JAX).

    Args:
        name_or_config: a `ViTConfig`, a variant (`"g/14"`) or a timm model name
            (`"vit_7b_patch16_dinov3"`); never built (`abstract_model`).
        mesh_shape: `(batch, model)` sizes (or `"8x1"`); this host needs that many devices
            for the compiled analysis.
        strategy: `"fsdp"`, `"tensor_parallel"` or `"fsdp_tp"`.
        optimizer: `"adamw"`, `"adam"`, `"lion"`, `"momentum"` or `"sgd"`: its slots per
            weight. Defaults to `"adamw"`.
        batch_size: int. The global batch (a multiple of the data axis).
        image_size: optional int or pair. Defaults to the model's.
        dtype: the Keras dtype policy (`"float32"`, `"bfloat16"`, `"mixed_bfloat16"`, ...).
            Defaults to `"float32"`.
        remat: bool. Rematerialise each block in the backward pass. Defaults to False.
        min_shard_bytes: int. See `keras_vit.distribution.model_parallel`. Defaults to 1 MiB.

    Returns:
        dict of bytes per device: `"params"`, `"gradients"`, `"optimizer"`, `"activations"`
        and their `"total"`.

    Raises:
        ValueError: off JAX; a bad argument; a mesh the model does not fit (heads or widths
            the model axis does not divide); fewer devices here than the mesh has.
    """
    check_jax("keras_vit.distribution.memory_plan")
    mesh_shape = _check_arguments(mesh_shape, strategy, optimizer, batch_size, dtype)
    overrides = {"remat": bool(remat)}
    if image_size is not None:
        overrides["image_size"] = image_size
    config = model_config(name_or_config, **overrides)
    if config.naflex:
        raise ValueError("memory_plan plans square-image models; received a NaFlex config.")
    with _dtype_policy(dtype):
        model = abstract_model(config)
    layouts = variable_layouts(model, strategy, mesh_shape, min_shard_bytes=min_shard_bytes)
    params = gradients = 0
    for variable in model.weights:
        axes = layouts[variable.path][0]
        size = _per_device(variable.shape, variable.dtype, axes, mesh_shape)
        params += size
        gradients += size if variable.trainable else 0
    del model
    optimizer_bytes = OPTIMIZER_SLOTS[optimizer] * gradients
    activations = _activations(config, strategy, mesh_shape, batch_size, dtype, min_shard_bytes)
    plan = {
        "params": int(params),
        "gradients": int(gradients),
        "optimizer": int(optimizer_bytes),
        "activations": int(activations),
    }
    plan["total"] = sum(plan.values())
    return plan


def _activations(config, strategy, mesh_shape, batch_size, dtype, min_shard_bytes):
    """The training step's temporaries per device at full depth, from depths 1 and 2."""
    import dataclasses

    one, two = (
        step_temporaries(
            dataclasses.replace(config, num_layers=depth), strategy, mesh_shape, batch_size,
            dtype, min_shard_bytes,
        )
        for depth in (1, 2)
    )
    return one + (config.num_layers - 1) * max(two - one, 0)


def device_mesh_of(mesh_shape):
    """A `jax.sharding.Mesh` `("batch", "model")` of this host's first devices."""
    import jax

    devices = jax.devices()
    size = math.prod(mesh_shape)
    if size > len(devices):
        raise ValueError(
            f"The compiled analysis of mesh_shape {mesh_shape} needs {size} devices; this "
            f"process has {len(devices)}. On CPU set XLA_FLAGS="
            f"--xla_force_host_platform_device_count={size} before JAX starts (keras-vit plan "
            "does)."
        )
    return jax.sharding.Mesh(np.array(devices[:size]).reshape(mesh_shape), ("batch", "model"))


def step_temporaries(config, strategy, mesh_shape, batch_size, dtype, min_shard_bytes):
    """XLA's temporaries per device of one training step of `config` (bytes): the forward
    pass, the backward pass and the gradients on the parameters' layouts, compiled for the
    mesh from shapes alone, plus the per-device images and the step's outputs beyond the
    gradients."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    with _dtype_policy(dtype):
        model = abstract_model(config)
    try:
        layouts = variable_layouts(model, strategy, mesh_shape, min_shard_bytes=min_shard_bytes)
        mesh = device_mesh_of(mesh_shape)

        def sharding(variable):
            return NamedSharding(mesh, P(*layouts[variable.path][0]))

        def abstract(variables):
            return [jax.ShapeDtypeStruct(tuple(v.shape), v.dtype) for v in variables]

        trainable, frozen = model.trainable_variables, model.non_trainable_variables
        images = jax.ShapeDtypeStruct(
            (batch_size, *config.image_size, config.num_channels), "float32"
        )
        image_sharding = NamedSharding(mesh, P("batch", None, None, None))

        def step(trainable_values, frozen_values, x):
            def loss(values):
                out, _ = model.stateless_call(values, frozen_values, x, training=True)
                return keras.ops.mean(keras.ops.square(keras.ops.cast(out, "float32")))

            return jax.value_and_grad(loss)(trainable_values)

        shardings = [sharding(v) for v in trainable]
        compiled = (
            jax.jit(
                step,
                in_shardings=(shardings, [sharding(v) for v in frozen], image_sharding),
                out_shardings=(NamedSharding(mesh, P()), shardings),
            )
            .lower(abstract(trainable), abstract(frozen), images)
            .compile()
        )
        analysis = compiled.memory_analysis()
        per_device_images = images.size * 4 // mesh_shape[0]
        return int(analysis.temp_size_in_bytes) + per_device_images
    finally:
        forget(model)


def format_plan(plan, *, device_bytes=None, title=""):
    """A text table of a plan in GB (10^9 bytes) per device; with `device_bytes`, whether the
    total fits a device of that size.

    Example:

    >>> plan = dict(params=2e9, gradients=2e9, optimizer=4e9, activations=1e9, total=9e9)
    >>> print(format_plan(plan, device_bytes=80e9))
      params          2.00 GB
      gradients       2.00 GB
      optimizer       4.00 GB
      activations     1.00 GB
      total           9.00 GB
      fits in 80 GB per device (11%)
    """
    lines = [title] if title else []
    width = max(len(k) for k in KEYS)
    for key in KEYS:
        lines.append(f"  {key:<{width}} {plan[key] / 1e9:8.2f} GB")
    if device_bytes:
        verdict = "fits" if plan["total"] <= device_bytes else "does not fit"
        lines.append(
            f"  {verdict} in {device_bytes / 1e9:.0f} GB per device "
            f"({100 * plan['total'] / device_bytes:.0f}%)"
        )
    return "\n".join(lines)
