"""Who am I (`process_index`, `process_count`, `is_chief`) and the collectives the other modules
build on (JAX's `multihost_utils`)."""

import json
import sys

import keras
import numpy as np

from keras_vit.training.multihost.cluster import ALL_PROCESSES


def jax_distributed_initialized():
    """Whether this is a JAX run joined by `jax.distributed.initialize`; False off JAX. JAX is
    never imported here, and the backend is asked only once JAX's distributed client is up."""
    jax = sys.modules.get("jax")
    if jax is None or not jax.distributed.is_initialized():
        return False
    return keras.backend.backend() == "jax"


def process_count():
    """Number of processes training together (1 before `initialize`, and off JAX)."""
    if not jax_distributed_initialized():
        return 1
    import jax

    return jax.process_count()


def process_index():
    """This process's index (0 before `initialize`, and off JAX)."""
    if not jax_distributed_initialized():
        return 0
    import jax

    return jax.process_index()


def is_chief():
    """True in process 0, the one that writes files."""
    return process_index() == 0



def allgather(values):
    """`(num_processes, k)` int32 array of every process's `values` (k int32 numbers)."""
    from jax.experimental import multihost_utils

    local = np.asarray(values, dtype=np.int32).reshape(-1)
    return np.asarray(multihost_utils.process_allgather(local)).reshape(process_count(), -1)


def raise_everywhere(error):
    setattr(error, ALL_PROCESSES, True)
    raise error



def broadcast_json(value):
    """Process 0's JSON-able `value`, on every process (the others' `value` is ignored)."""
    from jax.experimental import multihost_utils

    data = json.dumps(value).encode() if is_chief() else b""
    size = int(multihost_utils.broadcast_one_to_all(np.int32(len(data))))
    local = np.frombuffer(data, np.uint8) if is_chief() else np.zeros(size, np.uint8)
    shared = multihost_utils.broadcast_one_to_all(local)
    return json.loads(np.asarray(shared, np.uint8).tobytes().decode())

