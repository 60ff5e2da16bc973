"""Saving a model from several processes (`gathered`, `saving`) and the message when a peer
process stopped (`lost_peers_explained`)."""

import contextlib

from keras_vit.training.multihost.processes import is_chief, process_count, process_index


def _sharded_variables(model):
    """`model`'s (and its optimizer's) variables whose value no single process holds whole."""
    optimizer = getattr(model, "optimizer", None)
    variables = list(model.variables) + list(getattr(optimizer, "variables", None) or [])
    found, seen = [], set()
    for variable in variables:
        if id(variable) in seen:
            continue
        seen.add(id(variable))
        value = variable.value
        if getattr(value, "is_fully_addressable", True) or getattr(
            value, "is_fully_replicated", True
        ):
            continue
        found.append(variable)
    return found


@contextlib.contextmanager
def gathered(model):
    """Inside, variables sharded over several processes hold their full value (for saving).

    With `ModelParallel` over several processes a kernel's shards live in different processes,
    and `model.save` / `save_weights` cannot read it. Every process copies such values to a fully
    replicated layout (one XLA collective) and the variables hold the copies while inside; their
    own values and layouts come back on exit. All processes must enter together. A no-op when
    nothing is sharded across processes (one process, `DataParallel`).
    """
    variables = _sharded_variables(model) if process_count() > 1 else []
    if not variables:
        yield
        return
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    values = [v.value for v in variables]
    full = [NamedSharding(x.sharding.mesh, PartitionSpec()) for x in values]
    copies = jax.jit(lambda xs: xs, out_shardings=full)(values)
    # Keras' JAX variables keep their array in `_value` (what `variable.value` reads); assigning
    # would lay the copy out as the variable's shards again.
    originals = [v._value for v in variables]
    for variable, copy in zip(variables, copies, strict=True):
        variable._value = copy
    try:
        yield
    finally:
        for variable, original in zip(variables, originals, strict=True):
            variable._value = original


@contextlib.contextmanager
def saving(model):
    """Enter in every process to save `model`; yields True in process 0, the one that writes.

    With several processes the variables sharded over processes are gathered (`gathered`), and
    process 0 writes outside the `keras.distribution` scope: Keras' saving creates helper
    variables (a reference optimizer), which under a multi-process distribution would be a
    collective that the other processes never join. With one process: yields True, no change.

    Example:

    >>> import keras
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> with saving(model) as writer:
    ...     writer
    True
    """
    if process_count() == 1:
        yield True
        return
    from keras_vit.training.distribution import without_distribution

    with gathered(model):
        if not is_chief():
            yield False
            return
        with without_distribution():
            yield True


_LOST_PEER = ("connection closed by peer", "connection reset by peer", "gloo", "heartbeat")


@contextlib.contextmanager
def lost_peers_explained():
    """Re-raises a failed collective of a multi-process run as a `RuntimeError` that says why.

    When one process stops (an error, a kill), the others' next collective fails with a JAX
    runtime error such as `Gloo AllGather failed ... Connection closed by peer`; the message then
    says that another process stopped and where to look.
    """
    try:
        yield
    except Exception as error:
        text = str(error)
        if process_count() > 1 and any(phrase in text.lower() for phrase in _LOST_PEER):
            raise RuntimeError(
                f"Process {process_index()} lost contact with another process of this run, "
                "which probably stopped: see that process's output for its error. "
                f"(JAX: {' '.join(text.split())[:300]})"
            ) from error
        raise
