"""Quantized sublayers of keras_vit layers survive `get_config` / `from_config` (`.keras` files).

`model.quantize("int8")` quantizes every `Dense` / `EinsumDense` in place: each gets a quantized
dtype policy (e.g. `int8_from_float32`) and new variables (an int8 `kernel` and a
`kernel_scale`). A layer that creates such sublayers in `build()` (our `TransformerBlock`,
`MultiHeadSelfAttention`, `MAPHead`) would rebuild them from its own float policy on loading,
with a float kernel, and the quantized variables in the file would not fit (Keras 3.15's own
`MultiHeadAttention` fails so: "Layer 'key' expected 2 variables, but received 3 variables").

Keras' mechanism for this is a `keras.dtype_policies.DTypePolicyMap` as the layer's `dtype`:
`get_config` writes the quantized sublayers' policies into it and `build` creates each sublayer
with its own. Our keys are the sublayers' names relative to the layer (`"attention/query"`), not
absolute layer paths, so the file loads whatever the model or layer is called; and the layer
keeps the map's default policy as its own (`split_dtype`), so the map never applies to it.
"""

import keras


def _get(policy):
    return keras.dtype_policies.get(policy)


def _is_map(policy):
    return isinstance(policy, keras.dtype_policies.DTypePolicyMap)


def split_dtype(kwargs):
    """Takes a `DTypePolicyMap` `dtype` out of a layer's `__init__` kwargs.

    Returns a dict `{relative sublayer name: policy}` (empty without a map) and puts the map's
    default policy in `kwargs["dtype"]`, which is the layer's own policy.
    """
    dtype = kwargs.get("dtype")
    if dtype is None:
        return {}
    policy = _get(dtype)
    if not _is_map(policy):
        return {}
    kwargs["dtype"] = policy.default_policy
    return {key: _get(value) for key, value in policy.items()}


def sublayer_dtype(layer, name):
    """The dtype policy sublayer `name` of `layer` is created with.

    The layer's own policy, the quantized policy the layer's config recorded for `name`, or a
    `DTypePolicyMap` of those recorded under `name/` (a sublayer that has quantized sublayers).
    """
    return recorded_dtype(layer.dtype_policy, getattr(layer, "_sublayer_dtypes", None), name)


def recorded_dtype(default, recorded, name):
    """The policy `recorded` (`{relative name: policy}`) gives sublayer `name`, else `default`.

    The recorded policy of `name`, a `DTypePolicyMap` (default `default`) of those recorded
    under `name/`, or `default`.
    """
    recorded = recorded or {}
    if name in recorded:
        return recorded[name]
    prefix = name + "/"
    nested = {
        key[len(prefix) :]: value for key, value in recorded.items() if key.startswith(prefix)
    }
    if nested:
        return keras.dtype_policies.DTypePolicyMap(default, nested)
    return default


def _named_sublayers(layer, prefix=""):
    for sublayer in layer._flatten_layers(include_self=False, recursive=False):
        name = prefix + sublayer.name
        yield name, sublayer
        yield from _named_sublayers(sublayer, name + "/")


def quantized_sublayers(layer):
    """`{relative name: policy}` of the quantized sublayers of `layer` (all depths)."""
    return {
        name: sublayer.dtype_policy
        for name, sublayer in _named_sublayers(layer)
        if sublayer.quantization_mode is not None
    }


def config_dtype(layer):
    """The `dtype` entry of `layer.get_config()`.

    The layer's policy, or, when some of its sublayers are quantized, a `DTypePolicyMap` with
    that policy as default and one entry per quantized sublayer.
    """
    policy = layer.dtype_policy
    if layer.built:
        quantized = quantized_sublayers(layer)
    else:  # created from a config, not built yet: what the config recorded
        quantized = dict(getattr(layer, "_sublayer_dtypes", None) or {})
    if quantized:
        policy = keras.dtype_policies.DTypePolicyMap(policy, quantized)
    return keras.dtype_policies.serialize(policy)


class RecordsQuantizedSublayers(keras.layers.Layer):
    """Base of our layers that create `Dense` / `EinsumDense` sublayers in `build()`.

    Takes a `DTypePolicyMap` `dtype` out of the constructor's arguments (`split_dtype`) and
    writes one back in `get_config` (`config_dtype`), so that a quantized layer saved in a
    `.keras` file rebuilds its sublayers quantized (each asks `sublayer_dtype(self, name)`).
    """

    def __init__(self, **kwargs):
        sublayer_dtypes = split_dtype(kwargs)
        super().__init__(**kwargs)
        self._sublayer_dtypes = sublayer_dtypes

    def get_config(self):
        config = super().get_config()
        config["dtype"] = config_dtype(self)  # with the quantized sublayers' policies
        return config
