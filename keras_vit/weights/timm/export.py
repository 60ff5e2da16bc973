"""keras_vit models -> timm: `export_timm(model, path)` writes a timm state dict.

The reverse of `keras_vit.weights.timm.reader.from_timm`, through the same tables: `timm_name_table`
names every array (read backwards by `keras_vit.weights.writing`), and the timm model names of
`FAMILIES` (the model's own name when it is one, e.g. after `from_timm`, then each family's
example and timm's hybrids) are the candidates for the architecture. `timm_config` says what
each candidate name builds; the one that needs the fewest keyword arguments to become the model
wins, and the arguments are returned with it:

    name, kwargs = keras_vit.export_timm(model, "model.safetensors")
    timm_model = timm.create_model(name, pretrained=False, **kwargs)
    timm_model.load_state_dict(safetensors.torch.load_file("model.safetensors"))  # strict

The image size, class count (0: `include_top=False`) and sizes (`embed_dim`, `depth`,
`num_heads`, `mlp_ratio`) are always in the keyword arguments; the rest only where the name's
own architecture differs. What a timm model name fixes and keyword arguments cannot change is
matched exactly or refused: the LayerNorm epsilon (1e-6; 1e-5 in timm's CLIP towers), DeiT's
distilled class, and the hybrids' ResNet stem (timm's R26, R50 and root-only stems with their
numerics). So is what timm's `VisionTransformer` has no option for (a `backbone` stem,
`representation_size`, `classifier_activation`, ...): a `ValueError` naming the option and its
value, raised before anything is written.

Two equivalences keep models exportable that timm spells differently: a patch-embedding bias
under `pre_norm` (timm's pre-norm models have none) is added to the position embedding of the
patch tokens (the same sum), and a `"sincos2d"` position embedding is written as timm's learned
`pos_embed` of the patch tokens (`no_embed_class=True`), the fixed table as its value. A model
whose q/k/v biases are all zero exports to a name without them (e.g. `vit_base_patch16_224_miil`)
as it came.
"""

import functools
import json
import math
import os
from typing import NamedTuple

import keras
import numpy as np

from keras_vit.layers._checks import check_bool
from keras_vit.models.variable_paths import PATHS, block
from keras_vit.weights.registry import family_of_timm_name
from keras_vit.weights.timm import names as timm_names
from keras_vit.weights.timm.export_checks import HYBRID_FIELDS, check_timm_expressible, refuse
from keras_vit.weights.timm.input_spec import timm_label_fields
from keras_vit.weights.timm.names import HYBRIDS, parse_timm_name
from keras_vit.weights.timm.pretrained import model_arguments
from keras_vit.weights.timm.reader import timm_config, timm_name_table
from keras_vit.weights.timm.verify import check_timm_state_dict
from keras_vit.weights.writing import (
    arrays_from_values,
    check_destination,
    model_config,
    model_values,
    write_json_file,
    write_state_dict,
)

# Our pooling -> timm's `global_pool`.
GLOBAL_POOLS = {"token": "token", "gap": "avg", "map": "map", None: ""}
# timm keyword arguments always returned, whatever the name's defaults.
ALWAYS = ("img_size", "num_classes", "embed_dim", "depth", "num_heads", "mlp_ratio")


class TimmModel(NamedTuple):
    """The timm model `export_timm` wrote a state dict for: `(name, kwargs)`.

    `timm.create_model(name, pretrained=False, **kwargs)` builds it.

    Attributes:
        name: str. A timm model name.
        kwargs: dict. `timm.create_model` keyword arguments.
    """

    name: str
    kwargs: dict

    def create_model_call(self):
        """The Python call that builds the model in timm, as a string.

        Example:

        >>> TimmModel("vit_tiny_patch16_224", {"num_classes": 10}).create_model_call()
        "timm.create_model('vit_tiny_patch16_224', pretrained=False, num_classes=10)"
        """
        arguments = "".join(f", {k}={v!r}" for k, v in self.kwargs.items())
        return f"timm.create_model({self.name!r}, pretrained=False{arguments})"


def _int_or_pair(pair):
    return pair[0] if pair[0] == pair[1] else tuple(pair)


def _mlp_ratio(config):
    """A ratio for which timm's `int(embed_dim * mlp_ratio)` is exactly `mlp_dim`."""
    ratio = config.mlp_dim / config.hidden_dim
    if int(config.hidden_dim * ratio) != config.mlp_dim:
        ratio = (config.mlp_dim + 0.5) / config.hidden_dim
    return ratio


def _activation(config):
    if config.activation == "quick_gelu":
        return "quick_gelu"
    return "gelu_tanh" if config.approximate_gelu else "gelu"


def timm_arguments(config, *, qkv_bias=True):
    """Every `timm.create_model` keyword argument that describes the model of `config`.

    Args:
        config: a `keras_vit.models.config.ViTConfig` timm can express (see `export_timm`).
        qkv_bias: bool. Whether the timm model has q/k/v biases. Defaults to True.

    Returns:
        dict of timm's `VisionTransformer` arguments.

    Example:

    >>> from keras_vit.models.config import ViTConfig
    >>> args = timm_arguments(ViTConfig.from_variant("mu/8", image_size=32, pooling="gap"))
    >>> args["embed_dim"], args["global_pool"], args["class_token"], args["img_size"]
    (32, 'avg', False, 32)
    """
    sincos = config.position_embedding == "sincos2d"
    return {
        "img_size": _int_or_pair(config.image_size),
        "num_classes": config.num_classes if config.include_top else 0,
        "embed_dim": config.hidden_dim,
        "depth": config.num_layers,
        "num_heads": config.num_heads,
        "mlp_ratio": _mlp_ratio(config),
        "patch_size": _int_or_pair(config.patch_size),
        "in_chans": config.num_channels,
        "global_pool": GLOBAL_POOLS[config.pooling],
        "class_token": config.class_token,
        "reg_tokens": config.num_register_tokens,
        "pos_embed": "none" if config.position_embedding is None else "learn",
        "no_embed_class": sincos or not config.prefix_position_embedding,
        "pre_norm": config.pre_norm,
        "fc_norm": config.fc_norm,
        # fc_norm without pooling: our model returns the tokens without a final norm.
        "final_norm": not (config.fc_norm and config.pooling is None),
        "init_values": config.layer_scale_init_value,
        "qkv_bias": qkv_bias,
        "qk_norm": config.qk_norm,
        "act_layer": _activation(config),
        "dynamic_img_size": config.dynamic_image_size,
        "pos_drop_rate": config.dropout_rate,
        "proj_drop_rate": config.dropout_rate,
        "attn_drop_rate": config.attention_dropout_rate,
        "drop_path_rate": config.drop_path_rate,
    }


def _candidate_specs(own_name=None):
    """timm names that may express a model: its own name (`own_name`) first, then each
    family's.

    A name is a candidate only when everything it fixes is what `timm_arguments` writes: its
    own model passes `check_timm_expressible` and its checkpoint has no layout of its own
    (`extras` other than `mlp_ratio` and how its position table is resized when loaded). A
    name fixing more (another norm, an inner norm, no final norm, ...) could not be
    overridden by keyword arguments into the model written.
    """
    names = [own_name] if isinstance(own_name, str) else []
    names += [family.example for family in timm_names.FAMILIES]
    names += [f"{arch}_224" for arch in HYBRIDS]
    found = {}
    for name in names:
        try:
            spec = parse_timm_name(name)
        except ValueError:
            continue
        if family_of_timm_name(spec.name) is not None:
            continue  # a family's own kind of model (its own timm reader): not a ViTConfig
        if set(spec.extras) - {"mlp_ratio", "position_resize"} or spec.name in found:
            continue  # a checkpoint layout of its own (Eva, AIMv2's unpacked SwiGLU, ...)
        try:
            check_timm_expressible(timm_config(spec))
        except ValueError:
            continue  # the name fixes what timm_arguments does not write
        found[spec.name] = spec
    return list(found.values())


def _candidate(spec):
    """`(spec, what the name fixes, its timm arguments)` of a candidate name."""
    theirs = timm_config(spec)
    return spec, _fixed(theirs), timm_arguments(theirs, qkv_bias=spec.qkv_bias)


@functools.cache
def _candidates(own_name=None):
    """`_candidate` of every candidate name (`_candidate_specs`), read once per own name."""
    return tuple(_candidate(spec) for spec in _candidate_specs(own_name))


def _fixed(config):
    """What a timm name fixes, of `config`: norm epsilon, distilled class, ResNet stem."""
    hybrid = tuple(getattr(config, f) for f in HYBRID_FIELDS) if config.is_hybrid else None
    return float(config.layer_norm_epsilon), config.distillation_token, hybrid


def _same_fixed(ours, theirs):
    (eps, distilled, hybrid), (eps2, distilled2, hybrid2) = ours, theirs
    return math.isclose(eps, eps2, rel_tol=1e-9) and distilled == distilled2 and hybrid == hybrid2


def _no_candidate(config):
    """The `ValueError` for a config no timm name fixes the same way (naming what differs)."""
    fixed = [(spec, theirs) for spec, theirs, _ in _candidates()]
    epsilons = sorted({f[0] for _, f in fixed})
    if not any(math.isclose(config.layer_norm_epsilon, e, rel_tol=1e-9) for e in epsilons):
        return refuse(
            "layer_norm_epsilon",
            config.layer_norm_epsilon,
            "timm's ViTs use 1e-6 and its CLIP towers 1e-5 (fixed by the model name)",
        )
    if config.is_hybrid:
        stems = {f[2] for _, f in fixed if f[2] is not None}
        ours = dict(zip(HYBRID_FIELDS, _fixed(config)[2], strict=True))
        if _fixed(config)[2] not in stems:
            return ValueError(
                f"timm cannot express the ResNet stem {ours}: timm's hybrids (vit_*_r26_*, "
                "vit_*_r50_*, vit_tiny_r_s16_p8_*) have resnet_units (2, 2, 2, 2), (3, 4, 9), "
                "(3, 4, 6, 3) or () with resnet_width=64, resnet_groups=32, "
                "resnet_conv_epsilon=1e-08 ('variance') and resnet_norm_epsilon=1e-05 "
                "(keras_vit.from_timm builds them so)."
            )
    return ValueError(
        "timm has no model name with this combination of layer_norm_epsilon="
        f"{config.layer_norm_epsilon}, distillation_token={config.distillation_token} and "
        f"{'a ResNet stem' if config.is_hybrid else 'no stem'}."
    )


def timm_model_for(config, *, zero_qkv_bias=False):
    """The timm model name and keyword arguments that build the model of `config`.

    Args:
        config: a `keras_vit.models.config.ViTConfig`.
        zero_qkv_bias: bool. Whether the model's q/k/v biases are all zero (then a timm
            name without them, such as `vit_base_patch16_224_miil`, fits). Defaults to False.

    Returns:
        `(TimmModel, qkv_bias)`: the name and kwargs, and whether the timm model has
        q/k/v biases.

    Raises:
        ValueError: what export_timm cannot write, naming the option and its value.

    Example:

    >>> from keras_vit.models.config import ViTConfig
    >>> config = ViTConfig.from_variant("S/16", num_classes=10, approximate_gelu=False)
    >>> timm_model_for(config)[0].name
    'vit_base_patch16_224'
    """
    check_timm_expressible(config)
    return _named_model(config, zero_qkv_bias)


def _named_model(config, zero_qkv_bias):
    """`timm_model_for` of a config already checked (`check_timm_expressible`)."""
    ours_fixed = _fixed(config)
    own = config.name if isinstance(config.name, str) else None
    best = None
    for spec, theirs_fixed, defaults in _candidates(own):
        if not _same_fixed(ours_fixed, theirs_fixed):
            continue
        qkv_bias = spec.qkv_bias or not zero_qkv_bias
        ours = timm_arguments(config, qkv_bias=qkv_bias)
        kwargs = {
            key: value
            for key, value in ours.items()
            if key in ALWAYS
            or value != defaults[key]
            or (key == "fc_norm" and _fc_norm_given(spec.name, value, ours["global_pool"]))
        }
        if best is None or len(kwargs) < len(best[0].kwargs):
            best = (TimmModel(spec.name, kwargs), qkv_bias)
    if best is None:
        raise _no_candidate(config)
    return best


def _fc_norm_given(name, fc_norm, global_pool):
    """Whether `fc_norm` must be a keyword argument: timm's `fc_norm=None` (the default of
    most names) means "on with average pooling", so it follows `global_pool` unless given."""
    fixed = model_arguments(name)[1].get("fc_norm")
    timm_default = global_pool in ("avg", "avgmax", "max") if fixed is None else fixed
    return global_pool == "avg" or fc_norm != timm_default


def _tokens(config):
    """The model's patch tokens (its grid's size)."""
    height, width = config.grid_size
    return height * width


def _qkv_bias_paths(config):
    return [
        block(i, "attention", name, "bias")
        for i in range(config.num_layers)
        for name in ("query", "key", "value")
    ]


def _prefix_rows(config):
    if config.position_embedding != "learned" or not config.prefix_position_embedding:
        return 0
    return int(config.class_token) + int(config.distillation_token) + config.num_register_tokens


def timm_export_table(config, *, qkv_bias=True):
    """`timm_name_table` of the timm model `export_timm` names for `config`.

    timm's patch embedding has a bias exactly when the model is not `pre_norm`, and a model
    with `fc_norm` and no pooling has neither final norm (timm's `final_norm=False`).

    Example:

    >>> from keras_vit.models.config import ViTConfig
    >>> config = ViTConfig.from_variant("mu/8", image_size=32, pre_norm=True)
    >>> "patch_embed.proj.bias" in timm_export_table(config)
    False
    """
    table = timm_name_table(config, qkv_bias=qkv_bias, patch_bias=not config.pre_norm)
    if config.fc_norm and config.pooling is None:
        table = {k: v for k, v in table.items() if not k.startswith("fc_norm.")}
    return table


def timm_state_dict(model, *, qkv_bias=True, config=None):
    """The timm state dict of a keras_vit model, as NumPy arrays (nothing written).

    Args:
        model: a keras_vit model timm can express (see `export_timm`).
        qkv_bias: bool. Write the q/k/v biases; False only when they are all zero.
            Defaults to True.
        config: optional `ViTConfig` of the model (read from it when None).

    Returns:
        dict {timm key: float32 np.ndarray}.

    Raises:
        ValueError: a variable timm has no place for (LoRA adapters, quantization scales),
            non-zero q/k/v biases with `qkv_bias=False`, or a patch-embedding bias under
            `pre_norm` without a position embedding to carry it.
    """
    config = config or model_config(model)
    return _state_dict(model, config, qkv_bias, model_values(model, "timm"))


def _state_dict(model, config, qkv_bias, values):
    """`timm_state_dict` of a model whose `ViTConfig` is `config` and whose weights are
    `values` (`model_values`, read once)."""
    left_out = set()
    if not qkv_bias:
        if not _all_zero(values, _qkv_bias_paths(config)):
            raise ValueError("qkv_bias=False, but the model's q/k/v biases are not all zero.")
        left_out.update(_qkv_bias_paths(config))
    if config.pre_norm:
        left_out.add(PATHS["patch_bias"])  # folded into the position embedding, if not zero
    table = timm_export_table(config, qkv_bias=qkv_bias)
    arrays = arrays_from_values(values, table, target="timm", model_name=model.name,
                                left_out=left_out)  # fmt: skip
    if config.position_embedding == "sincos2d":
        table = keras.ops.convert_to_numpy(model.patch_encoder.patch_position_embedding())
        arrays = _insert_after(arrays, "pos_embed", table.astype("float32"), before="patch_embed")
    if config.pre_norm and not _all_zero(values, [PATHS["patch_bias"]]):
        _fold_patch_bias(values[PATHS["patch_bias"]], config, arrays)
    return arrays


def _all_zero(values, paths):
    """Whether the weights at `paths` are all zero."""
    return all(not np.any(values[path]) for path in paths)


def _insert_after(arrays, key, value, before):
    """`arrays` with `key` placed before the first key starting with `before`."""
    out, placed = {}, False
    for name, array in arrays.items():
        if not placed and name.startswith(before):
            out[key], placed = value, True
        out[name] = array
    if not placed:
        out[key] = value
    return out


def _fold_patch_bias(bias, config, arrays):
    """timm's pre-norm models have no patch bias: add ours to the patch tokens' positions."""
    if "pos_embed" not in arrays:
        raise refuse(
            "pre_norm",
            True,
            "timm's pre-norm models have no patch-embedding bias, and this model's non-zero "
            "bias has no position embedding to go into (position_embedding=None)",
        )
    rows = _prefix_rows(config)
    posemb = arrays["pos_embed"].copy()
    posemb[:, rows:] += bias
    arrays["pos_embed"] = posemb


def timm_hub_config(model, exported, config=None):
    """timm's Hub `config.json` (a dict) for an exported model: `architecture`, `num_classes`,
    `model_args` and the model's input spec as `pretrained_cfg` (`resolve_data_config` reads
    it), plus the class names of its head as timm's top-level `label_names` (ImageNet-1k's as
    WordNet ids with `label_descriptions`: `keras_vit.weights.timm.input_spec.timm_label_fields`),
    which timm moves into the model's `pretrained_cfg` and `from_timm` reads back. `config`:
    the model's `ViTConfig` (read from it when None)."""
    return _hub_config(exported, config or model_config(model))


def _hub_config(exported, config):
    """`timm_hub_config` of a model whose `ViTConfig` is `config`."""
    pretrained = config.preprocessing.to_timm(config.image_size, config.num_channels)
    num_classes = exported.kwargs["num_classes"]
    pretrained.update(num_classes=num_classes, architecture=exported.name)
    names = config.class_names if config.include_top else None
    labels = timm_label_fields(names if names and len(names) == num_classes else None)
    return {
        "architecture": exported.name,
        "num_classes": num_classes,
        **labels,
        "model_args": exported.kwargs,
        "pretrained_cfg": pretrained,
    }


def export_timm(model, path, *, overwrite=False, config_json=None):
    """Writes a keras_vit model as a timm state dict (`.safetensors`) and names the timm model.

    Every family `keras_vit.from_timm` reads exports back (plain and AugReg ViTs, DeiT and
    distilled DeiT, DeiT III, GAP and register models, DINOv2, CLIP with QuickGELU, SigLIP
    with its MAP head, qk-norm, LayerScale, and timm's R26 / R50 / root-only hybrids), at the
    model's image size and class count (`include_top=False`: `num_classes=0`), as do
    keras_vit's own models where timm has the same architecture (`keras_vit.ViT("S/16",
    approximate_gelu=False)`; timm's GELU is exact, so a model with the tanh GELU gets
    `act_layer="gelu_tanh"`).

    Args:
        model: a keras_vit model (`keras_vit.ViT`, `from_timm`, a loaded `.keras` file).
        path: str or path-like. The `.safetensors` file to write.
        overwrite: bool. Replace an existing file. Defaults to False.
        config_json: None, True or a path: also write timm's Hub `config.json`
            (`timm_hub_config`: `architecture`, `model_args` and the model's input spec as
            `pretrained_cfg`, so that `timm.data.resolve_data_config({},
            pretrained_cfg=...)` gives the preprocessing keras_vit used, and the head's class
            names as `label_names`, read back by `from_timm`); True writes it
            beside `path`. Refused, before anything is written, when it exists and `overwrite`
            is False, or when the spec has no timm equivalent. Defaults to None.

    Returns:
        `TimmModel(name, kwargs)`: `timm.create_model(name, pretrained=False, **kwargs)`
        builds the model, `load_state_dict(safetensors.torch.load_file(path))` loads the
        file strictly, and its outputs (in eval mode, on NCHW images) equal ours.

    Raises:
        FileExistsError: `path` exists and `overwrite` is False.
        ValueError: what export_timm cannot write (a `backbone` stem, `representation_size`,
            `classifier_activation`, another LayerNorm epsilon or ResNet stem than timm's,
            LoRA adapters or quantized weights), naming the option and its value; or a state
            dict whose keys and shapes are not exactly those of the timm model it names
            (checked against timm's model on the meta device where timm imports, keras_vit's
            declaration of it otherwise: `keras_vit.weights.timm.verify`). Nothing is
            written.

    Example:

    >>> import os, tempfile
    >>> from keras_vit.models import ViT
    >>> model = ViT("mu/8", image_size=32, num_classes=10, approximate_gelu=False)
    >>> name, kwargs = export_timm(model, os.path.join(tempfile.mkdtemp(), "mu.safetensors"))
    >>> name, kwargs["embed_dim"], kwargs["num_classes"], kwargs["img_size"]
    ('vit_base_patch16_224', 32, 10, 32)
    """
    overwrite = check_bool(overwrite, "overwrite")
    config = model_config(model)
    check_timm_expressible(config)  # before reading the q/k/v biases (q/v-only: no key bias)
    path = check_destination(path, overwrite)
    values = model_values(model, "timm")  # every weight, read once
    exported, qkv_bias = _named_model(config, _all_zero(values, _qkv_bias_paths(config)))
    if config_json is not None:  # checked (and made) before anything is written
        if config_json is True:
            config_json = os.path.join(os.path.dirname(os.path.abspath(path)), "config.json")
        config_json = check_destination(
            config_json,
            overwrite,
            suffixes=(".json",),
            content="a JSON file",
            argument="config_json",
        )
        hub_config = _hub_config(exported, config)
    arrays = _state_dict(model, config, qkv_bias, values)
    # The named architecture must have exactly these keys and shapes (timm's model on the meta
    # device, or keras_vit's declaration of it): else a ValueError, and nothing is written.
    check_timm_state_dict(exported.name, exported.kwargs, arrays, tokens=_tokens(config))
    metadata = {
        "format": "pt",
        "timm_model": exported.name,
        "timm_kwargs": json.dumps(exported.kwargs),
    }
    write_state_dict(arrays, path, overwrite=overwrite, metadata=metadata)
    if config_json is not None:
        write_json_file(config_json, hub_config)
    return exported


__all__ = [
    "TimmModel",
    "export_timm",
    "timm_hub_config",
    "timm_arguments",
    "timm_export_table",
    "timm_model_for",
    "timm_state_dict",
]
