"""The official ViT checkpoints' array names and our Keras variables: `NAME_TABLE` and
`official_variables` (`keras_vit.weights.npz.checkpoints`, which re-exports them, loads and
saves the files).

The table is matched against the *layer names* of the model (never the model's name), so it
serves plain and hybrid models, any size, with or without a head.
"""

import re

import keras

from keras_vit.models.variable_paths import (
    BLOCK_NAME,
    FINAL_NORM,
    HEAD,
    PATCH_ENCODER,
    PRE_LOGITS,
)
from keras_vit.weights.loading import walk_layers

# Official array leaf name -> Keras attribute path, per kind of layer. An entry
# with alternatives ("gamma|scale") takes the first attribute the layer has.
_LAYER_NORM = (("scale", "gamma"), ("bias", "beta"))
_DENSE = (("kernel", "kernel"), ("bias", "bias"))
_CONV = (("kernel", "kernel"),)
_GROUP_NORM = (("scale", "gamma|scale"), ("bias", "beta|bias"))
_PATCH_ENCODER = (
    ("embedding/kernel", "kernel"),
    ("embedding/bias", "bias"),
    ("cls", "class_embedding"),
    ("Transformer/posembed_input/pos_embedding", "position_embeddings"),
)
_MHA = "MultiHeadDotProductAttention_1"
_ENCODER_BLOCK = (
    ("LayerNorm_0/scale", "attention_norm.gamma"),
    ("LayerNorm_0/bias", "attention_norm.beta"),
    (f"{_MHA}/query/kernel", "attention.query_dense.kernel"),
    (f"{_MHA}/query/bias", "attention.query_dense.bias"),
    (f"{_MHA}/key/kernel", "attention.key_dense.kernel"),
    (f"{_MHA}/key/bias", "attention.key_dense.bias"),
    (f"{_MHA}/value/kernel", "attention.value_dense.kernel"),
    (f"{_MHA}/value/bias", "attention.value_dense.bias"),
    (f"{_MHA}/out/kernel", "attention.output_dense.kernel"),
    (f"{_MHA}/out/bias", "attention.output_dense.bias"),
    ("LayerNorm_2/scale", "mlp_norm.gamma"),
    ("LayerNorm_2/bias", "mlp_norm.beta"),
    ("MlpBlock_3/Dense_0/kernel", "mlp_dense_1.kernel"),
    ("MlpBlock_3/Dense_0/bias", "mlp_dense_1.bias"),
    ("MlpBlock_3/Dense_1/kernel", "mlp_dense_2.kernel"),
    ("MlpBlock_3/Dense_1/bias", "mlp_dense_2.bias"),
)

# The name table: Keras layer name (full regex match) -> official scope (formatted
# with the regex groups) and the layer's arrays. Layers that match no row and
# hold no weights (pooling, dropout, max-pool, ...) have nothing to map.
NAME_TABLE = (
    # Keras layer                                  official scope                  arrays
    (re.escape(PATCH_ENCODER),                     "",                             _PATCH_ENCODER),
    (BLOCK_NAME.format(r"(\d+)"),                  "Transformer/encoderblock_{0}/", _ENCODER_BLOCK),
    (re.escape(FINAL_NORM),                        "Transformer/encoder_norm/",    _LAYER_NORM),
    (re.escape(PRE_LOGITS),                        "pre_logits/",                  _DENSE),
    (re.escape(HEAD),                              "head/",                        _DENSE),
    # Hybrid models: the BiT ResNetV2 stem (weight-standardised convs, GroupNorm).
    (r"conv_root",                                 "conv_root/",                   _CONV),
    (r"gn_root",                                   "gn_root/",                     _GROUP_NORM),
    (r"block(\d+)_unit(\d+)_(conv[123]|conv_proj)", "block{0}/unit{1}/{2}/",       _CONV),
    (r"block(\d+)_unit(\d+)_(gn[123]|gn_proj)",    "block{0}/unit{1}/{2}/",        _GROUP_NORM),
)  # fmt: skip

CLASS_TOKEN = "cls"
POSITION_EMBEDDING = "Transformer/posembed_input/pos_embedding"


def _resolve(layer, attribute_path):
    """Follows `"attention.query_dense.kernel"` from `layer`; None where an attribute is absent."""
    *owners, leaf = attribute_path.split(".")
    obj = layer
    for owner in owners:
        obj = getattr(obj, owner, None)
        if obj is None:
            return None
    for name in leaf.split("|"):
        value = getattr(obj, name, None)
        if isinstance(value, keras.Variable):
            return value
    return None


def official_variables(model):
    """Maps every official array name to the model's Keras variable.

    Args:
        model: a built `keras.Model` (plain or hybrid ViT, with or without head).

    Returns:
        A tuple `(table, unmapped)`: `table` is a dict {official name: variable}
        in table order, `unmapped` the model weights with no official name
        (e.g. LayerScale or a mask embedding).

    Raises:
        ValueError: when two variables would get the same official name.
    """
    if not isinstance(model, keras.Model):
        raise ValueError(
            f"model must be a keras.Model (e.g. from keras_vit.ViT). Received: model={model!r}"
        )
    table = {}
    mapped = set()
    for layer in walk_layers(model):
        for pattern, scope, arrays in NAME_TABLE:
            match = re.fullmatch(pattern, layer.name)
            if match is None:
                continue
            prefix = scope.format(*match.groups())
            for leaf, attribute in arrays:
                variable = _resolve(layer, attribute)
                if variable is None:  # e.g. no class token, fixed position embedding
                    continue
                name = prefix + leaf
                if name in table:
                    raise ValueError(
                        f"Two model variables map to the official name {name!r}: "
                        f"{table[name].path!r} and {variable.path!r}. Layer names must be unique."
                    )
                table[name] = variable
                mapped.add(id(variable))
            break
    unmapped = [w for w in model.weights if id(w) not in mapped]
    return table, unmapped
