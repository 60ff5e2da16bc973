"""One tensor at a time from the devices to the host (export, `--init` resampling).

A variable sharded by `keras.distribution` is a global `jax.Array`; in one process
`numpy.asarray` gathers it, in several processes each holds only its own shards, and
`jax.experimental.multihost_utils.process_allgather` assembles it in every process. `to_host`
does whichever applies, for one tensor, so an exporter keeps at most one whole tensor on the host.
"""

import keras
import numpy as np


def to_host(value):
    """A NumPy copy of a variable or tensor, gathered from every process's shards if need be."""
    array = getattr(value, "value", value)
    if keras.backend.backend() == "jax":
        import jax

        if isinstance(array, jax.Array) and not array.is_fully_addressable:
            from jax.experimental import multihost_utils

            return np.asarray(multihost_utils.process_allgather(array, tiled=True))
    return keras.ops.convert_to_numpy(array)


def device_copy(value):
    """A copy of a variable's value that stays on its devices with its layout (JAX: no host
    round trip; elsewhere a NumPy copy)."""
    array = getattr(value, "value", value)
    if keras.backend.backend() == "jax":
        import jax.numpy as jnp

        return jnp.array(array, copy=True)
    return keras.ops.convert_to_numpy(array)
