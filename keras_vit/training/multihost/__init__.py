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

Modules: `cluster` (what a run asks for), `processes` (who am I, collectives), `join`
(`initialize`), `agreement` (`run_on_chief`, `check_same`), `saving`.
"""

from keras_vit.training.multihost.agreement import check_same, run_on_chief
from keras_vit.training.multihost.cluster import (
    ALL_PROCESSES,
    DEFAULT_TIMEOUT,
    ENV_ADDRESSES,
    ENV_NUM_PROCESSES,
    ENV_PROCESS_ID,
    ClusterSpec,
    asked_by_environment,
    check_backend,
    check_tensorflow_cluster,
    cluster_spec,
    parse_job_addresses,
    tensorflow_workers,
)
from keras_vit.training.multihost.join import initialize
from keras_vit.training.multihost.processes import is_chief, process_count, process_index
from keras_vit.training.multihost.saving import gathered, lost_peers_explained, saving

__all__ = [
    "ALL_PROCESSES",
    "DEFAULT_TIMEOUT",
    "ENV_ADDRESSES",
    "ENV_NUM_PROCESSES",
    "ENV_PROCESS_ID",
    "ClusterSpec",
    "asked_by_environment",
    "check_backend",
    "check_same",
    "check_tensorflow_cluster",
    "cluster_spec",
    "gathered",
    "initialize",
    "is_chief",
    "lost_peers_explained",
    "parse_job_addresses",
    "process_count",
    "process_index",
    "run_on_chief",
    "saving",
    "tensorflow_workers",
]
