"""keras_vit models -> Hugging Face transformers: `export_huggingface(model, folder)`.

The reverse of `keras_vit.weights.huggingface.reader.from_huggingface`: a `save_pretrained` folder
(`config.json` + `model.safetensors`) of transformers' ViT (`model_type` `"vit"`), the family
`from_huggingface` reads. A model with a head becomes a `ViTForImageClassification` (its
`logits` are our outputs), one without a `ViTModel` (its `last_hidden_state` is our
`pooling=None` output; `[:, 0]` our `pooling="token"`, the mean of `[:, 1:]` our `"gap"`). The
weights are named by `huggingface_name_table` (transformers 4 names, which transformers 5 still
writes and reads), read backwards by `keras_vit.weights.writing`.

transformers' ViT is the original architecture: what it has no option for (registers, a
distillation token, LayerScale, qk-norm, pre-norm, `fc_norm`, a MAP head, a hybrid stem,
`representation_size` under a head, `classifier_activation`, `dynamic_image_size`) is a
`ValueError` naming the option and its value, before anything is written. A position embedding
without a class-token row (`prefix_position_embedding=False`, or the fixed `"sincos2d"` table)
is written with a zero class-token row: the same sums.

`AutoModel.from_pretrained(folder)` of a headless export builds a `ViTModel` with a pooler, which
this folder has no weights for (transformers initialises it and warns); load it with
`ViTModel.from_pretrained(folder, add_pooling_layer=False)` for a strict load.
"""

import json
import os
import shutil

import keras
import numpy as np

from keras_vit.layers._checks import check_bool
from keras_vit.saving import (
    check_folder_name,
    check_path_argument,
    check_writable,
    file_mode,
    staging_folder,
)
from keras_vit.weights import writing as W
from keras_vit.weights.export_options import SAME_OUTPUTS, check_unwritten_options_default
from keras_vit.weights.huggingface.verify import check_huggingface_state_dict
from keras_vit.weights.huggingface.vit import huggingface_name_table
from keras_vit.weights.loading import zero_qkv_biases
from keras_vit.weights.registry import huggingface_writer

CONFIG_FILE = "config.json"
PROCESSOR_FILE = "preprocessor_config.json"  # the model's input spec
WEIGHTS_FILE = "model.safetensors"
POSITIONS = "embeddings.position_embeddings"


def _refuse(option, value, why):
    return ValueError(f"transformers' ViT cannot express {option}={value!r}: {why}.")


# Options transformers' ViT lacks: (field, value that is fine, why).
_PLAIN = (
    ("num_register_tokens", 0, "it has no register tokens"),
    ("distillation_token", False, "DeiT's distillation token is another model type (deit)"),
    ("layer_scale_init_value", None, "its blocks have no LayerScale"),
    ("qk_norm", False, "its attention has no qk-norm"),
    ("norm", "layernorm", "its norms are LayerNorms"),
    ("patch_norm", False, "it has no norm on the patch embeddings"),
    ("final_norm", True, "its final LayerNorm is always there"),
    ("pre_norm", False, "it has no LayerNorm before the blocks"),
    ("fc_norm", False, "its final LayerNorm is on the tokens, not the pooled vector"),
    ("dynamic_image_size", False, "it resamples positions without antialiasing "
     "(interpolate_pos_encoding), ours as timm does"),
    ("representation_size", None, "its classifier reads the class token, not the pooler"),
    ("classifier_activation", None, "it returns logits"),
    ("backbone", None, "it has no CNN stem (the hybrid ViTHybrid is not read by keras_vit)"),
    ("resnet_units", None, "it has no CNN stem (the hybrid ViTHybrid is not read by keras_vit)"),
    ("stem", None, "it has no CNN stem"),
    ("block_kind", "pre", "its blocks are pre-norm, one attention and one MLP branch "
     "(keras_vit.layers.TransformerBlock)"),
    ("key_bias", True, "its query, key and value all have biases"),
    ("mlp", "mlp", "its MLP is dense-GELU-dense"),
    ("mlp_inner_norm", False, "its MLP has no inner norm"),
    ("attention_inner_norm", False, "its attention has no inner norm"),
    ("rotary_embedding", None, "it has no rotary position embeddings"),
    ("relative_position_bias", None, "it has no relative position bias"),
    ("num_parallel", 1, "its blocks have one attention and one MLP branch"),  # (block_kind)
    ("num_key_value_heads", None, "its attention has as many key / value heads as queries"),
    ("attention_only_layer_scale", False, "it has no LayerScale"),
    ("naflex", False, "it takes images, not NaFlex patch batches"),
    ("map_num_heads", None, "it has no attention-pooling head"),
    ("map_mlp_dim", None, "it has no attention-pooling head"),
    ("map_prefix_tokens", False, "it has no attention-pooling head"),
)  # fmt: skip


# What `huggingface_config` and the name table write (or the checks above decide); any other
# option off its default is refused (an allow-list: a new option is refused until written).
_WRITTEN = (
    "patch_size", "num_layers", "hidden_dim", "mlp_dim", "num_heads", "image_size",
    "num_channels", "num_classes", "include_top", "pooling", "class_token",
    "position_embedding", "prefix_position_embedding", "approximate_gelu", "activation",
    "layer_norm_epsilon",
) + SAME_OUTPUTS  # fmt: skip


def check_huggingface_expressible(config):
    """Raises a `ValueError` naming the first option of `config` transformers' ViT lacks."""
    for field, fine, why in _PLAIN:
        value = getattr(config, field)
        if value != fine and not (fine is None and value is None):
            shown = getattr(value, "name", value) if field == "backbone" else value
            raise _refuse(field, shown, why)
    if not config.class_token:
        raise _refuse("class_token", False, "it always has a class token")
    if config.position_embedding is None:
        raise _refuse("position_embedding", None, "it always adds a learned position embedding")
    if config.include_top and config.pooling != "token":
        raise _refuse(
            "pooling", config.pooling, "ViTForImageClassification classifies the class token"
        )
    if config.pooling == "map":
        raise _refuse("pooling", "map", "it has no attention-pooling head")
    check_unwritten_options_default(
        config,
        _WRITTEN + tuple(field for field, _, _ in _PLAIN),
        _refuse,
        "export_huggingface writes transformers' ViT, which has no form for it",
    )


def huggingface_config(config, *, qkv_bias=True):
    """The transformers `config.json` (a dict) of the model `config` describes.

    Example:

    >>> from keras_vit.models.config import ViTConfig
    >>> hf = huggingface_config(ViTConfig.from_variant("mu/8", image_size=32, num_classes=3))
    >>> hf["architectures"], hf["hidden_size"], hf["hidden_act"], len(hf["id2label"])
    (['ViTForImageClassification'], 32, 'gelu_pytorch_tanh', 3)
    """
    if config.activation == "quick_gelu":
        activation = "quick_gelu"
    else:
        activation = "gelu_pytorch_tanh" if config.approximate_gelu else "gelu"

    def int_or_list(pair):
        return pair[0] if pair[0] == pair[1] else list(pair)

    hf = {
        "architectures": ["ViTForImageClassification" if config.include_top else "ViTModel"],
        "model_type": "vit",
        "hidden_size": config.hidden_dim,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "intermediate_size": config.mlp_dim,
        "hidden_act": activation,
        "hidden_dropout_prob": config.dropout_rate,
        "attention_probs_dropout_prob": config.attention_dropout_rate,
        "layer_norm_eps": config.layer_norm_epsilon,
        "image_size": int_or_list(config.image_size),
        "patch_size": int_or_list(config.patch_size),
        "num_channels": config.num_channels,
        "qkv_bias": qkv_bias,
        "initializer_range": 0.02,
        "dtype": "float32",
    }
    if config.include_top:  # the head's class names (from_huggingface reads them back)
        names = config.class_names
        if not names or len(names) != config.num_classes:
            names = [f"LABEL_{i}" for i in range(config.num_classes)]
        hf["id2label"] = {str(i): name for i, name in enumerate(names)}
        hf["label2id"] = {name: i for i, name in enumerate(names)}
    if isinstance(config.name, str) and config.name:
        hf["_name_or_path"] = config.name
    return hf


def _position_embedding(model, config):
    """transformers' `(1, 1 + N, D)` position embedding: a zero class row where ours has none."""
    encoder = model.patch_encoder
    if config.position_embedding == "learned" and config.prefix_position_embedding:
        return keras.ops.convert_to_numpy(encoder.position_embeddings).astype("float32")
    patches = keras.ops.convert_to_numpy(encoder.patch_position_embedding()).astype("float32")
    return np.concatenate([np.zeros_like(patches[:, :1]), patches], axis=1)


def huggingface_state_dict(model, config=None):
    """The transformers ViT state dict of a keras_vit model, as NumPy arrays (nothing written).

    Args:
        model: a keras_vit model transformers' ViT can express (see `export_huggingface`).
        config: optional `ViTConfig` of the model (read from it when None).

    Returns:
        dict {name: float32 np.ndarray}, named as `ViTForImageClassification` (with a head:
        `vit.` prefixes) or `ViTModel` saves them; without q/k/v biases when they are all
        zero (transformers' `qkv_bias=False`).
    """
    return _state_dict(model, config or W.model_config(model))


def _state_dict(model, config):
    """`huggingface_state_dict` of a model whose `ViTConfig` is `config`."""
    check_huggingface_expressible(config)
    values = W.model_values(model, "Hugging Face transformers")  # every weight, read once
    biases = zero_qkv_biases(config.num_layers)
    qkv_bias = any(np.any(values[path]) for path in biases)  # all zero: qkv_bias=False
    table = huggingface_name_table(config, qkv_bias=qkv_bias)
    positions, _ = table.pop(POSITIONS)
    left_out = {*biases, positions} if config.position_embedding == "learned" else {*biases}
    arrays = W.arrays_from_values(values, table, target="Hugging Face transformers",
                                  model_name=model.name, left_out=left_out)  # fmt: skip
    arrays = {POSITIONS: _position_embedding(model, config), **arrays}
    if not config.include_top:
        return arrays
    return {k if k.startswith("classifier.") else f"vit.{k}": v for k, v in arrays.items()}


def check_export_folder(folder, overwrite):
    """`folder` as a str after checking every file of the export can be written there.

    All before the first byte is written: the folder's name, each target (`config.json`,
    `model.safetensors`, `preprocessor_config.json`: a file or nothing, symbolic links counted
    as existing), permissions.
    """
    folder = check_path_argument(folder, "folder")
    check_folder_name(folder, "config.json and model.safetensors", "folder")
    if os.path.lexists(folder) and not os.path.isdir(folder):
        raise NotADirectoryError(f"Expected a folder to write. Received the file {folder!r}")
    targets = [os.path.join(folder, n) for n in (CONFIG_FILE, WEIGHTS_FILE, PROCESSOR_FILE)]
    for target in targets:
        if os.path.isdir(target) and not os.path.islink(target):
            raise IsADirectoryError(
                f"{target!r} is a folder; export_huggingface writes a file there and never "
                "replaces a folder, even with overwrite=True. Remove it or choose another folder."
            )
    existing = [os.path.basename(t) for t in targets if os.path.lexists(t)]
    if existing and not overwrite:
        raise FileExistsError(
            f"{folder!r} already holds {', '.join(existing)}. Pass overwrite=True to replace them."
        )
    check_writable(folder, "export folder")
    return folder


def export_huggingface(model, folder, *, overwrite=False):
    """Writes a keras_vit model as a transformers `save_pretrained` folder.

    The folder holds `config.json` and `model.safetensors` of transformers' ViT
    (`model_type` `"vit"`, the family `keras_vit.from_huggingface` reads), and, for a model
    whose input spec is not the default `[-1, 1]` (`model.preprocessing`: a DeiT or DINOv2
    import), `preprocessor_config.json` (`PreprocessingConfig.to_huggingface`: transformers'
    `AutoImageProcessor` then gives the inputs keras_vit used, within the resize tolerance of
    docs/weights.md); without one, transformers' ViT defaults ([-1, 1]) and
    `from_huggingface`'s read the same spec back:
    `ViTForImageClassification` for a model with a head, `ViTModel` without one.
    `transformers.AutoModelForImageClassification.from_pretrained(folder)` (or
    `ViTModel.from_pretrained(folder, add_pooling_layer=False)`) loads it, and its outputs
    equal ours (on NCHW images); `from_huggingface(folder)` reads it back.

    A model of a class a family registered a writer for (`ModelFamily.huggingface_writers`) is
    written by that family: a `keras_vit.models.MaskedAutoencoder` becomes a
    `ViTMAEForPreTraining` folder (encoder and decoder). Every other model class is refused.

    Args:
        model: a keras_vit model with the original ViT architecture (e.g.
            `keras_vit.ViT("B/16")`, `from_huggingface`, or a `from_timm` ViT / DeiT), or a
            `MaskedAutoencoder` whose encoder is one.
        folder: str or path-like. The folder to write (created).
        overwrite: bool. Replace the files of an existing folder. Defaults to False.

    Returns:
        The folder, as a str.

    Raises:
        FileExistsError: the folder holds a `config.json` or `model.safetensors` and
            `overwrite` is False.
        IsADirectoryError: `config.json` or `model.safetensors` there is a folder.
        TypeError: `folder` is no path.
        ValueError: an option transformers' ViT lacks (registers, LayerScale, a hybrid stem,
            ...), naming it and its value, or LoRA / quantized weights. Nothing is written.

    Example:

    >>> import os, tempfile
    >>> from keras_vit.models import ViT
    >>> folder = export_huggingface(ViT("mu/8", image_size=32, num_classes=3),
    ...                             os.path.join(tempfile.mkdtemp(), "vit"))
    >>> sorted(os.listdir(folder))
    ['config.json', 'model.safetensors']
    """
    overwrite = check_bool(overwrite, "overwrite")
    writer = huggingface_writer(model)  # a family's own model class (keras_vit.families)
    if writer is not None:
        return writer(model, folder, overwrite=overwrite)
    folder = check_export_folder(folder, overwrite)
    config = W.model_config(model)
    arrays = _state_dict(model, config)
    hf = huggingface_config(
        config, qkv_bias=any(".attention.attention.query.bias" in k for k in arrays)
    )
    return write_export_folder(folder, arrays, hf, config)


def write_export_folder(folder, arrays, hf_config, config):
    """Writes `model.safetensors` (`arrays`), `config.json` (`hf_config`) and, where the
    model's input spec (`config.preprocessing`) is not the default or an earlier export left
    one, `preprocessor_config.json` into the checked `folder`, all or nothing: each file is
    staged beside its target, given the mode a new file gets there (the umask), then moved
    over it. First the model `hf_config` describes must have exactly the keys and shapes of
    `arrays` (`keras_vit.weights.huggingface.verify`: transformers' model on the meta device,
    or the declaration), else a `ValueError` and nothing is written. Returns `folder`."""
    check_huggingface_state_dict(hf_config, arrays)
    files = {CONFIG_FILE: hf_config}
    processor = os.path.join(folder, PROCESSOR_FILE)
    if config.preprocessing != type(config.preprocessing)() or os.path.lexists(processor):
        # The model's own input spec as transformers' image processor config; an
        # earlier export's file is replaced too, never left describing another model.
        files[PROCESSOR_FILE] = config.preprocessing.to_huggingface(
            config.image_size, config.num_channels
        )
    staging = staging_folder(os.path.join(folder, ".export"), folder)
    try:
        W.write_state_dict(arrays, os.path.join(staging, WEIGHTS_FILE))
        for name, value in files.items():
            with open(os.path.join(staging, name), "w", encoding="utf-8") as f:
                json.dump(value, f, indent=2, sort_keys=True)
        for name in (WEIGHTS_FILE, *files):
            target = os.path.join(folder, name)
            os.chmod(os.path.join(staging, name), file_mode(target))
            os.replace(os.path.join(staging, name), target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


__all__ = [
    "check_export_folder",
    "export_huggingface",
    "huggingface_config",
    "huggingface_state_dict",
    "write_export_folder",
]
