"""keras_vit/training/multihost.py in one process: what is asked for, and the clear errors.

Several real processes are started by tests/runner/test_multihost.py (JAX only).
"""

import json

import keras
import pytest

from keras_vit.training import multihost
from keras_vit.training.multihost import ClusterSpec, cluster_spec

ENV = {
    multihost.ENV_ADDRESSES: "10.0.0.1:1234",
    multihost.ENV_NUM_PROCESSES: "4",
    multihost.ENV_PROCESS_ID: "3",
}


def test_nothing_asked_is_one_process():
    assert cluster_spec(environ={}) is None
    assert cluster_spec(num_processes=1, process_id=0, environ={}) is None
    assert cluster_spec(environ={multihost.ENV_NUM_PROCESSES: "1"}) is None


def test_keras_variables_and_arguments():
    assert cluster_spec(environ=ENV) == ClusterSpec("10.0.0.1:1234", 4, 3)
    # Arguments (the command line's flags) win over the variables.
    assert cluster_spec(process_id=0, environ=ENV) == ClusterSpec("10.0.0.1:1234", 4, 0)
    spec = cluster_spec("127.0.0.1:1,127.0.0.1:2", process_id=1, environ={})
    assert spec == ClusterSpec("127.0.0.1:1,127.0.0.1:2", 2, 1)  # the count from the addresses
    # detect=True: JAX finds what is missing (Cloud TPU, SLURM, ...).
    assert cluster_spec(detect=True, environ={}) == ClusterSpec(None, None, None, detect=True)


@pytest.mark.parametrize(
    "kwargs, environ, match",
    [
        (dict(num_processes=2, process_id=2, job_addresses="h:1"), {}, r"\[0, 1\].*process_id=2"),
        (dict(process_id=5), ENV, r"\[0, 3\].*process_id=5, num_processes=4"),
        (dict(num_processes=2, process_id=1), {}, "missing: --job-addresses"),
        (dict(job_addresses="h:1"), {}, "--num-processes .*--process-id"),
        (dict(job_addresses="h:1,h:2,h:3", num_processes=2, process_id=0), {}, "3 processes"),
        (dict(job_addresses="10.0.0.1", num_processes=2, process_id=0), {}, "HOST:PORT"),
        (dict(job_addresses="h:99999", num_processes=2, process_id=0), {}, "HOST:PORT"),
        (dict(num_processes=0, process_id=0, job_addresses="h:1"), {}, "integer >= 1"),
        (dict(), {multihost.ENV_NUM_PROCESSES: "two"}, "KERAS_DISTRIBUTION_NUM_PROCESSES"),
    ],
)
def test_bad_values_are_named(kwargs, environ, match):
    with pytest.raises(ValueError, match=match):
        cluster_spec(**kwargs, environ=environ)


def test_tf_config_with_several_workers_names_jax():
    two = {"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1", "b:1"]}, "task": {}})}
    assert multihost.tensorflow_workers(two) == 2
    assert multihost.tensorflow_workers({}) == 0
    if keras.backend.backend() == "tensorflow":
        with pytest.raises(ValueError, match="MultiWorkerMirroredStrategy.*KERAS_BACKEND=jax"):
            multihost.check_tensorflow_cluster(two)
    else:
        multihost.check_tensorflow_cluster(two)  # TF_CONFIG means nothing to JAX or PyTorch
    one = {"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1"]}, "task": {}})}
    multihost.check_tensorflow_cluster(one)
    with pytest.raises(ValueError, match="JSON object"):
        multihost.tensorflow_workers({"TF_CONFIG": "{not json"})


def test_several_processes_need_jax():
    spec = ClusterSpec("h:1", 2, 0)
    backend = keras.backend.backend()
    if backend == "jax":
        multihost.check_backend(spec)
    else:
        with pytest.raises(ValueError, match="KERAS_BACKEND=jax"):
            multihost.check_backend(spec)
        with pytest.raises(ValueError, match="KERAS_BACKEND=jax"):
            multihost.initialize(spec)
    multihost.check_backend(None)


def test_one_process_helpers_change_nothing():
    assert (multihost.process_index(), multihost.process_count()) == (0, 1)
    assert multihost.is_chief()
    assert multihost.initialize(None) == (0, 1)
    assert multihost.run_on_chief(lambda: {"out": "x"}) == {"out": "x"}
    multihost.check_same("settings", {"a": 1})
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    before = [w.copy() for w in model.get_weights()]
    with multihost.saving(model) as writer:
        assert writer is True
    with multihost.gathered(model):
        pass
    for a, b in zip(before, model.get_weights(), strict=True):
        assert (a == b).all()


def test_lost_peer_errors_pass_through_in_one_process():
    with pytest.raises(ValueError, match="Connection closed by peer"):
        with multihost.lost_peers_explained():
            raise ValueError("Gloo AllGather failed: Connection closed by peer")
