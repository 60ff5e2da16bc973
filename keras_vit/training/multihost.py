"""Training on several processes (machines): JAX's multi-controller runtime through Keras.

Keras trains one model over many machines with `keras.distribution.initialize()` (JAX's
`jax.distributed` runtime) followed by a `DataParallel` or `ModelParallel` distribution over every
process's devices (`keras_vit.training.distribution`). Each process runs the same program; JAX
joins them into one set of devices, and Keras' `distribute_dataset` gives each process its slice
of every global batch. This module holds what the recipes need around that:

- `cluster_spec`: what the command line, a config or Keras' environment variables
  (`KERAS_DISTRIBUTION_JOB_ADDRESSES`, `KERAS_DISTRIBUTION_NUM_PROCESSES`,
  `KERAS_DISTRIBUTION_PROCESS_ID`) ask for, checked before anything connects.
- `initialize`: starts the runtime within a bounded time (CPU collectives through gloo), then checks
  that every process was started with the same process count.
- `process_index`, `process_count`, `is_chief`: who am I (1 process and index 0 before
  `initialize`, and on TensorFlow and PyTorch).
- `run_on_chief`, `check_same`: decisions taken by process 0 (the output folder, the resume
  point) and checks that every process agrees (settings, data, backups); an error reaches every
  process, so none of them is left waiting for the others.
- `saving`: every process enters it to save a model; process 0 writes (sharded variables read as
  their full value, and Keras' saving creates its helper objects outside the distribution).
- `check_tensorflow_cluster`: Keras 3's TensorFlow trainer cannot train under
  `tf.distribute.MultiWorkerMirroredStrategy`; a `TF_CONFIG` with several workers gets an error
  that names JAX as the way to train on several machines.

JAX only (TensorFlow and PyTorch: see `check_backend`). Every function that talks to the other
processes (`initialize`, `run_on_chief`, `check_same`, `gathered`) must be called by all of them in
the same order.
"""

import contextlib
import dataclasses
import hashlib
import json
import os
import socket
import sys
import threading

import keras
import numpy as np

from keras_vit.training.addresses import ENV_ADDRESSES, parse_job_addresses

ENV_NUM_PROCESSES = "KERAS_DISTRIBUTION_NUM_PROCESSES"
ENV_PROCESS_ID = "KERAS_DISTRIBUTION_PROCESS_ID"

# Seconds a process waits for the coordinator and the other processes to connect (and, at the
# end, for all of them to finish): JAX's own default.
DEFAULT_TIMEOUT = 300

# Marks an exception raised identically on every process (see `run_on_chief`, `check_same`).
ALL_PROCESSES = "keras_vit_all_processes"


@dataclasses.dataclass(frozen=True)
class ClusterSpec:
    """The processes to join: what `keras.distribution.initialize` receives.

    Attributes:
        job_addresses: str or None. `"HOST:PORT"` of process 0 (the coordinator), or every
            process's address comma-separated (the first is the coordinator).
        num_processes: int or None. Number of processes.
        process_id: int or None. This process's index in `[0, num_processes)`.
        detect: bool. True when the values left None are for JAX to find in the cluster's
            environment (Cloud TPU, SLURM, Open MPI, Kubernetes).
    """

    job_addresses: str | None
    num_processes: int | None
    process_id: int | None
    detect: bool = False


def _read_env(environ, name):
    value = environ.get(name)
    return None if value is None or not value.strip() else value.strip()


def _env_int(environ, name):
    text = _read_env(environ, name)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name} must be an integer. Received: {name}={text!r}") from None


def asked_by_environment(environ=None):
    """True when one of Keras' `KERAS_DISTRIBUTION_*` variables is set (several processes)."""
    environ = os.environ if environ is None else environ
    return any(
        _read_env(environ, name) for name in (ENV_ADDRESSES, ENV_NUM_PROCESSES, ENV_PROCESS_ID)
    )


def cluster_spec(
    job_addresses=None, num_processes=None, process_id=None, detect=False, environ=None
):
    """The processes this one should join, or None to train in this process alone.

    Arguments win over Keras' environment variables (`KERAS_DISTRIBUTION_JOB_ADDRESSES`,
    `KERAS_DISTRIBUTION_NUM_PROCESSES`, `KERAS_DISTRIBUTION_PROCESS_ID`). Without `detect`, the
    three values are all needed once one of them is given; with `detect=True` the missing ones are
    left for JAX to read from the cluster (Cloud TPU pod, SLURM, Open MPI, Kubernetes).
    `num_processes=1` is one process (None).

    Args:
        job_addresses: str. `"HOST:PORT"` of process 0, or all processes' addresses
            comma-separated. Defaults to `$KERAS_DISTRIBUTION_JOB_ADDRESSES`.
        num_processes: int. Defaults to `$KERAS_DISTRIBUTION_NUM_PROCESSES`, else the number of
            addresses when several are given.
        process_id: int in `[0, num_processes)`. Defaults to `$KERAS_DISTRIBUTION_PROCESS_ID`.
        detect: bool. Join a cluster even when none of the values is given (JAX detects it).
            Defaults to False.
        environ: mapping read instead of `os.environ` (tests).

    Returns:
        A `ClusterSpec`, or None.

    Raises:
        ValueError: a process id out of range, a missing value, an address that is not
            HOST:PORT, or a number of addresses that differs from `num_processes`.

    Example:

    >>> cluster_spec(environ={}) is None           # nothing asked: one process
    True
    >>> cluster_spec("127.0.0.1:1234", 2, 1, environ={}).num_processes
    2
    """
    environ = os.environ if environ is None else environ
    if job_addresses is None:
        job_addresses = _read_env(environ, ENV_ADDRESSES)
    if num_processes is None:
        num_processes = _env_int(environ, ENV_NUM_PROCESSES)
    if process_id is None:
        process_id = _env_int(environ, ENV_PROCESS_ID)
    if not (detect or job_addresses or num_processes is not None or process_id is not None):
        return None
    for name, value, flag, env, low in (
        ("num_processes", num_processes, "--num-processes", ENV_NUM_PROCESSES, 1),
        ("process_id", process_id, "--process-id", ENV_PROCESS_ID, 0),
    ):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low
        ):
            raise ValueError(
                f"{name} ({flag} or {env}) must be an integer >= {low}. "
                f"Received: {name}={value!r}"
            )
    addresses = parse_job_addresses(job_addresses) if job_addresses else []
    if len(addresses) > 1:
        if num_processes is None:
            num_processes = len(addresses)
        elif num_processes != len(addresses):
            raise ValueError(
                f"The job addresses name {len(addresses)} processes but num_processes is "
                f"{num_processes}: give one address per process (process 0's first) or only "
                f"process 0's. Received: job_addresses={job_addresses!r}, "
                f"num_processes={num_processes}"
            )
    if num_processes is not None and process_id is not None and process_id >= num_processes:
        raise ValueError(
            f"process_id must be in [0, num_processes - 1] = [0, {num_processes - 1}] "
            f"(--process-id, {ENV_PROCESS_ID}). Received: process_id={process_id}, "
            f"num_processes={num_processes}"
        )
    if not detect:
        missing = [
            f"{flag} ({env})"
            for flag, env, value in (
                ("--job-addresses", ENV_ADDRESSES, job_addresses),
                ("--num-processes", ENV_NUM_PROCESSES, num_processes),
                ("--process-id", ENV_PROCESS_ID, process_id),
            )
            if value is None
        ]
        if missing and num_processes != 1:
            raise ValueError(
                f"Training on several processes needs the coordinator's address, the number of "
                f"processes and this process's id; missing: {', '.join(missing)}. Give them "
                "(the same address and count to every process, ids 0, 1, ...), or pass "
                "--multi-host (config key multi_host=True) to let JAX read them from a Cloud TPU "
                "pod, SLURM, Open MPI or Kubernetes."
            )
    if num_processes == 1:
        return None
    return ClusterSpec(
        job_addresses=",".join(addresses) or None,
        num_processes=None if num_processes is None else int(num_processes),
        process_id=None if process_id is None else int(process_id),
        detect=bool(detect),
    )


def check_backend(spec):
    """Raises a clear `ValueError` when several processes are asked for on TensorFlow or PyTorch."""
    backend = keras.backend.backend()
    if spec is None or backend == "jax":
        return
    asked = f"num_processes={spec.num_processes}" if spec.num_processes else "multi_host=True"
    if backend == "tensorflow":
        raise ValueError(
            "Training on several processes uses keras.distribution (JAX's multi-process "
            "runtime), which Keras implements for JAX only; TensorFlow's "
            "MultiWorkerMirroredStrategy fails inside Keras 3's model.fit. Run with "
            f"KERAS_BACKEND=jax. Received: KERAS_BACKEND=tensorflow, {asked}"
        )
    raise ValueError(
        f"Training on several processes is not available on the {backend!r} backend: Keras "
        f"trains on one PyTorch device. Run with KERAS_BACKEND=jax. Received: {asked}"
    )


def tensorflow_workers(environ=None):
    """The number of workers (and chief) `TF_CONFIG` describes; 0 without `TF_CONFIG`."""
    environ = os.environ if environ is None else environ
    text = _read_env(environ, "TF_CONFIG")
    if text is None:
        return 0
    try:
        cluster = json.loads(text).get("cluster", {})
        return sum(len(cluster.get(kind, ())) for kind in ("chief", "master", "worker"))
    except (ValueError, AttributeError, TypeError):
        raise ValueError(f"TF_CONFIG must be a JSON object. Received: TF_CONFIG={text!r}") from None


def check_tensorflow_cluster(environ=None):
    """On TensorFlow, a `TF_CONFIG` with several workers raises a `ValueError` that names JAX.

    Keras 3's TensorFlow trainer fails inside `model.fit` under
    `tf.distribute.MultiWorkerMirroredStrategy` (it reduces the first batch with
    `strategy.reduce`, which the strategy's collective ops reject: `ValueError: Attempt to convert
    a value (PerReplica...)`; keras-team/keras#20585), and without that strategy every worker
    would train a model of its own. Several machines train on JAX.
    """
    if keras.backend.backend() != "tensorflow":
        return
    workers = tensorflow_workers(environ)
    if workers > 1:
        raise ValueError(
            f"TF_CONFIG describes {workers} TensorFlow workers, but Keras {keras.__version__}'s "
            "TensorFlow trainer cannot train under tf.distribute.MultiWorkerMirroredStrategy "
            "(model.fit fails with 'Attempt to convert a value (PerReplica...)'). Train on "
            "several machines with KERAS_BACKEND=jax and --job-addresses / --num-processes / "
            "--process-id (README: 'Training on several machines'), or unset TF_CONFIG to "
            "train on this machine's devices (--distribution data_parallel)."
        )


def _jax_distributed_initialized():
    if keras.backend.backend() != "jax":
        return False
    import jax

    return jax.distributed.is_initialized()


def process_count():
    """Number of processes training together (1 before `initialize`, and off JAX)."""
    if not _jax_distributed_initialized():
        return 1
    import jax

    return jax.process_count()


def process_index():
    """This process's index (0 before `initialize`, and off JAX)."""
    if not _jax_distributed_initialized():
        return 0
    import jax

    return jax.process_index()


def is_chief():
    """True in process 0, the one that writes files."""
    return process_index() == 0


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
    if not _jax_distributed_initialized():
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


def _allgather(values):
    """`(num_processes, k)` int32 array of every process's `values` (k int32 numbers)."""
    from jax.experimental import multihost_utils

    local = np.asarray(values, dtype=np.int32).reshape(-1)
    return np.asarray(multihost_utils.process_allgather(local)).reshape(process_count(), -1)


def _raise_everywhere(error):
    setattr(error, ALL_PROCESSES, True)
    raise error


def _check_process_count(spec):
    requested = -1 if spec.num_processes is None else spec.num_processes
    counts = _allgather([requested])[:, 0]
    actual = process_count()
    if any(c not in (-1, actual) for c in counts):
        given = ", ".join(
            f"process {i}: {'detected' if c == -1 else c}" for i, c in enumerate(counts)
        )
        _raise_everywhere(
            ValueError(
                f"The processes were started with different numbers of processes ({given}), "
                f"and {actual} joined. Start every process with the same --num-processes "
                f"({ENV_NUM_PROCESSES})."
            )
        )


def _broadcast_json(value):
    """Process 0's JSON-able `value`, on every process (the others' `value` is ignored)."""
    from jax.experimental import multihost_utils

    data = json.dumps(value).encode() if is_chief() else b""
    size = int(multihost_utils.broadcast_one_to_all(np.int32(len(data))))
    local = np.frombuffer(data, np.uint8) if is_chief() else np.zeros(size, np.uint8)
    shared = multihost_utils.broadcast_one_to_all(local)
    return json.loads(np.asarray(shared, np.uint8).tobytes().decode())


_ERROR_TYPES = {
    cls.__name__: cls
    for cls in (
        ValueError,
        FileExistsError,
        FileNotFoundError,
        PermissionError,
        NotADirectoryError,
        IsADirectoryError,
        ConnectionError,
    )
}


def run_on_chief(fn):
    """Runs `fn()` in process 0 only and returns its (JSON-able) result in every process.

    An exception in process 0 is raised in every process (same type for the usual `OSError` and
    `ValueError` kinds, else `RuntimeError`), so no process waits for one that stopped. With one
    process this is just `fn()`.
    """
    if process_count() == 1:
        return fn()
    outcome, error = None, None
    if is_chief():
        try:
            outcome = {"value": fn()}
        except Exception as caught:  # noqa: BLE001  (reported to every process, then raised)
            error = caught
            outcome = {"error": [type(caught).__name__, str(caught)]}
    outcome = _broadcast_json(outcome)
    if "error" in outcome:
        if error is None:
            kind, message = outcome["error"]
            error = _ERROR_TYPES.get(kind, RuntimeError)(
                message if kind in _ERROR_TYPES else f"{kind} in process 0: {message}"
            )
        _raise_everywhere(error)
    return outcome["value"]


def _digest(value):
    text = json.dumps(value, sort_keys=True, default=repr).encode()
    return np.frombuffer(hashlib.sha256(text).digest()[:16], dtype=np.int32)


def check_same(what, value, hint=""):
    """Checks that every process has the same JSON-able `value`; else raises everywhere.

    The `ValueError` names `what`, the processes that differ from process 0 and, in those
    processes, the keys (for dicts) or the values that differ; `hint` says what to do.
    """
    if process_count() == 1:
        return
    digests = _allgather(_digest(value))
    differ = [i for i in range(len(digests)) if not np.array_equal(digests[i], digests[0])]
    if not differ:
        return
    reference = _broadcast_json(value)
    detail = ""
    if process_index() in differ:
        if isinstance(value, dict) and isinstance(reference, dict):
            keys = sorted(
                k for k in set(value) | set(reference)
                if _digest(value.get(k)).tobytes() != _digest(reference.get(k)).tobytes()
            )
            pairs = ", ".join(f"{k}={value.get(k)!r} (process 0: {reference.get(k)!r})"
                              for k in keys[:6])
            detail = f" This process (process {process_index()}) has {pairs}."
        else:
            detail = (
                f" This process (process {process_index()}) has {value!r}; process 0 has "
                f"{reference!r}."
            )
    _raise_everywhere(
        ValueError(
            f"Every process must have the same {what}, but process(es) "
            f"{', '.join(map(str, differ))} differ from process 0.{detail} {hint}".rstrip()
        )
    )


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
