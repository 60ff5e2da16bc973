"""One call that checks a layer the way every keras_vit layer must behave.

In the style of Keras' `keras.src.testing.TestCase.run_layer_test`: config, serialization,
`.keras` save/load, build-time weights, output shapes, a training step and mixed precision, on
tiny tensors so that a call takes a fraction of a second.
"""

import pathlib
import tempfile
import warnings

import keras
import numpy as np

from tests.helpers import check_config_complete, roundtrip_layer, to_numpy

MIXED_POLICIES = ("mixed_float16", "mixed_bfloat16")


def run_layer_test(
    layer_cls,
    init_kwargs,
    input_shape=None,
    input_data=None,
    call_kwargs=None,
    expected_output_shape=None,
    expected_num_trainable_weights=None,
    expected_num_non_trainable_weights=0,
    expected_num_params=None,
    run_training_check=True,
    run_mixed_precision_check=True,
    mixed_precision_policies=MIXED_POLICIES,
):
    """Checks `layer_cls(**init_kwargs)` on one input and returns the float32 layer.

    Args:
        layer_cls: the layer class.
        init_kwargs: dict of `__init__` arguments.
        input_shape: shape with the batch size, e.g. `(2, 8, 8, 3)`; random float32 data of
            that shape is made. Give either this or `input_data`.
        input_data: a NumPy array to call the layer on.
        call_kwargs: dict of extra call arguments (not `training`).
        expected_output_shape: output shape with the batch size.
        expected_num_trainable_weights: number of trainable weights after `build(shape)`.
        expected_num_non_trainable_weights: same, non-trainable (seed states not counted).
            Defaults to 0.
        expected_num_params: optional total `count_params()`.
        run_training_check: fit one step of a model made of the layer alone.
        run_mixed_precision_check: run the layer under each of `mixed_precision_policies`.
        mixed_precision_policies: Defaults to `("mixed_float16", "mixed_bfloat16")`.

    Checks, in order:
        - `get_config()` holds exactly the `__init__` arguments and `from_config` round-trips;
          the layer is registered under the `keras_vit` package and
          `serialize_keras_object` / `deserialize_keras_object` give back the same config;
        - the weights exist right after `build(shape)`, in the expected numbers;
        - the eager output has the expected shape, which `compute_output_shape` and a
          symbolic call (batch `None`) agree on, and float32 dtype;
        - a one-layer functional model saved as `.keras` loads with identical outputs;
        - `compile` + `fit` of one step gives a finite loss and changes every trainable weight;
        - under each mixed policy: the layer builds, keeps float32 variables, computes and
          returns the compute dtype, and its output is finite. The global policy is restored.
    """
    if (input_shape is None) == (input_data is None):
        raise ValueError("Pass exactly one of input_shape and input_data.")
    if input_data is None:
        input_data = np.random.default_rng(0).normal(size=input_shape).astype("float32")
    input_shape = tuple(input_data.shape)
    call_kwargs = dict(call_kwargs or {})

    layer = layer_cls(**init_kwargs)
    _check_config_and_serialization(layer)

    layer.build(input_shape)
    assert layer.built, f"{layer_cls.__name__}.build() did not mark the layer built"
    if expected_num_trainable_weights is not None:
        assert len(layer.trainable_weights) == expected_num_trainable_weights, (
            f"{layer_cls.__name__}: {len(layer.trainable_weights)} trainable weights after "
            f"build, expected {expected_num_trainable_weights}: "
            f"{[w.path for w in layer.trainable_weights]}"
        )
    assert len(layer.non_trainable_weights) == expected_num_non_trainable_weights, (
        f"{layer_cls.__name__}: non-trainable weights after build: "
        f"{[w.path for w in layer.non_trainable_weights]}, "
        f"expected {expected_num_non_trainable_weights}"
    )
    if expected_num_params is not None:
        assert layer.count_params() == expected_num_params

    output = layer(input_data, **call_kwargs)
    _check_output(layer, output, input_shape, expected_output_shape, "float32")
    symbolic = layer(keras.Input(input_shape[1:], batch_size=None), **call_kwargs)
    assert tuple(symbolic.shape) == (None,) + tuple(output.shape)[1:], (
        f"{layer_cls.__name__}: symbolic output shape {tuple(symbolic.shape)}, "
        f"eager {tuple(output.shape)}"
    )

    with tempfile.TemporaryDirectory() as tmp:
        roundtrip_layer(layer_cls(**init_kwargs), input_data, pathlib.Path(tmp), **call_kwargs)
    if run_training_check:
        _check_training_step(layer_cls(**init_kwargs), input_data, call_kwargs)
    if run_mixed_precision_check:
        for policy in mixed_precision_policies:
            _check_mixed_precision(layer_cls, init_kwargs, input_data, call_kwargs, policy)
    return layer


def _check_config_and_serialization(layer):
    check_config_complete(layer)
    name = type(layer).__name__
    serialized = keras.saving.serialize_keras_object(layer)
    assert serialized["registered_name"] == f"keras_vit>{name}", (
        f"{name} is not registered under the keras_vit package: "
        f"registered_name={serialized['registered_name']!r}"
    )
    clone = keras.saving.deserialize_keras_object(serialized)
    assert type(clone) is type(layer)
    assert clone.get_config() == layer.get_config()


def _check_output(layer, output, input_shape, expected_shape, expected_dtype):
    name = type(layer).__name__
    shape = tuple(output.shape)
    if expected_shape is not None:
        expected_shape = tuple(expected_shape)
        assert shape == expected_shape, f"{name}: output shape {shape}, expected {expected_shape}"
    computed = tuple(layer.compute_output_shape(input_shape))
    assert computed == shape, f"{name}: compute_output_shape gives {computed}, output is {shape}"
    dtype = keras.backend.standardize_dtype(output.dtype)
    assert dtype == expected_dtype, f"{name}: output dtype {dtype}, expected {expected_dtype}"
    values = to_numpy(keras.ops.cast(output, "float32"))
    assert np.isfinite(values).all(), f"{name}: output has non-finite values"


def _check_training_step(layer, input_data, call_kwargs):
    inputs = keras.Input(input_data.shape[1:])
    model = keras.Model(inputs, layer(inputs, **call_kwargs))
    model.compile(optimizer="adam", loss="mse")
    before = [to_numpy(w).copy() for w in model.trainable_weights]
    target = np.ones((len(input_data),) + tuple(model.output.shape[1:]), "float32")
    with warnings.catch_warnings():
        # A layer without weights still trains inside a model (the compiled step traces it).
        warnings.filterwarnings("ignore", "The model does not have any trainable weights")
        history = model.fit(input_data, target, batch_size=len(input_data), epochs=1, verbose=0)
    loss = history.history["loss"][0]
    assert np.isfinite(loss), f"{type(layer).__name__}: training loss {loss}"
    unchanged = [
        w.path
        for w, value in zip(model.trainable_weights, before, strict=True)
        if np.array_equal(to_numpy(w), value)
    ]
    assert not unchanged, f"{type(layer).__name__}: a training step left {unchanged} unchanged"


def _check_mixed_precision(layer_cls, init_kwargs, input_data, call_kwargs, policy):
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        layer = layer_cls(**init_kwargs)
        compute_dtype = keras.DTypePolicy(policy).compute_dtype
        assert layer.compute_dtype == compute_dtype and layer.variable_dtype == "float32"
        output = layer(input_data, **call_kwargs)
        variables = {w.path: w.dtype for w in layer.weights if w.dtype != "float32"}
        assert not variables, f"{layer_cls.__name__} under {policy}: variables {variables}"
        _check_output(layer, output, tuple(input_data.shape), None, compute_dtype)
    finally:
        keras.config.set_dtype_policy(previous)
