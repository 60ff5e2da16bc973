"""Multi-device training gives the same loss as one device (subprocesses with 2 virtual CPUs)."""

import os
import subprocess
import sys
import textwrap

import keras
import pytest

from keras_vit.training.distribution import (
    batch_shards,
    distribution_scope,
    num_devices,
    without_distribution,
)
from tests.helpers import xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TRAIN = textwrap.dedent(
    """
    import os
    if os.environ["KERAS_BACKEND"] == "tensorflow":
        import tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2
        )
    import numpy as np
    import keras
    from keras_vit.models.vit import ViT
    from keras_vit.training.distribution import distribution_scope
    from keras_vit.training.optimizers import build_loss, build_optimizer

    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (32, 16, 16, 3)).astype("float32")
    y = np.eye(3, dtype="float32")[rng.integers(0, 3, 32)]

    keras.utils.set_random_seed(0)
    init = ViT("mu/8", image_size=16, num_classes=3)
    init_weights = [np.asarray(w) for w in init.get_weights()]
    init_weights[-2] = rng.normal(0, 0.1, init_weights[-2].shape).astype("float32")  # head

    def losses(mode):
        # Same initial weights everywhere (initialisers may draw differently under a strategy).
        with distribution_scope(mode):
            model = ViT("mu/8", image_size=16, num_classes=3)
            model.set_weights(init_weights)
            # No global_clipnorm here: under tf.distribute, Keras 3.15 clips each replica's
            # gradient before the all-reduce (see the report), which changes the update.
            model.compile(build_optimizer("sgd", 0.1, global_clipnorm=None), build_loss())
            model.fit(x, y, batch_size=16, epochs=3, shuffle=False, verbose=0)
            trained = [np.asarray(w) for w in model.get_weights()]
        # The loss of the trained weights, measured the same way (one device) for every mode:
        # Keras' per-epoch loss under MirroredStrategy is a per-replica mean, not comparable.
        init.set_weights(trained)
        init.compile(loss=build_loss())
        return [init.evaluate(x, y, batch_size=32, verbose=0)]
    """
)


def run_script(body, env):
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3", **env}
    proc = subprocess.run(
        [sys.executable, "-c", TRAIN + textwrap.dedent(body)],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() != "jax", reason="keras.distribution is JAX-only")
def test_jax_data_and_model_parallel_match_one_device():
    out = run_script(
        """
        assert len(keras.distribution.list_devices()) == 2
        single = losses(None)
        data = losses("data_parallel")
        model = losses("model_parallel")
        np.testing.assert_allclose(data, single, rtol=1e-4)
        np.testing.assert_allclose(model, single, rtol=1e-4)
        print("OK", single, data, model)
        """,
        {"KERAS_BACKEND": "jax", "XLA_FLAGS": xla_flags(2)},
    )
    assert "OK" in out


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="tf.distribute test")
def test_tf_mirrored_strategy_matches_one_device():
    out = run_script(
        """
        from keras_vit.training.distribution import tensorflow_strategy
        assert tensorflow_strategy().num_replicas_in_sync == 2
        single = losses(None)
        mirrored = losses("data_parallel")
        np.testing.assert_allclose(mirrored, single, rtol=1e-4)
        print("OK", single, mirrored)
        """,
        {"KERAS_BACKEND": "tensorflow"},
    ).strip()
    assert "OK" in out


def test_errors_and_no_op():
    with distribution_scope(None):
        pass
    with pytest.raises(ValueError, match="distribution must be one of"):
        distribution_scope("pipeline")
    if keras.backend.backend() == "torch":
        with pytest.raises(ValueError, match="one PyTorch device"):
            distribution_scope("data_parallel")
    if keras.backend.backend() == "tensorflow":
        with pytest.raises(ValueError, match="JAX only"):
            distribution_scope("model_parallel")


def test_batch_shards_devices_and_leaving_the_distribution():
    assert batch_shards(None) == 1 and num_devices(None) == 1
    with without_distribution():  # a no-op without a distribution, on every backend
        pass
    if keras.backend.backend() != "jax":
        return
    devices = len(keras.distribution.list_devices())
    assert batch_shards("data_parallel") == devices
    assert batch_shards("model_parallel") == 1  # one replica over all devices
    with distribution_scope("data_parallel"):
        assert num_devices("data_parallel") == devices
        with without_distribution():
            assert keras.distribution.distribution() is None
        assert keras.distribution.distribution() is not None
    assert keras.distribution.distribution() is None


MAE = textwrap.dedent(
    """
    import numpy as np
    import keras
    from keras_vit.models.mae import build_mae_model
    from keras_vit.training.distribution import distribution_scope

    x = np.random.default_rng(0).uniform(-1, 1, (16, 16, 16, 3)).astype("float32")
    options = dict(image_size=16, mask_ratio=0.75, decoder_hidden_dim=16, decoder_num_layers=1,
                   decoder_num_heads=2, decoder_mlp_dim=32, num_layers=2, seed=3)
    keras.utils.set_random_seed(0)
    init = [np.asarray(w) for w in build_mae_model("mu/4", **options).get_weights()]

    def train(mode):
        # Same initial weights (and masking seed state) everywhere; the masks are drawn per
        # step from the model's seed generator over the global batch. "fsdp": every variable
        # sharded over the two devices (keras_vit.distribution, issue 54).
        scope = distribution_scope(mode)
        if mode == "fsdp":
            from keras_vit.distribution import model_parallel

            scope = model_parallel("fsdp", min_shard_bytes=0).scope()
        with scope:
            model = build_mae_model("mu/4", **options)
            model.set_weights(init)
            model.compile(keras.optimizers.SGD(0.5))
            history = model.fit(x, batch_size=8, epochs=3, shuffle=False, verbose=0)
            return history.history["loss"], [np.asarray(w) for w in model.get_weights()]

    single_loss, single_weights = train(None)
    assert single_loss[-1] < single_loss[0], single_loss  # it trained
    for mode in ("data_parallel", "model_parallel", "fsdp"):
        loss, weights = train(mode)
        np.testing.assert_allclose(loss, single_loss, rtol=1e-4, err_msg=mode)
        for a, b in zip(weights, single_weights, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=mode)
    print("OK", single_loss)
    """
)


@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() != "jax", reason="keras.distribution is JAX-only")
def test_jax_masked_autoencoder_over_two_devices_matches_one_device():
    """MAE pre-training (issue 44) over keras.distribution: the random masks, the loss per
    epoch and the trained weights of data-parallel, model-parallel and FSDP runs equal one
    device's."""
    env = {"PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "jax",
           "XLA_FLAGS": xla_flags(2)}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-c", MAE], env={**os.environ, **env}, capture_output=True, text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "OK" in proc.stdout
