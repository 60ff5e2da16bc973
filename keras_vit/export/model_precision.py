"""What a model computes in, and the copies the exporters trace for `precision=`.

- `model_precision(model)`: `(precision, quantization)` of a model as it is: `("float32", None)`,
  `("bfloat16", None)` for a mixed-precision one, `("int8", "keras")` after
  `model.quantize("int8")`, `("float32", "qat_fake_quant")` for a quantization-aware one;
- `check_saved_model(model, precision)`: the refusals of `export_saved_model(precision=...)`
  (run before anything is written, in the caller's process and again in the TensorFlow one);
- `saved_model_copy(model, precision)`: the model the SavedModel traces: the model itself
  (`precision=None`: as it computes), a float32 or bfloat16 copy (every layer's dtype policy
  replaced, the same weights), or a float32 copy quantized by Keras (`keras_vit.quantize(copy,
  "int8")`: int8 kernels, per-token int8 inputs). The caller's model is never changed.
"""

import keras

from keras_vit.export import precision as precisions
from keras_vit.layers.fake_quant import is_quantization_aware


def keras_quantization(model):
    """The sorted `model.quantize` modes of `model`'s layers (empty if none)."""
    return sorted(
        {layer.quantization_mode for layer in model._flatten_layers() if layer.quantization_mode}
    )


def model_precision(model):
    """`(precision, quantization)` of `model` as it computes (see the module docstring)."""
    if is_quantization_aware(model):
        return "float32", "qat_fake_quant"
    modes = keras_quantization(model)
    if modes:
        return "+".join(modes), "keras"
    computes = {layer.compute_dtype for layer in model._flatten_layers()}
    for dtype in ("bfloat16", "float16"):
        if dtype in computes:
            return dtype, None
    return "float32", None


def check_saved_model(model, precision):
    """Raises a ValueError if `model` cannot be exported as a `precision` SavedModel."""
    if precision is None:
        return
    precisions.check_precision(precision, precisions.SAVED_MODEL_PRECISIONS, "export_saved_model")
    if is_quantization_aware(model) and precision != "float32":
        raise ValueError(
            "A quantization-aware model (keras_vit.quantization_aware) exports to a SavedModel "
            "as it computes (float32 with its fake-quant ops: precision=None or 'float32'); "
            "TensorFlow has no integer kernels to run its learned ranges with. Its integer "
            "model is export_onnx(model, path, precision='int8'). Received: a "
            f"quantization-aware model with precision={precision!r}"
        )
    modes = keras_quantization(model)
    if modes:
        twice = " would quantize twice" if precision == "int8" else " cannot be undone"
        raise ValueError(
            f"The model is already quantized ({modes}, model.quantize): precision={precision!r}"
            f"{twice}. Export it as it computes (precision=None), or export the float model. "
            f"Received: a model quantized to {modes} with precision={precision!r}"
        )


def copy_with_policy(model, policy, always=False):
    """A clone of `model` whose layers all have the dtype policy `policy`, with its weights
    (`model` itself when its layers have it already, unless `always`)."""
    if not always and all(layer.dtype_policy.name == policy for layer in model._flatten_layers()):
        return model

    from keras_vit.models.encoder import VisionTransformer

    def with_policy(layer):
        config = layer.get_config()
        if "dtype" in config:
            config["dtype"] = policy
        return layer.__class__.from_config(config)

    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        if isinstance(model, VisionTransformer):  # rebuilt from its config: the same roles
            clone = type(model).from_config({**model.get_config(), "dtype": policy})
        else:
            clone = keras.models.clone_model(model, clone_function=with_policy, recursive=True)
    finally:
        keras.config.set_dtype_policy(previous)
    for variable, value in zip(clone.weights, model.weights, strict=True):
        variable.assign(keras.ops.cast(value, variable.dtype))
    return clone


def saved_model_copy(model, precision):
    """`(model to trace, export record)` for `export_saved_model(precision=precision)`."""
    check_saved_model(model, precision)
    if precision is None:
        own, scheme = model_precision(model)
        return model, precisions.export_info(own, "saved_model", quantization=scheme)
    if precision == "int8":
        from keras_vit.training.quantization import quantize

        copy = copy_with_policy(model, "float32", always=True)  # quantize works in place
        quantize(copy, "int8")
        return copy, precisions.export_info("int8", "saved_model", quantization="keras")
    if precision == "float32" and is_quantization_aware(model):
        return model, precisions.export_info(
            "float32", "saved_model", quantization="qat_fake_quant"
        )
    copy = copy_with_policy(model, precision)
    return copy, precisions.export_info(precision, "saved_model")
