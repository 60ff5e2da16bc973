"""Hugging Face SigLIP 2 NaFlex vision towers -> keras_vit NaFlex models (`from_huggingface`).

Reads a `save_pretrained` folder of transformers' `Siglip2VisionModel` (`model_type`
`"siglip2_vision_model"`), the vision tower of a `Siglip2Model` (`"siglip2"`: `vision_config`,
the `vision_model.*` weights; the text tower and `logit_scale` / `logit_bias` are left out) or a
`Siglip2ForImageClassification` (`"siglip2"` with a `classifier`) into `ViT(..., naflex=True)`.

The model takes our NaFlex dict (`keras_vit.data.naflex_batch`); transformers' inputs map to it
one to one (`keras_vit.data.naflex_from_siglip2` / `naflex_to_siglip2`):

- `pixel_values` `(B, N, P * P * C)` is `patches` (the processor's patches are in (row,
  column, channel) order, ours);
- `pixel_attention_mask` `(B, N)` is `patch_valid`: the first `h * w` tokens of an image are
  valid, the rest padding;
- `spatial_shapes` `(B, 2)` `(h, w)` becomes `patch_coord`: token `n < h * w` sits at
  `(n // w, n % w)` (row-major, as the processor patchifies).

Numerics, against `Siglip2VisionModel`:

- the patch projection is a `Linear` on flattened patches (our kernel reshaped, as timm's
  `naflexvit_*`);
- the `(g, g)` position table (`position_embedding.weight` `(g * g, D)`) is resized to each
  image's `(h, w)` by `F.interpolate(mode="bilinear", align_corners=False, antialias=True)`'s
  weights (transformers' `resize_positional_embeddings`): our
  `position_embedding_interpolation="bilinear"` with the default antialiasing, the same resize as
  timm's `naflexvit_*_siglip`. Padding tokens get no position embedding here (transformers adds
  the table's first row to them); they are masked keys in both, so the valid tokens' outputs and
  the pooled output are the same;
- `hidden_act` `"gelu_pytorch_tanh"` (the SigLIP 2 checkpoints') is the tanh GELU;
  `layer_norm_eps` every norm's epsilon;
- `vision_use_head=True`: the MAP head (`head.probe`, `nn.MultiheadAttention`'s fused
  `in_proj_weight` split into our `q` and `kv`, `head.layernorm`, `head.mlp`) is `pooling="map"`
  (keys masked by `patch_valid`); `pooler_output` is its output. Without the head (and for the
  classifier, which averages the valid tokens of `last_hidden_state`) `pooling="gap"`.
"""

import logging
import os

import numpy as np

from keras_vit.models.config import ViTConfig
from keras_vit.models.encoder import build_model
from keras_vit.models.variable_paths import PATHS, block, map_head
from keras_vit.weights import loading as L
from keras_vit.weights.huggingface import common as H
from keras_vit.weights.state_dict import read_state_dict
from keras_vit.weights.timm.naflex import PATCH_KERNEL

logger = logging.getLogger(__name__)

MODEL_TYPES = ("siglip2", "siglip2_vision_model")
ARCHITECTURES = ("Siglip2VisionModel", "Siglip2Model", "Siglip2ForImageClassification")
_PREFIX = "vision_model."
_SKIPPED = ("text_model.", "logit_scale", "logit_bias")

_norm, _dense = L.torch_norm, L.torch_linear


def _split_in_proj(name, source_shape):
    """`nn.MultiheadAttention`'s fused q, k, v rows -> our MAP head's `q` and `kv`."""

    def apply(a, shapes):
        d = len(a) // 3
        return (a[:d].T, a[d:].T) if a.ndim == 2 else (a[:d], a[d:])

    return L.Transform(name, source_shape, apply)


_IN_PROJ_WEIGHT = _split_in_proj(
    "in_proj_weight", lambda shapes: (shapes[0][1] + shapes[1][1], shapes[0][0])
)
_IN_PROJ_BIAS = _split_in_proj("in_proj_bias", lambda shapes: (shapes[0][0] + shapes[1][0],))
_TABLE = L.Transform(
    "position_table",
    lambda shapes: shapes[0][1:],
    lambda a, shapes: (a.reshape(shapes[0]),),
)


def siglip2_vision_config(hf, source="config.json"):
    """The vision `config.json` dict of a SigLIP 2 folder, and its architecture.

    Args:
        hf: dict, the folder's `config.json`.
        source: str. Where it comes from, for messages.

    Returns:
        `(vision config dict, architecture)`.

    Raises:
        ValueError: another `model_type` or architecture, naming it and the supported ones.
    """
    model_type = hf.get("model_type")
    architectures = hf.get("architectures") or (
        ["Siglip2VisionModel"] if model_type == "siglip2_vision_model" else ["Siglip2Model"]
    )
    unknown = [a for a in architectures if a not in ARCHITECTURES]
    if model_type not in MODEL_TYPES or unknown:
        raise ValueError(
            f"{source}: model_type {model_type!r} / architectures {architectures} is not a "
            f"SigLIP 2 NaFlex vision tower. Expected model_type in {MODEL_TYPES} and an "
            f"architecture in {ARCHITECTURES}."
        )
    vision = hf if model_type == "siglip2_vision_model" else hf.get("vision_config")
    if not isinstance(vision, dict):
        raise ValueError(f"{source}: a {model_type!r} config needs a vision_config object.")
    return vision, architectures[0]


def siglip2_arguments(vision, source="config.json"):
    """`keras_vit.ViT(..., naflex=True)` arguments of a `Siglip2VisionConfig` dict.

    Args:
        vision: dict, the vision config.
        source: str. Where it comes from, for messages.

    Returns:
        dict of `ViT` arguments.

    Example:

    >>> args = siglip2_arguments({"hidden_size": 32, "num_hidden_layers": 1,
    ...     "num_attention_heads": 2, "intermediate_size": 64, "patch_size": 4,
    ...     "num_patches": 16})
    >>> args["image_size"], args["pooling"], args["position_embedding_interpolation"]
    (16, 'map', 'bilinear')
    """
    activation = vision.get("hidden_act", "gelu_pytorch_tanh")
    if activation not in H.ACTIVATIONS:
        raise ValueError(
            f"{source}: hidden_act {activation!r} is not supported. Expected one of "
            f"{sorted(H.ACTIVATIONS)}."
        )
    try:
        patch = int(vision.get("patch_size", 16))
        num_patches = int(vision.get("num_patches", 256))
        grid = int(round(num_patches**0.5))
        if grid * grid != num_patches:
            raise ValueError(f"num_patches must be a square. Received: {num_patches}")
        sizes = H.size_arguments({**vision, "image_size": grid * patch}, source,
                                 layer_norm_eps=1e-6)  # image_size: the position table's grid
        return dict(
            sizes,
            approximate_gelu=H.ACTIVATIONS[activation],
            naflex=True,
            class_token=False,
            pooling="map" if vision.get("vision_use_head", True) else "gap",
            position_embedding_interpolation="bilinear",
            position_embedding_antialias=True,
        )
    except (TypeError, ValueError) as error:
        raise ValueError(f"{source}: {error}") from error


def siglip2_name_table(config, *, classifier=False):
    """transformers' `Siglip2VisionModel` weight names (without `vision_model.`) for `config`.

    Args:
        config: the NaFlex `ViTConfig` of the model.
        classifier: bool. Map `classifier.*` (`Siglip2ForImageClassification`) to our head.
            Defaults to False.

    Returns:
        dict {name: (variable path(s), transform)} for `keras_vit.weights.loading`.

    Example:

    >>> config = ViTConfig.from_variant("mu/4", image_size=16, naflex=True,
    ...     class_token=False, pooling="map", include_top=False)
    >>> siglip2_name_table(config)["head.attention.in_proj_weight"][0]
    ('pooling/q/kernel', 'pooling/kv/kernel')
    """
    p = PATHS
    table = {
        "embeddings.patch_embedding.weight": (p["patch_kernel"], PATCH_KERNEL),
        "embeddings.patch_embedding.bias": (p["patch_bias"], L.IDENTITY),
        "embeddings.position_embedding.weight": (p["position_embedding"], _TABLE),
    }
    for i in range(config.num_layers):
        key, path = f"encoder.layers.{i}", block(i)
        attention = f"{path}/attention"
        table.update(_norm(f"{key}.layer_norm1", f"{path}/attention_norm"))
        for short, name in (("q", "query"), ("k", "key"), ("v", "value")):
            source = f"{key}.self_attn.{short}_proj"
            table[f"{source}.weight"] = (f"{attention}/{name}/kernel", L.HEADS_IN_WEIGHT)
            table[f"{source}.bias"] = (f"{attention}/{name}/bias", L.HEADS_IN_BIAS)
        table[f"{key}.self_attn.out_proj.weight"] = (
            f"{attention}/attention_output/kernel",
            L.HEADS_OUT_WEIGHT,
        )
        table[f"{key}.self_attn.out_proj.bias"] = (f"{attention}/attention_output/bias", L.IDENTITY)
        table.update(_norm(f"{key}.layer_norm2", f"{path}/mlp_norm"))
        table.update(_dense(f"{key}.mlp.fc1", f"{path}/mlp_dense_1"))
        table.update(_dense(f"{key}.mlp.fc2", f"{path}/mlp_dense_2"))
    table.update(_norm("post_layernorm", p["encoder_norm"]))
    if config.pooling == "map":
        table["head.probe"] = (map_head("latent"), L.IDENTITY)
        pair = (map_head("q", "kernel"), map_head("kv", "kernel"))
        table["head.attention.in_proj_weight"] = (pair, _IN_PROJ_WEIGHT)
        pair = (map_head("q", "bias"), map_head("kv", "bias"))
        table["head.attention.in_proj_bias"] = (pair, _IN_PROJ_BIAS)
        table.update(_dense("head.attention.out_proj", map_head("proj")))
        table.update(_norm("head.layernorm", map_head("norm")))
        table.update(_dense("head.mlp.fc1", map_head("mlp_fc1")))
        table.update(_dense("head.mlp.fc2", map_head("mlp_fc2")))
    if classifier and config.include_top:
        table.update(_dense("classifier", p["head"]))
    return table


def _arrays(weights_path):
    """The checkpoint's vision-tower arrays (prefix stripped) and the skip notes of the rest."""
    arrays, skip = {}, {}
    for key, value in read_state_dict(weights_path).items():
        if key.startswith(_SKIPPED):
            skip[key] = value
            continue
        arrays[key[len(_PREFIX) :] if key.startswith(_PREFIX) else key] = value
    return arrays, skip


def from_huggingface_siglip2(folder, hf, *, num_classes=None, **kwargs):
    """`from_huggingface` for a SigLIP 2 folder (`keras_vit.from_huggingface` dispatches here).

    Args:
        folder: str. The `save_pretrained` folder.
        hf: dict. Its `config.json`.
        num_classes: optional int. Defaults to the classifier's class count
            (`Siglip2ForImageClassification`), or no head. Another count gives a new
            zero-initialised head on the pooled features.
        **kwargs: other `keras_vit.ViT` arguments (`include_top`, `pooling`: `"map"` needs the
            checkpoint's head, `None` returns `last_hidden_state`).

    Returns:
        A NaFlex `keras.Model` taking `{"patches", "patch_coord", "patch_valid"}`.
    """
    source = os.path.join(folder, "config.json")
    if "image_size" in kwargs:
        raise ValueError(
            "A SigLIP 2 NaFlex model takes images of any size (each resized to its own patch "
            "grid by keras_vit.data.naflex_batch); its position table's grid is the "
            f"checkpoint's. Received: image_size={kwargs['image_size']!r}"
        )
    vision, architecture = siglip2_vision_config(hf, source)
    arguments = siglip2_arguments(vision, source)
    weights_path = H.weights_file(folder)
    arrays, others = _arrays(weights_path)
    is_classifier = architecture == "Siglip2ForImageClassification"
    if is_classifier:
        arguments["pooling"] = "gap"  # mean of the valid tokens of last_hidden_state
    classifier = arrays.get("classifier.weight")
    if num_classes is None and classifier is not None and np.ndim(classifier) == 2:
        num_classes = int(classifier.shape[0])
    num_classes, include_top = H.head_arguments_of(num_classes, kwargs)
    config = ViTConfig.from_variant(
        arguments.pop("variant"),
        **{
            **arguments,
            "num_classes": num_classes,
            "include_top": include_top,
            "name": kwargs.pop("name", None) or H.model_name(hf),
            **kwargs,
        },
    )
    model = build_model(config)
    table = siglip2_name_table(config, classifier=is_classifier)
    skip = {key: f"dropped {key} {L.shape_of(value)} (not the vision tower)"
            for key, value in others.items()}  # fmt: skip
    for key, value in arrays.items():
        if key.startswith("head.") and config.pooling != "map":
            skip[key] = f"dropped {key} {L.shape_of(value)}: pooling={config.pooling!r}"
        elif key.startswith("classifier.") and (
            not config.include_top or int(classifier.shape[0]) != config.num_classes
        ):
            why = "no head" if not config.include_top else f"a new {config.num_classes}-way head"
            skip[key] = f"dropped {key} {L.shape_of(value)}: the model has {why}"
    if config.include_top and not is_classifier:
        logger.info("the checkpoint has no classifier: the model's head stays zero-initialised")
    # (`others` has no classifier: the head's presence reads the same in the merged dict.)
    H.load_arrays(model, {**arrays, **others}, table, weights_path, logger, skip=skip)
    return model
