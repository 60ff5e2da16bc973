"""transformers' BEiT (`BeitModel`, `BeitForImageClassification`) folders -> keras_vit models.

`from_huggingface(folder)` sends a folder whose `config.json` says `model_type: "beit"` here
(the family registry: `keras_vit.families`). The model is the one `from_timm` builds for
`beit*` names: a class token, a relative position bias in every block
(`use_relative_position_bias`: `relative_position_bias="block"`) or one shared by all
(`use_shared_relative_position_bias`: `"shared"`), an absolute position embedding only with
`use_absolute_position_embeddings`, q/v-only biases (`key_bias=False`), LayerScale
(`lambda_1` / `lambda_2`; none with `layer_scale_init_value <= 0`), and either
`use_mean_pooling` (no final norm on the tokens, `pooler.layernorm` on their mean: our
`pooling="gap"` with `fc_norm`) or the final `layernorm` and the class token.

What the model returns: a `BeitForImageClassification` folder its `logits`; a `BeitModel` folder
`pooler_output` (the default pooling) or `last_hidden_state` (`pooling=None`).

Weight names: the files keep transformers 4's (`attention.attention.query`,
`intermediate.dense`, `encoder.relative_position_bias`); transformers 5's in-memory names
(`layers.{i}.attention.q_proj`, `mlp.fc1`, `shared_position_bias`) are mapped to them.

Image size: any fixed one (not `dynamic_image_size`: a relative position table belongs to one
grid). At another size than the checkpoint's, the tables are resized as transformers does for
an input of that size (`BeitModel(..., interpolate_pos_encoding=True)`): each relative position
table's `(2h - 1, 2w - 1)` offsets bilinearly (`F.interpolate`, `align_corners=False`, no
antialias; the 3 class-token rows kept), the absolute position embedding bicubically (no
antialias), both once at load time (`beit_table_resizes`, `keras_vit.layers.relative_position.
resize_relative_position_table_bilinear`). `from_timm` on a timm BEiT resizes
the relative position tables as timm does instead (log-spaced offsets): the two differ
(docs/weights.md says by how much).
"""

import logging
import os
import re

from keras_vit.layers._checks import check_positive_int_pair
from keras_vit.layers.position_embedding import resample_position_embedding
from keras_vit.layers.relative_position import resize_relative_position_table_bilinear
from keras_vit.models.encoder import build_model
from keras_vit.models.variable_paths import PATHS, RELATIVE_POSITION_BIAS, block
from keras_vit.weights import loading as L
from keras_vit.weights.huggingface import common as H
from keras_vit.weights.huggingface import vit as V
from keras_vit.weights.state_dict import read_state_dict

logger = logging.getLogger(__name__)

ARCHITECTURES = ("BeitModel", "BeitForImageClassification")
_TABLE = "relative_position_bias.relative_position_bias_table"
# transformers 5's in-memory BEiT names -> the file names (besides ViT's, `huggingface._RENAMES`).
_RENAMES = (
    (r"^layers\.(\d+)\.lambda_", r"encoder.layer.\1.lambda_"),
    (rf"^layers\.(\d+)\.{_TABLE}", rf"encoder.layer.\1.attention.attention.{_TABLE}"),
    (r"^shared_position_bias\.", "encoder.relative_position_bias."),
)


def beit_arguments(config, source="config.json"):
    """`keras_vit.ViT` arguments of a transformers `BeitConfig` dict.

    Args:
        config: dict, the contents of `config.json`.
        source: str. Where it comes from, for messages.

    Returns:
        dict of `ViT` arguments.

    Raises:
        ValueError: an architecture, activation or layout keras_vit does not read, naming it.

    Example:

    >>> args = beit_arguments({"model_type": "beit", "hidden_size": 32,
    ...     "num_attention_heads": 2, "use_relative_position_bias": True})
    >>> args["relative_position_bias"], args["pooling"], args["fc_norm"]
    ('block', 'gap', True)
    """
    H.check_architectures(config, ARCHITECTURES, source)
    activation = config.get("hidden_act", "gelu")
    if activation not in H.ACTIVATIONS:
        raise ValueError(
            f"{source}: hidden_act {activation!r} is not supported. Expected one of "
            f"{sorted(H.ACTIVATIONS)}."
        )
    shared = bool(config.get("use_shared_relative_position_bias", False))
    per_block = bool(config.get("use_relative_position_bias", False))
    if shared and per_block:
        raise ValueError(
            f"{source}: use_shared_relative_position_bias and use_relative_position_bias are "
            "both set; keras_vit has one relative position bias (shared or per block). "
            "Expected at most one of them."
        )
    absolute = bool(config.get("use_absolute_position_embeddings", False))
    mean_pooling = bool(config.get("use_mean_pooling", True))
    scale = float(config.get("layer_scale_init_value", 0.1))
    try:
        return dict(
            **H.size_arguments(config, source),
            approximate_gelu=H.ACTIVATIONS[activation],
            class_token=True,
            position_embedding="learned" if absolute else None,
            relative_position_bias="shared" if shared else ("block" if per_block else None),
            key_bias=False,
            layer_scale_init_value=scale if scale > 0 else None,
            pooling="gap" if mean_pooling else "token",
            fc_norm=mean_pooling,
        )
    except (TypeError, ValueError) as error:
        raise ValueError(f"{source}: {error}") from error


def normalize_names(arrays):
    """`beit.` prefixes stripped; transformers 5's in-memory names -> the file names.

    Example:

    >>> sorted(normalize_names({"beit.layers.0.attention.k_proj.weight": 1,
    ...     "beit.shared_position_bias.relative_position_bias_table": 2}))
    ['encoder.layer.0.attention.attention.key.weight', \
'encoder.relative_position_bias.relative_position_bias_table']
    """
    out = {}
    for key, value in arrays.items():
        key = key[len("beit.") :] if key.startswith("beit.") else key
        for pattern, replacement in _RENAMES:
            key = re.sub(pattern, replacement, key)
        out[V.legacy_vit_name(key)] = value
    return out


def beit_table_resizes(config, source_grid):
    """The transforms of the position embedding and the relative position tables of a
    checkpoint of `source_grid` read into `config`'s grid, as transformers resizes them
    (`interpolate_pos_encoding=True`): `(position_transform, table_transform)`, identities
    where the grids are equal."""
    if tuple(source_grid) == tuple(config.grid_size):
        return L.IDENTITY, L.IDENTITY

    def resample(posemb, grid, prefix):
        return resample_position_embedding(
            posemb, grid, prefix, old_grid=source_grid, interpolation="bicubic", antialias=False
        )

    def resize_table(array, shapes):
        if array.ndim != 2 or array.shape[1] != shapes[0][1]:
            raise L.Mismatch(f"found {L.shape_of(array)}")
        try:
            return (resize_relative_position_table_bilinear(array, config.grid_size, source_grid),)
        except ValueError as error:
            raise L.Mismatch(f"found {L.shape_of(array)}: {error}") from error

    position = L.position_embedding(config.grid_size, int(config.class_token), resample)
    table = L.Transform("relative_position_table", lambda shapes: shapes[0], resize_table, False)
    return position, table


def beit_name_table(config, source_grid=None):
    """The transformers BEiT weight names (file layout) for the model `config` describes.

    `source_grid`: the checkpoint's patch grid where it is not the model's (its tables are then
    resized as transformers does, `beit_table_resizes`). Defaults to the model's.

    Example:

    >>> from keras_vit.models.config import ViTConfig
    >>> config = ViTConfig.from_variant("mu/8", image_size=16, num_layers=1, key_bias=False,
    ...     position_embedding=None, relative_position_bias="block")
    >>> sorted(k for k in beit_name_table(config) if "bias_table" in k)
    ['encoder.layer.0.attention.attention.relative_position_bias.relative_position_bias_table']
    """
    position, relative = beit_table_resizes(config, source_grid or config.grid_size)
    p = PATHS
    table = {
        "embeddings.cls_token": (p["class_token"], L.IDENTITY),
        "embeddings.patch_embeddings.projection.weight": (p["patch_kernel"], L.CONV),
        "embeddings.patch_embeddings.projection.bias": (p["patch_bias"], L.IDENTITY),
    }
    if config.position_embedding == "learned":
        table["embeddings.position_embeddings"] = (p["position_embedding"], position)
    if config.relative_position_bias == "shared":
        table[f"encoder.{_TABLE}"] = (
            f"{RELATIVE_POSITION_BIAS}/relative_position_bias_table",
            relative,
        )
    for i in range(config.num_layers):
        key, path = f"encoder.layer.{i}", block(i)
        table.update(L.torch_norm(f"{key}.layernorm_before", f"{path}/attention_norm"))
        table.update(H.vit_attention_rows(key, path, biases=("query", "value")))
        if config.relative_position_bias == "block":
            table[f"{key}.attention.attention.{_TABLE}"] = (
                f"{path}/{RELATIVE_POSITION_BIAS}/relative_position_bias_table",
                relative,
            )
        if config.layer_scale_init_value is not None:
            table[f"{key}.lambda_1"] = (f"{path}/attention_scale", L.IDENTITY)
            table[f"{key}.lambda_2"] = (f"{path}/mlp_scale", L.IDENTITY)
        table.update(L.torch_norm(f"{key}.layernorm_after", f"{path}/mlp_norm"))
        table.update(L.torch_linear(f"{key}.intermediate.dense", f"{path}/mlp_dense_1"))
        table.update(L.torch_linear(f"{key}.output.dense", f"{path}/mlp_dense_2"))
    if config.fc_norm:
        if config.pooling is not None:  # pooling=None: the tokens, no norm (the pooler's skipped)
            table.update(L.torch_norm("pooler.layernorm", p["fc_norm"]))
    else:
        table.update(L.torch_norm("layernorm", p["encoder_norm"]))
    if config.include_top:
        table.update(L.torch_linear("classifier", p["head"]))
    return table


def _dropped(key, config):
    """Why BEiT's `key` is left out (`huggingface.skip_notes`), or None."""
    if key.endswith("relative_position_index"):
        return " (recomputed)"
    if key == "embeddings.mask_token" or key.startswith("lm_head."):
        return " (masked image modeling only)"
    if key.startswith("pooler.") and config.pooling is None:
        return ": pooling=None returns the tokens"
    return None


def from_huggingface_beit(folder, hf, *, num_classes=None, **kwargs):
    """A keras_vit model from a BEiT folder (see `keras_vit.from_huggingface`).

    Args:
        folder: str. The `save_pretrained` folder.
        hf: dict. Its `config.json`.
        num_classes: optional int. Defaults to the classifier's class count
            (`BeitForImageClassification`), or no head (`BeitModel`).
        **kwargs: other `keras_vit.ViT` arguments (`pooling`, `include_top`, `image_size`:
            the tables resized as transformers does, see the module docstring; not
            `dynamic_image_size`).

    Returns:
        A functional `keras.Model` taking `(B, H, W, C)` images normalised as the checkpoint's
        image processor does (mean 0.5, std 0.5 for Microsoft's BEiT).

    Raises:
        ValueError: an unsupported config value or image size, or weights that do not fit.
    """
    source = os.path.join(folder, "config.json")
    arguments = beit_arguments(hf, source=source)
    (height, width), (ph, pw) = (
        check_positive_int_pair(arguments[name], name) for name in ("image_size", "patch_size")
    )
    source_grid = (height // ph, width // pw)  # the checkpoint's
    if kwargs.get("dynamic_image_size"):
        raise ValueError(
            f"{folder}: BEiT's relative position table is fixed to its grid; "
            "dynamic_image_size=True is not supported."
        )
    weights_path = H.weights_file(folder)
    arrays = normalize_names(read_state_dict(weights_path))
    num_classes, classifier_classes, include_top = H.head_arguments(arrays, num_classes, kwargs)
    config = H.family_config(arguments, hf, num_classes, include_top, kwargs)
    model = build_model(config)
    table = beit_name_table(config, source_grid)
    skip = H.skip_notes(arrays, config, classifier_classes, lambda key: _dropped(key, config))
    H.load_arrays(model, arrays, table, weights_path, logger, skip=skip)
    return model
