"""Sharded training and loading on 8 virtual CPU devices (JAX), in one subprocess.

`XLA_FLAGS=--xla_force_host_platform_device_count=8` must be set before JAX starts, so the
checks run in a child process (Keras' own multi-device test pattern), grouped to compile few
programs: one model (mu/8: width 32, 2 heads, SwiGLU MLP 64, 2 blocks, 16 px) under the three
strategies; the loss and every gradient equal one device's within 1e-5; fit / evaluate /
predict with AdamW, EMA and layer decay, and LoRA, give one device's numbers; a timm
checkpoint in one file, in Hugging Face's parts (index + folder), an official `.npz` and a
`.keras` file load onto the layouts, equal to a plain load, reading each byte once; the errors
(heads the model axis does not divide, a variable nothing shards, a batch the devices do not
divide) are clear and come before any step.
"""

import os
import subprocess
import sys
import textwrap

import keras
import pytest

from tests.helpers import xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = textwrap.dedent(
    """
    import contextlib, json, logging, os, tempfile
    import numpy as np
    import jax
    import keras
    import keras_vit
    from keras_vit import distribution as kd
    from keras_vit.training.distribution import distribution_scope
    from keras_vit.training.layer_decay import with_layer_decay
    from keras_vit.training.optimizers import build_loss, build_optimizer
    from keras_vit.weights.timm.reader import load_timm_weights
    from keras_vit.weights.state_dict import read_safetensors, write_safetensors

    assert len(jax.devices()) == 8
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (16, 16, 16, 3)).astype("float32")
    y = np.eye(4, dtype="float32")[rng.integers(0, 4, 16)]
    OPTIONS = dict(image_size=16, num_classes=4, mlp="swiglu", num_layers=2)
    INIT = [rng.normal(0, 0.2, w.shape).astype("float32")
            for w in keras_vit.ViT("mu/8", **OPTIONS).get_weights()]
    STRATEGIES = (("fsdp", (8, 1)), ("tensor_parallel", (4, 2)), ("fsdp_tp", (4, 2)))

    def build(**extra):
        model = keras_vit.ViT("mu/8", **OPTIONS, **extra)
        model.set_weights(INIT)
        return model

    def sharded(model):
        return [v.path for v in model.weights if any(a is not None for a in v.value.sharding.spec)]

    def spec(variable):
        return tuple(variable.value.sharding.spec) + (None,) * (
            len(variable.shape) - len(variable.value.sharding.spec))

    # 1. The loss and every gradient of one step, each strategy against one device.
    loss_fn = keras.losses.CategoricalCrossentropy(from_logits=True)

    def loss_and_grads(model):
        trainable = [v.value for v in model.trainable_variables]
        frozen = [v.value for v in model.non_trainable_variables]

        def f(trainable, x, y):
            return loss_fn(y, model.stateless_call(trainable, frozen, x, training=False)[0])

        loss, grads = jax.jit(jax.value_and_grad(f))(trainable, x, y)
        return float(loss), [np.asarray(g) for g in grads]

    ref_loss, ref_grads = loss_and_grads(build())
    for strategy, mesh in STRATEGIES:
        with kd.model_parallel(strategy, mesh_shape=mesh, min_shard_bytes=256).scope():
            model = build()
            assert len(sharded(model)) >= 20, (strategy, sharded(model))
            loss, grads = loss_and_grads(model)
        assert abs(loss - ref_loss) <= 1e-5, (strategy, loss, ref_loss)
        worst = max(float(np.abs(a - b).max()) for a, b in zip(grads, ref_grads))
        assert worst <= 1e-5, (strategy, worst)
    print("GRADS OK")

    # 2. fit, evaluate and predict with AdamW, EMA and layer decay; and LoRA.
    def train(distribution, lora=False):
        scope = distribution.scope() if distribution else contextlib.nullcontext()
        with scope:
            model = build()
            if lora:
                keras_vit.enable_lora(model, rank=2, targets=("query", "value"))
                for v in model.trainable_variables:  # A drawn alike (B starts at zero)
                    if v.path.endswith("lora_kernel_a"):
                        v.assign(np.full(v.shape, 0.1, "float32"))
                optimizer = build_optimizer("adamw", 1e-2, weight_decay=0.05)
            else:
                optimizer = build_optimizer("adamw", 1e-2, weight_decay=0.05, ema_momentum=0.5)
                optimizer = with_layer_decay(optimizer, model, 0.8)
            model.compile(optimizer, build_loss())
            history = model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
            loss = predictions = 0.0  # (LoRA: fit alone, fewer programs to compile)
            if not lora:
                loss = model.evaluate(x, y, batch_size=8, verbose=0)
                predictions = model.predict(x, batch_size=8, verbose=0)
            if distribution and not lora:  # the optimizer's moments take their weights' layouts
                moments = [v for v in model.optimizer.variables if "query_kernel_m" in v.path]
                assert moments and spec(moments[0]) == ("batch", "model", None), moments
            weights = [np.asarray(w) for w in model.get_weights()]
        return history.history["loss"], loss, predictions, weights

    for lora in (False, True):
        one = train(None, lora)
        many = train(kd.model_parallel("fsdp_tp", mesh_shape=(4, 2), min_shard_bytes=256), lora)
        np.testing.assert_allclose(many[0], one[0], atol=1e-5, err_msg=f"fit lora={lora}")
        np.testing.assert_allclose(many[1], one[1], atol=1e-5, err_msg=f"evaluate lora={lora}")
        np.testing.assert_allclose(many[2], one[2], atol=1e-5, err_msg=f"predict lora={lora}")
        for a, b in zip(many[3], one[3]):
            np.testing.assert_allclose(a, b, atol=1e-5, err_msg=f"weights lora={lora}")
    print("FIT OK")

    # 3. Loading shard by shard: timm safetensors (one file; an index and its parts; a folder),
    # an official .npz and a .keras file, each equal to a plain load.
    work = tempfile.mkdtemp()
    PLAIN = dict(image_size=16, num_classes=4, num_layers=2, approximate_gelu=False)
    source = keras_vit.ViT("mu/8", **PLAIN)
    for v in source.weights:
        v.assign(rng.normal(0, 0.2, v.shape).astype("float32"))
    timm = keras_vit.export_timm(source, os.path.join(work, "model.safetensors"))
    arrays = read_safetensors(os.path.join(work, "model.safetensors"))
    parts = os.path.join(work, "parts")
    os.makedirs(parts)
    names = sorted(arrays)
    files = {"model-00001-of-00002.safetensors": names[::2],
             "model-00002-of-00002.safetensors": names[1::2]}
    for file, keys in files.items():
        write_safetensors({k: arrays[k] for k in keys}, os.path.join(parts, file))
    with open(os.path.join(parts, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": {k: f for f, ks in files.items() for k in ks}}, f)
    keras_vit.save_npz(source, os.path.join(work, "model.npz"))
    source.save(os.path.join(work, "model.keras"))
    plain = {v.path: np.asarray(v) for v in source.weights}
    # (the position embedding, resampled when its grid differs, is read whole when checked)
    total = sum(a.nbytes for k, a in arrays.items() if k != "pos_embed")
    records = []

    class Records(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logging.getLogger("keras_vit").addHandler(Records())
    logging.getLogger("keras_vit").setLevel(logging.INFO)
    for checkpoint in (os.path.join(work, "model.safetensors"),
                       os.path.join(parts, "model.safetensors.index.json"), parts):
        with kd.model_parallel("fsdp_tp", mesh_shape=(4, 2), min_shard_bytes=256).scope():
            model = keras_vit.ViT("mu/8", **PLAIN)
            load_timm_weights(model, timm.name, checkpoint)
            assert len(sharded(model)) >= 20
            for v in model.weights:
                np.testing.assert_array_equal(np.asarray(v), plain[v.path], err_msg=v.path)
        read = [r for r in records if r.startswith("read ")][-1]
        assert read == f"read {total} bytes of the checkpoint's {total} (this process's " \\
            "shards, one tensor at a time)", (read, total)
    for load in ("npz", "keras"):
        with kd.model_parallel("fsdp", mesh_shape=(8, 1), min_shard_bytes=256).scope():
            if load == "npz":
                model = keras_vit.ViT("mu/8", **PLAIN)
                keras_vit.load_npz(model, os.path.join(work, "model.npz"))
            else:
                model = keras_vit.load_model(os.path.join(work, "model.keras"))
            assert len(sharded(model)) >= 15, load
            for v in model.weights:
                np.testing.assert_array_equal(np.asarray(v), plain[v.path], err_msg=v.path)
    print("LOAD OK")

    # 4. Clear errors at build or before the step.
    def error_of(function):
        try:
            function()
        except ValueError as error:
            return str(error)
        raise AssertionError("no error")

    def build_under(strategy, mesh, **options):
        with kd.model_parallel(strategy, mesh_shape=mesh).scope():  # 1 MiB: FSDP leaves all
            return keras_vit.ViT("mu/8", image_size=16, num_classes=4, **options)

    text = error_of(lambda: build_under("tensor_parallel", (1, 8)))
    assert "attention heads (axis 1: 2)" in text and "mesh_shape=(4, 2)" in text, text
    model = build_under("fsdp_tp", (4, 2), num_key_value_heads=1)  # GQA: kv whole on `model`
    specs = {v.path: spec(v) for v in model.weights}
    assert specs["encoderblock_0/attention/key/kernel"] == (None, None, None)
    assert specs["encoderblock_0/attention/query/kernel"] == (None, "model", None)

    def small_dense():
        inputs = keras.Input((5,))
        return keras.Model(inputs, keras.layers.Dense(3, name="dense")(inputs))

    with kd.model_parallel("fsdp", min_shard_bytes=32).scope():
        text = error_of(small_dense)
    assert "'dense/kernel' of shape (5, 3)" in text and "strategy='fsdp'" in text, text
    with distribution_scope("data_parallel"):
        model = keras_vit.ViT("mu/8", image_size=16, num_classes=4, num_layers=1)
        model.compile("sgd", build_loss())
        text = error_of(lambda: model.fit(x[:6], y[:6], batch_size=6, verbose=0))
    assert "batch of 6 examples does not split over the 8 devices" in text, text
    print("ERRORS OK")
    """
)


@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() != "jax", reason="keras.distribution shards on JAX")
def test_sharded_training_loading_and_errors_on_8_devices():
    """~10 compiles of a tiny model and a few loads in one child process (slow: JAX's start-up
    and XLA compilation for 8 devices dominate)."""
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "jax",
           "XLA_FLAGS": xla_flags(8)}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    for stage in ("GRADS OK", "FIT OK", "LOAD OK", "ERRORS OK"):
        assert stage in proc.stdout, (stage, proc.stdout[-2000:])
