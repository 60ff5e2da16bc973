"""`FusedAdamW` / `FusedAdam` (what `build_optimizer` returns) against Keras' `AdamW` / `Adam`.

On PyTorch they run keras_vit's fused update (`keras_vit/models/_torch_optimizer.py`); on
JAX and TensorFlow they are Keras' classes unchanged. Either way: the same variables after
several steps within 1e-6 (float32) on every option `build_optimizer` has, and the same
files.
"""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.training.optimizers import FusedAdam, FusedAdamW, build_optimizer
from keras_vit.training.schedules import WarmupDecay
from tests.helpers import to_numpy

# On JAX and TensorFlow the classes run Keras' own code (nothing to compare); the comparisons
# run where the fused path is.
torch_only = pytest.mark.skipif(
    keras.backend.backend() != "torch", reason="the fused update is PyTorch's only"
)

SHAPES = {"kernel": (8, 12), "bias": (12,), "cube": (3, 4, 5), "scale": (1,)}
STEPS = 4


def variables(dtype="float32"):
    rng = np.random.default_rng(1)
    return [
        keras.Variable(rng.normal(size=shape).astype("float32"), dtype=dtype, name=name)
        for name, shape in SHAPES.items()
    ]


def gradients(scale=1.0, dtype="float32"):
    rng = np.random.default_rng(2)
    return [
        [keras.ops.convert_to_tensor((scale * rng.normal(size=s)).astype(dtype)) for s in
         SHAPES.values()]
        for _ in range(STEPS)
    ]


def run(optimizer, grads, dtype="float32", exclude=None):
    weights = variables(dtype)
    if exclude:
        optimizer.exclude_from_weight_decay(var_names=exclude)
    for step in grads:
        optimizer.apply(step, weights)
    return [to_numpy(v).astype("float32") for v in weights + list(optimizer.variables)]


def assert_same(fused, reference, tol=1e-6):
    assert len(fused) == len(reference)
    for a, b in zip(fused, reference, strict=True):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


OPTIONS = {
    "weight decay": dict(learning_rate=1e-2, weight_decay=0.05),
    "schedule and clipping": dict(learning_rate=WarmupDecay(3e-2, 8, 2), weight_decay=0.1,
                                  global_clipnorm=1.0),
    "clipping above the norm": dict(learning_rate=1e-2, weight_decay=0.1, global_clipnorm=1e3),
    "per-tensor clipnorm": dict(learning_rate=1e-2, weight_decay=0.1, clipnorm=0.5),
    "ema": dict(learning_rate=1e-2, weight_decay=0.1, use_ema=True, ema_momentum=0.7,
                ema_overwrite_frequency=3),
    "accumulation": dict(learning_rate=1e-2, weight_decay=0.1, gradient_accumulation_steps=2,
                         global_clipnorm=1.0),
    "amsgrad": dict(learning_rate=1e-2, weight_decay=0.1, amsgrad=True),
    "other betas and epsilon": dict(learning_rate=1e-1, weight_decay=0.0, beta_1=0.5,
                                    beta_2=0.9, epsilon=1e-3),
}


def count_fused_calls(monkeypatch):
    """On PyTorch, counts the fused kernel's calls (the fast path was taken); None elsewhere."""
    if keras.backend.backend() != "torch":
        return None
    import torch

    calls = []
    kernel = torch._fused_adamw_

    def counted(*args, **kwargs):
        calls.append(1)
        return kernel(*args, **kwargs)

    monkeypatch.setattr(torch, "_fused_adamw_", counted)
    return calls


@torch_only
@pytest.mark.parametrize("option", list(OPTIONS))
def test_fused_adamw_equals_keras_adamw(option, monkeypatch):
    kwargs = OPTIONS[option]
    grads = gradients(scale=3.0)
    calls = count_fused_calls(monkeypatch)
    fused = run(FusedAdamW(**kwargs), grads, exclude=["bias"])
    if calls is not None:  # amsgrad takes Keras' update; accumulation updates every 2nd step
        assert len(calls) == {"amsgrad": 0, "accumulation": STEPS // 2}.get(option, STEPS)
    reference = run(keras.optimizers.AdamW(**kwargs), grads, exclude=["bias"])
    assert_same(fused, reference)


@torch_only
def test_fused_adam_equals_keras_adam():
    grads = gradients()
    kwargs = dict(learning_rate=WarmupDecay(1e-2, 8, 1), global_clipnorm=1.0)
    assert_same(run(FusedAdam(**kwargs), grads), run(keras.optimizers.Adam(**kwargs), grads))


@torch_only
def test_non_finite_gradients_give_what_keras_gives():
    grads = gradients()
    grads[1][0] = keras.ops.convert_to_tensor(np.full(SHAPES["kernel"], np.inf, "float32"))
    kwargs = dict(learning_rate=1e-2, weight_decay=0.1, global_clipnorm=1.0)
    fused = run(FusedAdamW(**kwargs), grads)
    reference = run(keras.optimizers.AdamW(**kwargs), grads)
    assert np.isnan(reference[0]).all()  # Keras' global clipping turns inf into NaN everywhere
    for a, b in zip(fused, reference, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, equal_nan=True)


@torch_only
def test_half_precision_variables_take_keras_own_update():
    grads = gradients(dtype="bfloat16")
    kwargs = dict(learning_rate=1e-2, weight_decay=0.1, global_clipnorm=1.0)
    fused = run(FusedAdamW(**kwargs), grads, dtype="bfloat16")
    reference = run(keras.optimizers.AdamW(**kwargs), grads, dtype="bfloat16")
    for a, b in zip(fused, reference, strict=True):
        np.testing.assert_array_equal(a, b)


@torch_only
def test_loss_scaling_equals_keras():
    grads = gradients()
    scaled = [[g * 128.0 for g in step] for step in grads]  # what a scaled loss gives
    kwargs = dict(learning_rate=1e-2, weight_decay=0.1, global_clipnorm=1.0)

    def scaling(inner):
        return keras.optimizers.LossScaleOptimizer(inner, initial_scale=128.0)

    fused = run(scaling(FusedAdamW(**kwargs)), scaled)
    reference = run(scaling(keras.optimizers.AdamW(**kwargs)), scaled)
    assert_same(fused, reference)


def tiny_model():
    keras.utils.set_random_seed(0)
    return keras_vit.ViT("mu/4", image_size=8, num_classes=3, num_layers=1, hidden_dim=16,
                         mlp_dim=16)


@torch_only
@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_training_equals_keras_adamw(policy):
    keras.config.set_dtype_policy(policy)
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (4, 8, 8, 3)).astype("float32")
    y = np.eye(3, dtype="float32")[[0, 1, 2, 0]]
    weights = None
    for optimizer in ("fused", "keras"):
        model = tiny_model()
        kwargs = dict(learning_rate=WarmupDecay(1e-2, 8, 1), weight_decay=0.1,
                      global_clipnorm=1.0)
        cls = FusedAdamW if optimizer == "fused" else keras.optimizers.AdamW
        model.compile(cls(**kwargs), "categorical_crossentropy")
        for _ in range(3):
            model.train_on_batch(x, y)
        current = [to_numpy(v) for v in model.trainable_variables]
        if weights is None:
            weights = current
    assert_same(current, weights)


def test_build_optimizer_returns_the_fused_classes():
    adamw = build_optimizer("adamw", 1e-3, weight_decay=0.05)
    adam = build_optimizer("adam", 1e-3)
    assert type(adamw) is FusedAdamW and isinstance(adamw, keras.optimizers.AdamW)
    assert type(adam) is FusedAdam and isinstance(adam, keras.optimizers.Adam)
    config = adamw.get_config()
    assert keras.optimizers.AdamW.from_config(config).get_config() == config


def test_saves_and_loads_like_keras_adamw(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(4, 5)).astype("float32"), rng.normal(size=(4, 3)).astype("float32")
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3)])
    model.compile(build_optimizer("adamw", WarmupDecay(1e-2, 8, 1), weight_decay=0.1), "mse")
    model.train_on_batch(x, y)
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert type(loaded.optimizer) is FusedAdamW
    saved = [to_numpy(v) for v in model.optimizer.variables]
    assert_same([to_numpy(v) for v in loaded.optimizer.variables], saved, tol=0)
    # The optimizer's variables are Keras AdamW's: one loads the other's store.
    store = {}
    model.optimizer.save_own_variables(store)
    config = model.optimizer.get_config()
    config.update(learning_rate=WarmupDecay(1e-2, 8, 1), name="adamw")
    plain = keras.optimizers.AdamW(**config)
    plain.build(model.trainable_variables)
    plain.load_own_variables(store)
    assert_same([to_numpy(v) for v in plain.variables], saved, tol=0)
    # Both train on the same way from there.
    loaded.train_on_batch(x, y)
    model.train_on_batch(x, y)
    assert_same([to_numpy(v) for v in loaded.trainable_variables],
                [to_numpy(v) for v in model.trainable_variables])


@torch_only
def test_half_precision_moving_average_takes_keras_own_update():
    grads = gradients(dtype="bfloat16")
    kwargs = dict(learning_rate=1e-2, weight_decay=0.1, use_ema=True, ema_momentum=0.7)
    fused = run(FusedAdamW(**kwargs), grads, dtype="bfloat16")
    reference = run(keras.optimizers.AdamW(**kwargs), grads, dtype="bfloat16")
    for a, b in zip(fused, reference, strict=True):
        np.testing.assert_array_equal(a, b)


# `VisionTransformer.compile`: Keras' own AdamW / Adam given the fused update on PyTorch
# (keras_vit/models/fused_optimizer.py), the same object, config and saved form.

COMPILE_OPTIONS = {name: OPTIONS[name] for name in (
    "weight decay", "schedule and clipping", "ema", "accumulation", "amsgrad"
)}


def batches():
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (4, 8, 8, 3)).astype("float32")
    return x, np.eye(3, dtype="float32")[[0, 1, 2, 0]]


def train_compiled(optimizer, steps=4, **compile_kwargs):
    """A tiny ViT compiled with `optimizer`, after `steps` batches: its variables, the model."""
    model = tiny_model()
    model.compile(optimizer, "categorical_crossentropy", **compile_kwargs)
    x, y = batches()
    for _ in range(steps):
        model.train_on_batch(x, y)
    values = [to_numpy(v) for v in model.trainable_variables + model.optimizer.variables]
    return values, model


def has_fused_methods(optimizer):
    return "_parallel_update_step" in vars(optimizer)


@torch_only
def test_keras_adam_and_adamw_share_the_replaced_methods():
    from keras.src.backend.torch.optimizers import torch_adamw

    from keras_vit.models import _torch_optimizer

    for name, method in _torch_optimizer.KERAS_METHODS.items():
        assert getattr(torch_adamw.AdamW, name) is method, name


@torch_only
@pytest.mark.parametrize("option", list(COMPILE_OPTIONS))
def test_compiled_keras_adamw_equals_keras_own_update(option, monkeypatch):
    kwargs = COMPILE_OPTIONS[option]

    def adamw():
        optimizer = keras.optimizers.AdamW(**kwargs)
        optimizer.exclude_from_weight_decay(var_names=["bias", "pos_embedding"])
        return optimizer

    calls = count_fused_calls(monkeypatch)
    optimizer = adamw()
    fused, model = train_compiled(optimizer)
    assert model.optimizer is optimizer and type(optimizer) is type(keras.optimizers.AdamW())
    assert has_fused_methods(optimizer) and int(optimizer.iterations) == {
        "accumulation": 2}.get(option, 4)
    assert len(calls) == {"amsgrad": 0, "accumulation": 2}.get(option, 4)
    reference, model = train_compiled(adamw(), fused_optimizer=False)
    assert not has_fused_methods(model.optimizer) and len(calls) == {
        "amsgrad": 0, "accumulation": 2}.get(option, 4)
    assert_same(fused, reference)


@torch_only
@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_compiled_keras_strings_equal_keras_own_update(name, monkeypatch):
    calls = count_fused_calls(monkeypatch)
    fused, model = train_compiled(name)
    assert has_fused_methods(model.optimizer) and len(calls) == 4
    monkeypatch.setenv("KERAS_VIT_FUSED_OPTIMIZER", "0")  # the process-wide opt-out
    reference, model = train_compiled(name)
    assert not has_fused_methods(model.optimizer) and len(calls) == 4
    assert_same(fused, reference)


@torch_only
def test_compiled_adam_under_loss_scaling_equals_keras():
    def scaled():
        inner = keras.optimizers.Adam(learning_rate=WarmupDecay(1e-2, 8, 1), global_clipnorm=1.0)
        return keras.optimizers.LossScaleOptimizer(inner, initial_scale=128.0)

    optimizer = scaled()
    fused, _ = train_compiled(optimizer, steps=3)
    assert has_fused_methods(optimizer.inner_optimizer)
    reference, _ = train_compiled(scaled(), steps=3, fused_optimizer=False)
    assert_same(fused, reference)


def test_compile_leaves_other_optimizers_and_backends_alone():
    class MyAdamW(keras.optimizers.AdamW):
        pass

    backend_fuses = keras.backend.backend() == "torch"
    for optimizer, fused in [
        (keras.optimizers.AdamW(1e-3), backend_fuses),
        (MyAdamW(1e-3), False),  # a user's subclass keeps its own methods
        (keras.optimizers.SGD(1e-3), False),
        (FusedAdamW(1e-3), False),  # already fused by its class
    ]:
        model = tiny_model()
        model.compile(optimizer, "mse")
        assert model.optimizer is optimizer
        assert has_fused_methods(optimizer) is fused, type(optimizer)
    model.compile(optimizer := keras.optimizers.AdamW(1e-3), "mse")
    model.compile(optimizer, "mse", fused_optimizer=False)  # a recompile takes it off again
    assert not has_fused_methods(optimizer)


def test_compile_refuses_a_bad_fused_optimizer_before_compiling(monkeypatch):
    model = tiny_model()
    with pytest.raises(ValueError, match=r"fused_optimizer must be None, True or False\. "
                                         r"Received: 'yes'"):
        model.compile("adamw", "mse", fused_optimizer="yes")
    monkeypatch.setenv("KERAS_VIT_FUSED_OPTIMIZER", "off")
    with pytest.raises(ValueError, match=r"KERAS_VIT_FUSED_OPTIMIZER='off'"):
        model.compile("adamw", "mse")
    assert not model.compiled


def test_compiled_keras_adamw_saves_and_loads_as_keras_adamw(tmp_path):
    optimizer = keras.optimizers.AdamW(WarmupDecay(1e-2, 8, 1), weight_decay=0.1)
    _, model = train_compiled(optimizer, steps=2)
    plain = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    plain.compile(keras.optimizers.AdamW(WarmupDecay(1e-2, 8, 1), weight_decay=0.1), "mse")
    # The compile config (what the file stores) is plain Keras' one, name aside.
    saved = model.get_compile_config()["optimizer"]
    expected = plain.get_compile_config()["optimizer"]
    expected["config"]["name"] = saved["config"]["name"]
    assert saved == expected
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert type(loaded.optimizer) is type(optimizer)
    assert has_fused_methods(loaded.optimizer) is (keras.backend.backend() == "torch")
    assert_same([to_numpy(v) for v in loaded.optimizer.variables],
                [to_numpy(v) for v in optimizer.variables], tol=0)
    # Keras alone deserializes the optimizer into its own class, without our methods.
    alone = keras.saving.deserialize_keras_object(saved)
    assert type(alone) is type(optimizer) and not has_fused_methods(alone)
    x, y = batches()
    loaded.train_on_batch(x, y)
    model.train_on_batch(x, y)
    assert_same([to_numpy(v) for v in loaded.trainable_variables],
                [to_numpy(v) for v in model.trainable_variables])
