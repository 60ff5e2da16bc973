"""transformers' ViT layout (`model_type` `"vit"`): `config.json` -> `keras_vit.ViT` arguments
(`vit_arguments`), the weight names -> our variables (`huggingface_name_table`), and the arrays
left out on purpose. `from_huggingface` (`keras_vit.weights.huggingface.reader`) reads it;
`export_huggingface` writes it; the MAE family's reader reuses its encoder names.
"""

import re

from keras_vit.layers.position_embedding import resample_position_embedding
from keras_vit.models.variable_paths import PATHS, block
from keras_vit.weights import loading as L
from keras_vit.weights.huggingface.common import (
    ACTIVATIONS,
    check_architectures,
    check_hf_config,
    embedding_rows,
    size_arguments,
    vit_attention_rows,
)
from keras_vit.weights.registry import huggingface_types

_norm, _dense = L.torch_norm, L.torch_linear

ARCHITECTURES = ("ViTModel", "ViTForImageClassification", "ViTForMaskedImageModeling")
# transformers >= 5 names its ViT weights like this in memory (`model.state_dict()`); files it
# writes keep the names of transformers 4, which the table below uses.
_RENAMES = (
    (r"^layers\.(\d+)\.attention\.([qkv])_proj\.", None),
    (r"^layers\.(\d+)\.attention\.o_proj\.", r"encoder.layer.\1.attention.output.dense."),
    (r"^layers\.(\d+)\.mlp\.fc1\.", r"encoder.layer.\1.intermediate.dense."),
    (r"^layers\.(\d+)\.mlp\.fc2\.", r"encoder.layer.\1.output.dense."),
    (r"^layers\.(\d+)\.(layernorm_before|layernorm_after)\.", r"encoder.layer.\1.\2."),
)
_QKV = {"q": "query", "k": "key", "v": "value"}


def legacy_vit_name(key):
    """A transformers >= 5 in-memory ViT weight name (`layers.0.attention.q_proj.weight`) as
    transformers 4 and its files name it; any other name unchanged."""
    for pattern, replacement in _RENAMES:
        match = re.match(pattern, key)
        if match is None:
            continue
        if replacement is None:
            layer, which = match.groups()
            return f"encoder.layer.{layer}.attention.attention.{_QKV[which]}." + key[match.end() :]
        return re.sub(pattern, replacement, key)
    return key


def normalize_names(arrays):
    """`vit.` prefixes stripped; transformers 5's in-memory names mapped to the file names.

    Example:

    >>> sorted(normalize_names({"vit.layers.0.attention.q_proj.weight": 1, "classifier.bias": 2}))
    ['classifier.bias', 'encoder.layer.0.attention.attention.query.weight']
    """
    out, source = {}, {}
    for key, value in arrays.items():
        name = legacy_vit_name(key[len("vit.") :] if key.startswith("vit.") else key)
        if name in out:  # e.g. classifier.weight and vit.classifier.weight: which one is meant?
            raise ValueError(
                f"The checkpoint holds {source[name]!r} and {key!r}, two arrays for the one "
                f"weight {name!r} (transformers' names with and without the 'vit.' prefix). "
                "Keep one of them."
            )
        out[name], source[name] = value, key
    return out


def vit_arguments(config, source="config.json"):
    """`keras_vit.ViT` arguments of a transformers `ViTConfig` dict.

    Args:
        config: dict, the contents of `config.json`.
        source: str. Where it comes from, for messages.

    Returns:
        dict of `ViT` arguments (sizes, image size, channels, epsilon, GELU, classes) and
        the private key `_qkv_bias`.

    Raises:
        ValueError: a `model_type`, architecture or activation keras_vit does not read,
            naming the value and the supported ones.

    Example:

    >>> args = vit_arguments({"model_type": "vit", "hidden_size": 32, "num_hidden_layers": 2,
    ...     "num_attention_heads": 2, "intermediate_size": 64, "image_size": 32, "patch_size": 8})
    >>> args["hidden_dim"], args["layer_norm_epsilon"], args["approximate_gelu"]
    (32, 1e-12, False)
    """
    check_hf_config(config, source)  # every field of its type: nothing below coerces
    model_type = config.get("model_type")
    if model_type != "vit":
        raise ValueError(
            f"{source}: model_type {model_type!r} is not a ViT. keras_vit.from_huggingface reads "
            "model_type 'vit' (ViTModel, ViTForImageClassification) and "
            f"{sorted(huggingface_types())}; "
            "for timm models use keras_vit.from_timm."
        )
    check_architectures(config, ARCHITECTURES, source)
    activation = config.get("hidden_act", "gelu")
    arguments = {}
    if activation == "quick_gelu":
        arguments["activation"] = "quick_gelu"
        arguments["approximate_gelu"] = False
    elif activation in ACTIVATIONS:
        arguments["approximate_gelu"] = ACTIVATIONS[activation]
    else:
        raise ValueError(
            f"{source}: hidden_act {activation!r} is not supported. Expected one of "
            f"{sorted([*ACTIVATIONS, 'quick_gelu'])}."
        )
    arguments.update(size_arguments(config, source))
    arguments["_qkv_bias"] = config.get("qkv_bias", True)
    return arguments


def _position_transform(config):
    """HF `position_embeddings` -> ours, resampled as `interpolate_pos_encoding=True` does."""

    def resample(posemb, grid, prefix):
        return resample_position_embedding(
            posemb, grid, prefix, interpolation="bicubic", antialias=False
        )

    return L.position_embedding(config.grid_size, int(config.class_token), resample)


def huggingface_name_table(config, *, qkv_bias=True):
    """The transformers ViT weight names for the model `config` describes.

    Args:
        config: the `keras_vit.models.config.ViTConfig` of the model.
        qkv_bias: bool. Whether the checkpoint has q/k/v biases. Defaults to True.

    Returns:
        dict {name: (variable path, transform)} for `keras_vit.weights.loading`.

    Example:

    >>> from keras_vit.models.config import ViTConfig
    >>> table = huggingface_name_table(ViTConfig.from_variant("mu/8", image_size=32))
    >>> table["encoder.layer.0.attention.attention.query.weight"][0]
    'encoderblock_0/attention/query/kernel'
    """
    table = embedding_rows(_position_transform(config))
    for i in range(config.num_layers):
        key, path = f"encoder.layer.{i}", block(i)
        table.update(_norm(f"{key}.layernorm_before", f"{path}/attention_norm"))
        table.update(vit_attention_rows(key, path, ("query", "key", "value") if qkv_bias else ()))
        table.update(_norm(f"{key}.layernorm_after", f"{path}/mlp_norm"))
        table.update(_dense(f"{key}.intermediate.dense", f"{path}/mlp_dense_1"))
        table.update(_dense(f"{key}.output.dense", f"{path}/mlp_dense_2"))
    table.update(_norm("layernorm", PATHS["encoder_norm"]))
    if config.include_top:
        if config.representation_size:
            table.update(_dense("pooler.dense", PATHS["pre_logits"]))
        table.update(_dense("classifier", PATHS["head"]))
    return table


def _skips(arrays, config):
    """Checkpoint arrays left out on purpose, each with its log line."""
    skip = {}
    classifier = arrays.get("classifier.weight")
    for key, value in arrays.items():
        shape = L.shape_of(value)
        if key.startswith("pooler.") and not (config.include_top and config.representation_size):
            skip[key] = (
                f"dropped {key} {shape}: the pooler is our pre_logits, kept with num_classes "
                "and representation_size"
            )
        elif key.startswith("classifier.") and (
            not config.include_top or int(classifier.shape[0]) != config.num_classes
        ):
            why = "no head" if not config.include_top else f"a new {config.num_classes}-way head"
            skip[key] = f"dropped {key} {shape}: the model has {why}"
        elif key == "embeddings.mask_token" or key.startswith("decoder."):
            skip[key] = f"dropped {key} {shape} (masked image modeling only)"
    return skip
