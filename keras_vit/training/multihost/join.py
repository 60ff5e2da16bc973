"""`initialize`: joining the other processes within a bounded time, with a message that says why
a process could not join."""

import contextlib
import os
import socket
import sys
import threading

import keras
import numpy as np

from keras_vit.training.multihost.cluster import DEFAULT_TIMEOUT, ENV_NUM_PROCESSES, check_backend
from keras_vit.training.multihost.processes import (
    allgather,
    jax_distributed_initialized,
    process_count,
    process_index,
    raise_everywhere,
)


def _use_gloo():
    """CPU collectives between processes go through gloo (JAX has none on CPU otherwise)."""
    import jax

    try:
        current = jax.config.jax_cpu_collectives_implementation
    except AttributeError:  # a JAX without the option
        return
    if current in (None, "", "none"):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")


def _reachable(address, seconds=2.0):
    host, _, port = address.split(",")[0].rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=seconds):
            return True
    except OSError:
        return False


def _join_failed(spec, timeout):
    """The message when the processes have not all joined within `timeout` seconds."""
    who = f"Process {spec.process_id} of {spec.num_processes}"
    if spec.job_addresses is None:
        return (
            f"{who} could not join the cluster JAX detected within {timeout} s "
            "(--init-timeout): not every process started, or they disagree on the process count."
        )
    coordinator = spec.job_addresses.split(",")[0]
    if spec.process_id != 0 and not _reachable(coordinator):
        cause = (
            f"nothing answers at the coordinator address {coordinator}: process 0 is not "
            "running there, the address or port is wrong, or a firewall blocks it"
        )
    else:
        cause = (
            f"the coordinator {coordinator} runs, but not all {spec.num_processes} processes "
            "joined: start ids 0 .. N-1 once each, all with the same --num-processes and "
            "--job-addresses"
        )
    return f"{who} could not join the others within {timeout} s (--init-timeout): {cause}."


@contextlib.contextmanager
def _bounded(spec, timeout):
    """`keras.distribution.initialize` that ends within `timeout` seconds, with a clear message.

    Keras calls `jax.distributed.initialize` without timeouts; JAX then waits 300 s and aborts
    the process (SIGABRT, a C++ log) when the coordinator or a process never comes. Here JAX gets
    a slightly longer timeout, and a watchdog thread prints what went wrong and exits the process
    with status 1 at `timeout` (nothing of the run has started yet). The shutdown barrier at
    exit waits `timeout` too.
    """
    import jax

    original = jax.distributed.initialize

    def initialize(*args, **kwargs):
        kwargs.setdefault("initialization_timeout", int(timeout) + 30)
        kwargs.setdefault("shutdown_timeout_seconds", int(timeout))
        return original(*args, **kwargs)

    def give_up():
        print(f"keras-vit: error: {_join_failed(spec, timeout)}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(1)

    watchdog = threading.Timer(timeout, give_up)
    watchdog.daemon = True
    jax.distributed.initialize = initialize
    watchdog.start()
    try:
        yield
    finally:
        watchdog.cancel()
        jax.distributed.initialize = original


def initialize(spec, timeout=DEFAULT_TIMEOUT):
    """Joins the processes of `spec` through `keras.distribution.initialize` (JAX only).

    Call it before any JAX computation, in every process. Sets JAX's CPU collectives to gloo
    (needed between CPU processes), waits at most `timeout` seconds for the coordinator
    (process 0) and all processes to connect, and then checks that every process was started
    with the same number of processes. A process that has not joined after `timeout` seconds
    prints why (nothing at the coordinator's address, or processes missing) and exits with
    status 1 (JAX itself would abort the process later). Does nothing for `spec=None`; a runtime
    that is already initialised (e.g. by `keras.distribution.initialize`) is checked and kept.

    Args:
        spec: a `ClusterSpec` from `cluster_spec`, or None.
        timeout: int. Seconds to wait for the connection. Defaults to 300.

    Returns:
        `(process_index, process_count)`.

    Raises:
        ValueError: not on JAX, a cluster JAX cannot find (`detect`), or processes started with
            different counts (raised in every process).
        ConnectionError: the coordinator could not be reached, or not every process connected,
            within `timeout` seconds.
    """
    if spec is None:
        return process_index(), process_count()
    check_backend(spec)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, np.integer)) or timeout < 1:
        raise ValueError(
            f"init_timeout (--init-timeout) must be a positive number of seconds. "
            f"Received: {timeout!r}"
        )
    if not jax_distributed_initialized():
        _use_gloo()
        where = spec.job_addresses or "(found by JAX in the cluster's environment)"
        try:
            with _bounded(spec, timeout):
                keras.distribution.initialize(
                    job_addresses=spec.job_addresses,
                    num_processes=spec.num_processes,
                    process_id=spec.process_id,
                )
        except ValueError as error:  # JAX found no cluster (detect) or refused the values
            what = (
                "JAX found no cluster to join here (Cloud TPU pod, SLURM, Open MPI, Kubernetes)"
                if spec.detect else "JAX refused the processes' settings"
            )
            raise ValueError(
                f"{what}: {str(error).rstrip('.')}. Give --job-addresses, --num-processes and "
                "--process-id (or Keras' KERAS_DISTRIBUTION_* variables)."
            ) from None
        except Exception as error:  # noqa: BLE001  (jax raises its own runtime error types)
            raise ConnectionError(
                f"Process {spec.process_id} of {spec.num_processes} could not join the "
                f"coordinator {where} within {timeout} s (--init-timeout): process 0 must be "
                "running and reachable at that address from every machine, and every process "
                "must be started with the same --job-addresses and --num-processes (ids 0 .. "
                f"N-1, each once). JAX said: {' '.join(str(error).split())[:400]}"
            ) from None
    _check_process_count(spec)
    return process_index(), process_count()



def _check_process_count(spec):
    requested = -1 if spec.num_processes is None else spec.num_processes
    counts = allgather([requested])[:, 0]
    actual = process_count()
    if any(c not in (-1, actual) for c in counts):
        given = ", ".join(
            f"process {i}: {'detected' if c == -1 else c}" for i, c in enumerate(counts)
        )
        raise_everywhere(
            ValueError(
                f"The processes were started with different numbers of processes ({given}), "
                f"and {actual} joined. Start every process with the same --num-processes "
                f"({ENV_NUM_PROCESSES})."
            )
        )

