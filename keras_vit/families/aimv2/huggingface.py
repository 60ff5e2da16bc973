"""Hugging Face AIMv2 vision encoders -> keras_vit models (`from_huggingface`).

Reads a `save_pretrained` folder of transformers' `Aimv2VisionModel` (`model_type`
`"aimv2_vision_model"`) or the vision tower of an `Aimv2Model` (`"aimv2"`: its `vision_config`
and `vision_model.*` weights; the text tower and projections are left out) into the model
`keras_vit.from_timm` builds for timm's `aimv2_*`: `norm="rmsnorm"` with `rms_norm_eps`,
`patch_norm=True` (`embeddings.rms_norm`), a SwiGLU MLP (`ffn.gate_proj`, `up_proj`,
`down_proj`, `hidden_act="silu"`), no class token, a learned position table of the patches.

What the model returns, against transformers' outputs: `pooling=None` (the default here)
returns `last_hidden_state` (the final RMSNorm included); `pooling="gap"` its mean over the
tokens, which is timm's `aimv2_*` pooled output. The attention-pooling head of the checkpoints
with `use_head=True` (`head.*`, `pooler_output`: a learned query without projection, k / v
projections, one output projection) is not our `MAPHead` and is left out (logged).

Numerics: transformers' `Aimv2RMSNorm` computes in float32 and casts back before the scale,
timm's `RmsNorm` in the input dtype; Keras' `RMSNormalization` in float32: all three agree in
float32 (the tests: within 1e-5 of transformers). transformers' AIMv2 takes only its
`image_size` (no position interpolation); another `image_size` here resamples the table as
timm does (bicubic, antialiased). `is_native=True` checkpoints (a sine-cosine table for any grid)
are refused.
"""

import logging
import os

from keras_vit.models.config import ViTConfig
from keras_vit.models.encoder import build_model
from keras_vit.models.variable_paths import PATHS, block, patch_encoder
from keras_vit.weights import loading as L
from keras_vit.weights.huggingface import common as H
from keras_vit.weights.state_dict import read_state_dict
from keras_vit.weights.timm.table import timm_position_transform

logger = logging.getLogger(__name__)

MODEL_TYPES = ("aimv2", "aimv2_vision_model")
_PREFIX = "vision_model."
# transformers' Aimv2VisionConfig defaults (a config.json may leave them out).
_DEFAULTS = dict(
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=24,
    num_attention_heads=8,
    num_channels=3,
    image_size=224,
    patch_size=14,
    hidden_act="silu",
    rms_norm_eps=1e-5,
    qkv_bias=False,
    mlp_bias=False,
    use_head=True,
    is_native=False,
)

_norm, _dense = L.torch_norm, L.torch_linear


def _table_rows(transform):
    """transformers' `nn.Embedding` table `(N, D)` -> our `(1, N, D)`, then `transform`."""
    return L.Transform(
        f"embedding_{transform.name}",
        lambda shapes: shapes[0][1:],
        lambda a, shapes: transform.apply(a[None], shapes),
        exact=False,
    )


def aimv2_arguments(hf, source="config.json"):
    """`keras_vit.ViT` arguments of an AIMv2 `config.json` (the vision config of an `Aimv2Model`).

    Returns:
        dict of arguments, with the private keys `_qkv_bias`, `_mlp_bias`, `_use_head`.

    Raises:
        ValueError: another `model_type`, `is_native=True` or another `hidden_act`.

    Example:

    >>> args = aimv2_arguments({"model_type": "aimv2_vision_model", "hidden_size": 32,
    ...     "num_attention_heads": 2, "intermediate_size": 88, "num_hidden_layers": 2})
    >>> args["norm"], args["patch_norm"], args["mlp_dim"], args["image_size"]
    ('rmsnorm', True, 88, 224)
    """
    model_type = hf.get("model_type")
    if model_type not in MODEL_TYPES:
        raise ValueError(
            f"{source}: model_type {model_type!r} is not an AIMv2 vision encoder. Expected one "
            f"of {MODEL_TYPES}."
        )
    vision = hf if model_type == "aimv2_vision_model" else hf.get("vision_config")
    if not isinstance(vision, dict):
        raise ValueError(f"{source}: an 'aimv2' config needs a vision_config object.")
    c = {**_DEFAULTS, **vision}
    if c["is_native"]:
        raise ValueError(
            f"{source}: is_native=True (AIMv2's native-resolution checkpoints, a sine-cosine "
            "position table with its halves swapped) is not supported. Received: is_native=True"
        )
    if c["hidden_act"] != "silu":
        raise ValueError(
            f"{source}: hidden_act must be 'silu' (keras_vit's SwiGLU). "
            f"Received: hidden_act={c['hidden_act']!r}"
        )
    return {
        **H.size_arguments(c, source, variant="L/14", epsilon_key="rms_norm_eps"),
        "class_token": False,
        "mlp": "swiglu",
        "norm": "rmsnorm",
        "patch_norm": True,
        "_qkv_bias": bool(c["qkv_bias"]),
        "_mlp_bias": bool(c["mlp_bias"]),
        "_use_head": bool(c["use_head"]),
    }


def aimv2_name_table(config, *, qkv_bias=False, mlp_bias=False):
    """transformers' `Aimv2VisionModel` weight names -> the variables of `config`'s model."""
    p = PATHS
    table = {
        "embeddings.patch_embed.weight": (p["patch_kernel"], L.CONV),
        "embeddings.patch_embed.bias": (p["patch_bias"], L.IDENTITY),
        "embeddings.rms_norm.weight": (patch_encoder("patch_norm", "scale"), L.IDENTITY),
        "embeddings.position_embedding.weight": (
            p["position_embedding"],
            _table_rows(timm_position_transform(config)),
        ),
    }
    for i in range(config.num_layers):
        key, path = f"encoder.layers.{i}", block(i)
        attention = f"{path}/attention"
        table[f"{key}.rms_norm1.weight"] = (f"{path}/attention_norm/scale", L.IDENTITY)
        for short, name in (("q", "query"), ("k", "key"), ("v", "value")):
            source = f"{key}.attention.{short}_proj"
            table[f"{source}.weight"] = (f"{attention}/{name}/kernel", L.HEADS_IN_WEIGHT)
            if qkv_bias:
                table[f"{source}.bias"] = (f"{attention}/{name}/bias", L.HEADS_IN_BIAS)
        out = f"{key}.attention.out_proj"
        table[f"{out}.weight"] = (f"{attention}/attention_output/kernel", L.HEADS_OUT_WEIGHT)
        if qkv_bias:  # transformers: out_proj's bias is qkv_bias too
            table[f"{out}.bias"] = (f"{attention}/attention_output/bias", L.IDENTITY)
        table[f"{key}.rms_norm2.weight"] = (f"{path}/mlp_norm/scale", L.IDENTITY)
        for name, ours in (("gate_proj", "gate_dense"), ("up_proj", "up_dense"),
                           ("down_proj", "down_dense")):  # fmt: skip
            entries = _dense(f"{key}.ffn.{name}", f"{path}/mlp/{ours}")
            if not mlp_bias:
                entries.pop(f"{key}.ffn.{name}.bias")
            table.update(entries)
    table["rms_norm.weight"] = (
        f"{p['fc_norm' if config.fc_norm else 'encoder_norm']}/scale",
        L.IDENTITY,
    )
    return table


def _fills(config, qkv_bias, mlp_bias):
    fills = {}
    for i in range(config.num_layers):
        path = block(i)
        names = () if qkv_bias else ("query", "key", "value", "attention_output")
        fills.update({f"{path}/attention/{name}/bias": 0.0 for name in names})
        if not mlp_bias:
            fills.update({f"{path}/mlp/{name}/bias": 0.0
                          for name in ("gate_dense", "up_dense", "down_dense")})  # fmt: skip
    return fills


def from_huggingface_aimv2(folder, hf, *, num_classes=None, **kwargs):
    """`from_huggingface` for an AIMv2 folder (`keras_vit.from_huggingface` dispatches here).

    Args:
        folder: str. The `save_pretrained` folder.
        hf: dict. Its `config.json`.
        num_classes: optional int. A new zero-initialised head of this many classes on the
            pooled features (needs `pooling="gap"`); None: no head.
        **kwargs: other `keras_vit.ViT` arguments (`pooling`: None, the default, returns
            `last_hidden_state`; `"gap"` its mean; `image_size` resamples the position table).

    Returns:
        A `keras_vit.models.VisionTransformer`.
    """
    source = os.path.join(folder, "config.json")
    arguments = aimv2_arguments(hf, source)
    qkv_bias, mlp_bias = arguments.pop("_qkv_bias"), arguments.pop("_mlp_bias")
    arguments.pop("_use_head")
    weights_path = H.weights_file(folder)
    tower = hf.get("model_type") == "aimv2_vision_model"
    arrays, skip = {}, {}
    for key, value in read_state_dict(weights_path).items():
        if tower or key.startswith(_PREFIX):
            arrays[key[len(_PREFIX) :] if key.startswith(_PREFIX) else key] = value
        else:  # an Aimv2Model's text tower, projections, logit scale
            arrays[key] = value
            skip[key] = f"dropped {key} {L.shape_of(value)} (not the vision tower)"
    for key, value in arrays.items():
        if key.startswith("head."):
            skip[key] = (f"dropped {key} {L.shape_of(value)}: AIMv2's attention-pooling head is "
                         "not read (pooling=None or 'gap')")  # fmt: skip
    num_classes, include_top = H.head_arguments_of(num_classes, kwargs)
    image_size = kwargs.pop("image_size", None)
    config = ViTConfig.from_variant(
        arguments.pop("variant"),
        **{
            **arguments,
            "pooling": kwargs.pop("pooling", None if not include_top else "gap"),
            "num_classes": num_classes,
            "include_top": include_top,
            "name": kwargs.pop("name", None) or H.model_name(hf),
            "image_size": arguments["image_size"] if image_size is None else image_size,
            **kwargs,
        },
    )
    model = build_model(config)
    if config.include_top:
        logger.info("AIMv2 checkpoints have no classifier: the model's head stays zero-initialised")
    L.load_state_dict(
        model,
        arrays,
        aimv2_name_table(config, qkv_bias=qkv_bias, mlp_bias=mlp_bias),
        source=repr(weights_path),
        logger=logger,
        fills=_fills(config, qkv_bias, mlp_bias),
        skip=skip,
    )
    return model
