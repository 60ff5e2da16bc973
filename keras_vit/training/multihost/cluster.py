"""What a run asks for (`cluster_spec`: flags, config or Keras' `KERAS_DISTRIBUTION_*` variables),
checked before anything connects, and the backends that cannot train on several processes."""

import dataclasses
import json
import os

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
            "--process-id (docs/training.md: 'Training on several machines'), or unset "
            "TF_CONFIG to train on this machine's devices (--distribution data_parallel)."
        )

