"""Several processes (machines) training one model: joining them and checking that they agree."""

import math

from keras_vit.runner.config import jsonable
from keras_vit.training import multihost
from keras_vit.training.distribution import batch_shards

# Config keys that may differ between the processes of one run (the rest must be equal).
PER_PROCESS_KEYS = ("process_id", "job_addresses", "out", "verbose", "init_timeout")


def start_processes(config):
    """Joins the other processes when the config or Keras' variables ask for it; returns the count.

    Reads `job_addresses`, `num_processes`, `process_id`, `multi_host` (and the
    `KERAS_DISTRIBUTION_*` variables for those left None) through `multihost.cluster_spec`, refuses
    several processes off JAX and a multi-worker `TF_CONFIG` on TensorFlow, initialises JAX's
    runtime (bounded by `init_timeout`), and checks that several processes train with a
    distribution and the same settings. With one process nothing happens (returns 1).
    """
    spec = multihost.cluster_spec(
        config.get("job_addresses"),
        config.get("num_processes"),
        config.get("process_id"),
        detect=bool(config.get("multi_host")),
    )
    multihost.check_backend(spec)
    multihost.check_tensorflow_cluster()
    if spec is None and multihost.process_count() == 1:
        return 1
    if config.get("distribution") in (None, "none"):
        raise ValueError(
            "Several processes train one model only with a distribution: pass --distribution "
            "data_parallel (or model_parallel, fsdp, tensor_parallel, fsdp_tp). Received: "
            "distribution=None with "
            f"num_processes={spec.num_processes if spec else multihost.process_count()}"
        )
    multihost.initialize(spec, timeout=config.get("init_timeout") or multihost.DEFAULT_TIMEOUT)
    settings = {k: v for k, v in jsonable(config).items() if k not in PER_PROCESS_KEYS}
    multihost.check_same(
        "settings", settings, "Start every process with the same command (only --process-id "
        "differs)."
    )
    return multihost.process_count()


def check_batch_shards(config, num_processes):
    """The global batch must split evenly over the data-parallel replicas and the processes."""
    replicas = batch_shards(
        config["distribution"],
        model_parallel_size=config.get("model_parallel_size"),
        mesh=config.get("mesh"),
    )
    parts = replicas if replicas < num_processes else math.lcm(replicas, num_processes)
    if config["batch_size"] % parts:
        raise ValueError(
            f"batch_size (--batch-size) is the global batch and must be divisible by {parts}: "
            f"Keras splits it over {replicas} data-parallel replica(s) on {num_processes} "
            f"process(es). Received: batch_size={config['batch_size']}"
        )
    return parts

