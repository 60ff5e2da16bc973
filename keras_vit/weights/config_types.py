"""Typed reading of the JSON files that come with checkpoints: every field checked, none coerced.

A `config.json` is data from a stranger: `"num_hidden_layers": 2.9` is not 2, `"qkv_bias":
"false"` is not True, `"architectures": "ViTModel"` is not a list of one-letter names and
`"image_mean": "0.5"` is not three numbers. `read_json_object` reads a file (a clear error
naming it when it is not JSON, or not an object); `check_fields` checks each field a reader
reads against its kind, naming the file, the field, the kind and the value. The tables hold
the fields keras_vit reads: transformers' `config.json` (every family's reader, and the nested
`vision_config`), transformers' `preprocessor_config.json`, and timm's Hub `config.json` with
its `pretrained_cfg`.
"""

import json
import math
import os

from keras_vit.layers._checks import is_int, is_number

__all__ = [
    "HF_CONFIG_FIELDS",
    "HF_PROCESSOR_FIELDS",
    "TIMM_CONFIG_FIELDS",
    "TIMM_PRETRAINED_CFG_FIELDS",
    "check_fields",
    "read_json_object",
]


def _int(v):
    return is_int(v)


def _number(v):
    return is_number(v) and math.isfinite(v)


def _bool(v):
    return isinstance(v, bool)


def _str(v):
    return isinstance(v, str)


def _int_or_pair(v):
    return _int(v) or (isinstance(v, list) and len(v) == 2 and all(map(_int, v)))


def _numbers(v):
    return _number(v) or (isinstance(v, list) and len(v) > 0 and all(map(_number, v)))


def _str_list(v):
    return isinstance(v, list) and all(map(_str, v))


def _dict(v):
    return isinstance(v, dict)


def _int_list(v):
    return isinstance(v, list) and all(map(_int, v))


def _size(v):
    return _int(v) or (isinstance(v, dict) and all(map(_int, v.values())))


def _labels(v):
    return (isinstance(v, list) and all(map(_str, v))) or (
        isinstance(v, dict) and all(map(_str, v.values()))
    )


KINDS = {
    "int": (_int, "an integer"),
    "number": (_number, "a finite number"),
    "bool": (_bool, "true or false (a JSON boolean)"),
    "str": (_str, "a string"),
    "int_or_pair": (_int_or_pair, "an integer or a list of two integers"),
    "numbers": (_numbers, "a number or a list of numbers"),
    "str_list": (_str_list, "a list of strings"),
    "dict": (_dict, "an object"),
    "int_list": (_int_list, "a list of integers"),
    "size": (_size, "an integer or an object of integers"),
    "labels": (_labels, "a list of strings or an object of strings"),
}

# transformers' config.json fields that keras_vit's readers read (ViT, DINOv2, DINOv3, BEiT,
# AIMv2, SigLIP 2, ViTMAE).
HF_CONFIG_FIELDS = {
    "model_type": "str",
    "architectures": "str_list",
    "hidden_size": "int",
    "num_hidden_layers": "int",
    "num_attention_heads": "int",
    "intermediate_size": "int",
    "num_channels": "int",
    "patch_size": "int_or_pair",
    "image_size": "int_or_pair",
    "num_patches": "int",
    "layer_norm_eps": "number",
    "rms_norm_eps": "number",
    "hidden_act": "str",
    "qkv_bias": "bool",
    "query_bias": "bool",
    "key_bias": "bool",
    "value_bias": "bool",
    "proj_bias": "bool",
    "mlp_bias": "bool",
    "num_register_tokens": "int",
    "layerscale_value": "number",
    "layer_scale_init_value": "number",
    "use_swiglu_ffn": "bool",
    "use_gated_mlp": "bool",
    "use_mask_token": "bool",
    "use_absolute_position_embeddings": "bool",
    "use_relative_position_bias": "bool",
    "use_shared_relative_position_bias": "bool",
    "use_mean_pooling": "bool",
    "vision_use_head": "bool",
    "use_head": "bool",
    "is_native": "bool",
    "rope_theta": "number",
    "mlp_ratio": "number",
    "pooler_act": "str",
    "id2label": "dict",
    "label2id": "dict",
    "mask_ratio": "number",
    "norm_pix_loss": "bool",
    "decoder_hidden_size": "int",
    "decoder_num_hidden_layers": "int",
    "decoder_num_attention_heads": "int",
    "decoder_intermediate_size": "int",
    "vision_config": "dict",
    "_name_or_path": "str",
}

# transformers' preprocessor_config.json fields keras_vit reads.
HF_PROCESSOR_FIELDS = {
    "image_mean": "numbers",
    "image_std": "numbers",
    "rescale_factor": "number",
    "resample": "int",
    "size": "size",
    "crop_size": "size",
    "do_resize": "bool",
    "do_center_crop": "bool",
    "do_rescale": "bool",
    "do_normalize": "bool",
}

# timm's Hub config.json (what `save_for_hf` writes) and its pretrained_cfg.
TIMM_CONFIG_FIELDS = {
    "architecture": "str",
    "num_classes": "int",
    "num_features": "int",
    "pretrained_cfg": "dict",
    "label_names": "labels",
    "label_descriptions": "dict",
}
TIMM_PRETRAINED_CFG_FIELDS = {
    "tag": "str",
    "mean": "numbers",
    "std": "numbers",
    "crop_pct": "number",
    "crop_mode": "str",
    "interpolation": "str",
    "input_size": "int_list",
    "num_classes": "int",
    "label_names": "labels",
}


def read_json_object(path, what="file"):
    """The JSON object (a dict) in `path`; a ValueError naming the file when it is not one."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: the {what} is not valid JSON ({error}).") from error
    if not isinstance(value, dict):
        raise ValueError(
            f"{path}: the {what} must hold a JSON object ({{...}}). Received: a "
            f"{type(value).__name__}."
        )
    return value


def check_fields(config, fields, source, nullable=()):
    """Checks each field of `fields` ({name: kind}) that `config` has; returns `config`.

    A null value is refused unless its name is in `nullable`.

    Raises:
        ValueError: `{source}: {field} must be {kind}. Received: {field}={value!r}`.

    Example:

    >>> check_fields({"num_hidden_layers": 2.9}, HF_CONFIG_FIELDS, "config.json")
    Traceback (most recent call last):
        ...
    ValueError: config.json: num_hidden_layers must be an integer. Received: num_hidden_layers=2.9 (a float)
    """  # noqa: E501
    for name, kind in fields.items():
        if name not in config or (config[name] is None and name in nullable):
            continue
        value = config[name]
        accepts, description = KINDS[kind]
        if not accepts(value):
            raise ValueError(
                f"{source}: {name} must be {description}. Received: {name}={value!r} "
                f"(a {_json_type(value)})"
            )
    return config


def _json_type(value):
    names = {bool: "boolean", int: "integer", float: "float", str: "string", list: "list",
             dict: "object", type(None): "null"}  # fmt: skip
    return names.get(type(value), type(value).__name__)
