"""Hugging Face `transformers` ViT checkpoints -> keras_vit models: `from_huggingface(path)`.

Reads a `save_pretrained` folder of `ViTModel`, `ViTForImageClassification` (or the encoder of
`ViTForMaskedImageModeling`): `config.json` becomes the `keras_vit.ViT` arguments, and the weights
(`model.safetensors`, a sharded `model.safetensors.index.json`, or `pytorch_model.bin` through
`torch.load(weights_only=True)`) load through the strict name table below. `transformers` itself
is not needed.

What the model returns, against `transformers`' outputs:

- a `ViTForImageClassification` folder: its `logits` (the classifier on the class token of the
  final LayerNorm);
- a `ViTModel` folder: `include_top=False` with the default `pooling="token"` returns
  `last_hidden_state[:, 0]`, and `pooling=None` the whole `last_hidden_state`. The pooler
  (dense + tanh on that class token, `pooler_output`) is our `pre_logits` layer: pass
  `num_classes` and `representation_size` (its width) to keep it, with a new zero head on top;
  otherwise it is left out (logged).

Numerics follow `config.json`: `hidden_act="gelu"` is the exact erf GELU, `"gelu_new"`,
`"gelu_pytorch_tanh"` and `"gelu_fast"` the tanh approximation; `layer_norm_eps` (1e-12 by
default). Another `image_size` than the checkpoint's resamples the position embedding exactly as
`ViTModel(..., interpolate_pos_encoding=True)` does at every call (bicubic, `A = -0.75`, no
antialiasing: `keras_vit.layers.bicubic`); here it is done once, at load time.
"""

import json
import logging
import os
import re

from keras_vit.layers.position_embedding import resample_position_embedding
from keras_vit.models import arguments as A
from keras_vit.models.config import ViTConfig
from keras_vit.models.encoder import BLOCK_NAME, build_model
from keras_vit.weights import loading as L
from keras_vit.weights.hub import download_snapshot, is_repo_id, split_repo
from keras_vit.weights.input_specs import attach_huggingface_spec
from keras_vit.weights.registry import huggingface_reader, huggingface_types
from keras_vit.weights.state_dict import read_state_dict

logger = logging.getLogger(__name__)

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
ARCHITECTURES = ("ViTModel", "ViTForImageClassification", "ViTForMaskedImageModeling")
# hidden_act -> approximate_gelu (transformers' ACT2FN names for GELU).
ACTIVATIONS = {
    "gelu": False,
    "gelu_python": False,
    "gelu_new": True,
    "gelu_pytorch_tanh": True,
    "gelu_fast": True,
}
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


def _legacy_name(key):
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
    out = {}
    for key, value in arrays.items():
        key = key[len("vit.") :] if key.startswith("vit.") else key
        out[_legacy_name(key)] = value
    return out


def read_config(path):
    """The `config.json` of a `save_pretrained` folder, as a dict (names the file on errors)."""
    folder = _folder(path)
    config_path = os.path.join(folder, "config.json")
    if not os.path.isfile(config_path):
        raise FileNotFoundError(
            f"No config.json in {folder!r}. Expected a folder written by transformers' "
            "save_pretrained (config.json and model.safetensors or pytorch_model.bin)."
        )
    try:
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{config_path!r} is not valid JSON: {error}") from error
    if not isinstance(config, dict):
        raise ValueError(f"{config_path!r} holds {type(config).__name__}, expected an object.")
    return config


def _folder(path, revision=None, cache_dir=None, force_download=False):
    if is_repo_id(path):
        repo_id, revision = split_repo(path, revision)
        return download_snapshot(
            repo_id, revision=revision, cache_dir=cache_dir, force_download=force_download
        )
    if revision is not None:
        raise ValueError(f"revision={revision!r} is for a Hub repo id; {path!r} is a folder.")
    if force_download:
        raise ValueError(
            f"force_download=True is for a Hub repo id (downloaded again); {path!r} is a folder."
        )
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"Hugging Face model folder not found: {path!r}")
    if not os.path.isdir(path):
        raise NotADirectoryError(
            f"Expected a save_pretrained folder (config.json + weights). Received the file {path!r}"
        )
    return path


def _weights_file(folder):
    for name in WEIGHT_FILES:
        candidate = os.path.join(folder, name)
        if os.path.isfile(candidate):
            return candidate
    raise FileNotFoundError(f"No weights in {folder!r}: expected one of {', '.join(WEIGHT_FILES)}.")


def _pair(value, name, config_path):
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    pair = isinstance(value, (list, tuple)) and len(value) == 2
    if pair and all(isinstance(v, int) for v in value):
        return tuple(value)
    raise ValueError(f"{config_path}: {name} must be an int or a pair of ints. Received: {value!r}")


def check_architectures(config, supported, source="config.json"):
    """Raises a ValueError naming the first of `config["architectures"]` not in `supported`."""
    unknown = [a for a in config.get("architectures") or () if a not in supported]
    if unknown:
        raise ValueError(
            f"{source}: architecture {unknown[0]!r} is not supported. Expected one of {supported}."
        )


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
    try:
        arguments.update(
            variant="B/16",  # every size below overrides it
            num_layers=int(config.get("num_hidden_layers", 12)),
            hidden_dim=int(config.get("hidden_size", 768)),
            mlp_dim=int(config.get("intermediate_size", 3072)),
            num_heads=int(config.get("num_attention_heads", 12)),
            patch_size=_pair(config.get("patch_size", 16), "patch_size", source),
            image_size=_pair(config.get("image_size", 224), "image_size", source),
            num_channels=int(config.get("num_channels", 3)),
            layer_norm_epsilon=float(config.get("layer_norm_eps", 1e-12)),
        )
    except (TypeError, ValueError) as error:
        raise ValueError(f"{source}: {error}") from error
    arguments["_qkv_bias"] = bool(config.get("qkv_bias", True))
    return arguments


_norm, _dense = L.torch_norm, L.torch_linear


def head_arguments(arrays, num_classes, kwargs):
    """`(num_classes, checkpoint classes, include_top)` of a checkpoint with an optional
    `classifier`: the classifier's count unless `num_classes` is given; a head when there
    is a count, unless `kwargs` (popped) says `include_top`."""
    classifier = arrays.get("classifier.weight")
    found = None
    if classifier is not None and len(L.shape_of(classifier)) == 2:
        found = int(L.shape_of(classifier)[0])
    num_classes = found if num_classes is None else num_classes
    return num_classes, found, A.head_arguments(num_classes, kwargs.pop("include_top", None))[1]


def head_arguments_of(num_classes, kwargs):
    """`(num_classes, include_top)` of the user's `num_classes` and `kwargs` (`include_top`
    popped): 0 or None classes mean no head (`keras_vit.models.arguments.head_arguments`)."""
    return A.head_arguments(num_classes, kwargs.pop("include_top", None))


def family_config(arguments, hf, num_classes, include_top, kwargs):
    """The `ViTConfig` of a family module: `arguments` (with `variant`), the head, a name
    from `config.json`'s `_name_or_path`, and the caller's other `kwargs` (which win)."""
    arguments = dict(arguments)
    return ViTConfig.from_variant(
        arguments.pop("variant"),
        **{
            **arguments,
            "num_classes": num_classes or 1000,
            "include_top": include_top,
            "name": kwargs.pop("name", None) or _model_name(hf),
            **kwargs,
        },
    )


def classifier_skip(key, shape, config, found):
    """The log line of a `classifier.*` array left out (no head, or one of another count)."""
    if key.startswith("classifier.") and (not config.include_top or found != config.num_classes):
        why = "no head" if not config.include_top else f"a new {config.num_classes}-way head"
        return f"dropped {key} {shape}: the model has {why}"
    return None


def skip_notes(arrays, config, found, dropped):
    """The log lines of the arrays a reader leaves out, by key.

    `dropped(key)`: why the family leaves `key` out (the end of its line, e.g.
    `" (recomputed)"`), or None; then `classifier.*` arrays the model has no place for
    (`classifier_skip`, `found` the checkpoint's class count).
    """
    skip = {}
    for key, value in arrays.items():
        shape = L.shape_of(value)
        if why := dropped(key):
            skip[key] = f"dropped {key} {shape}{why}"
        elif note := classifier_skip(key, shape, config, found):
            skip[key] = note
    return skip


def embedding_rows(position_transform):
    """Name-table rows of the embeddings transformers' ViT, DINOv2 and BEiT share: the class
    token, the position table (through `position_transform`) and the patch projection."""
    return {
        "embeddings.cls_token": ("patch_encoder/class_embedding", L.IDENTITY),
        "embeddings.position_embeddings": ("patch_encoder/position_embeddings", position_transform),
        "embeddings.patch_embeddings.projection.weight": ("patch_encoder/kernel", L.CONV),
        "embeddings.patch_embeddings.projection.bias": ("patch_encoder/bias", L.IDENTITY),
    }


def attention_rows(path, projections, output, biases=("query", "key", "value")):
    """Name-table rows of one block's attention: the torch Linear prefixes of the query, key and
    value projections (`projections`, a dict {"query": prefix, ...}) and of the output; q/k/v
    biases for the names in `biases` (a checkpoint without some has no rows for them)."""
    attention = f"{path}/attention"
    rows = {}
    for name, source in projections.items():
        rows[f"{source}.weight"] = (f"{attention}/{name}/kernel", L.HEADS_IN_WEIGHT)
        if name in biases:
            rows[f"{source}.bias"] = (f"{attention}/{name}/bias", L.HEADS_IN_BIAS)
    rows[f"{output}.weight"] = (f"{attention}/attention_output/kernel", L.HEADS_OUT_WEIGHT)
    rows[f"{output}.bias"] = (f"{attention}/attention_output/bias", L.IDENTITY)
    return rows


def vit_attention_rows(key, path, biases=("query", "key", "value")):
    """`attention_rows` under transformers 4's ViT names (`{key}.attention.attention.query`,
    `{key}.attention.output.dense`), which ViT and BEiT files keep."""
    projections = {name: f"{key}.attention.attention.{name}" for name in ("query", "key", "value")}
    return attention_rows(path, projections, f"{key}.attention.output.dense", biases)


CLASSIFIER = ("classifier.weight", "classifier.bias")


def load_arrays(model, arrays, table, weights_path, logger, **options):
    """Loads a transformers state dict `arrays` into `model` through the name `table`.

    The one loading step of every Hugging Face reader: a checkpoint without the classifier
    (`CLASSIFIER`) leaves the model's new head zero-initialised (`without_new_head`);
    `options` are `keras_vit.weights.loading.load_state_dict`'s (`fills`, `skip`, ...).
    """
    return L.load_state_dict(
        model,
        arrays,
        L.without_new_head(table, arrays, CLASSIFIER, logger),
        source=repr(weights_path),
        logger=logger,
        **options,
    )


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
        key, path = f"encoder.layer.{i}", BLOCK_NAME.format(i)
        table.update(_norm(f"{key}.layernorm_before", f"{path}/attention_norm"))
        table.update(vit_attention_rows(key, path, ("query", "key", "value") if qkv_bias else ()))
        table.update(_norm(f"{key}.layernorm_after", f"{path}/mlp_norm"))
        table.update(_dense(f"{key}.intermediate.dense", f"{path}/mlp_dense_1"))
        table.update(_dense(f"{key}.output.dense", f"{path}/mlp_dense_2"))
    table.update(_norm("layernorm", "encoder_norm"))
    if config.include_top:
        if config.representation_size:
            table.update(_dense("pooler.dense", "pre_logits"))
        table.update(_dense("classifier", "head"))
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


def from_huggingface(
    path,
    *,
    image_size=None,
    num_classes=None,
    revision=None,
    cache_dir=None,
    force_download=False,
    **kwargs,
):
    """Builds a keras_vit model from a transformers ViT `save_pretrained` folder.

    Folders of the other families (`keras_vit.weights.registry.huggingface_types()`) go to
    their module (SigLIP 2 NaFlex
    vision towers: `keras_vit.families.naflex.huggingface_siglip2`, a NaFlex model; DINOv3
    `DINOv3ViTModel`: `keras_vit.families.eva.huggingface_dinov3`; DINOv2 `Dinov2Model` and
    with registers: `keras_vit.families.dinov2.huggingface`; `BeitModel`:
    `keras_vit.families.beit.huggingface`).

    A string that is not an existing folder is a Hub repo id (`"google/vit-base-patch16-224"`,
    `"hf://<org>/<repo>@<revision>"`): `huggingface_hub.snapshot_download` (the `hub` extra)
    fetches its `config.json`, `*.safetensors` and `preprocessor_config.json` (never a pickle)
    into the standard Hugging Face cache, offline from it with `HF_HUB_OFFLINE=1`.

    Args:
        path: str or path-like. A folder with `config.json` and `model.safetensors` (or
            `model.safetensors.index.json` with its shards, or `pytorch_model.bin`, which
            needs PyTorch) of `ViTModel` or `ViTForImageClassification`; or a Hub repo id.
        revision: optional str. The Hub branch, tag or commit of a repo id (as
            `@<revision>` in it).
        cache_dir: optional path. The Hub cache folder; defaults to huggingface_hub's.
        force_download: bool. Download a repo id's files again even when they are cached,
            replacing the cached copies (as transformers' `from_pretrained`). Defaults to
            False.
        image_size: optional int or (height, width). Defaults to `config.json`'s; another
            one resamples the position embedding as `interpolate_pos_encoding=True` does.
        num_classes: optional int. Defaults to the classifier's class count
            (`ViTForImageClassification`; `id2label` names them), or no head for a
            `ViTModel`. Another count gives a new zero-initialised head.
        **kwargs: other `keras_vit.ViT` arguments (`include_top`, `pooling`,
            `representation_size` to keep a `ViTModel`'s pooler, dropout rates, ...).
            Dropout rates are not read from `config.json`.

    Returns:
        A functional `keras.Model` taking `(B, H, W, C)` channels-last images normalised as
        the checkpoint's image processor does (mean 0.5, std 0.5 for Google's ViTs: the
        [-1, 1] of `keras_vit.preprocess_input`). It carries that input spec
        (`model.preprocessing`, `model.preprocessor`): the folder's `preprocessor_config.json`,
        else the model type's image processor defaults
        (`keras_vit.weights.input_specs.HF_DEFAULTS`); `preprocessing=` overrides it.

    Raises:
        FileNotFoundError: the folder, `config.json` or the weights are missing.
        ValueError: an unsupported config value (naming it), or weights that do not fit
            (one message listing every missing, unexpected or mis-shaped array).

    Example:

    >>> model = from_huggingface("vit-base-patch16-224")  # doctest: +SKIP
    """
    A.check_size_arguments(
        image_size=image_size, num_classes=num_classes, patch_size=kwargs.get("patch_size")
    )
    folder = _folder(path, revision, cache_dir, force_download)
    hf = read_config(folder)
    given = "preprocessing" in kwargs  # else the folder's preprocessor_config.json (issue 42)
    loader = huggingface_reader(hf.get("model_type"))  # a registered family's (keras_vit.families)
    if loader is not None:
        if image_size is not None:
            kwargs["image_size"] = image_size
        model = loader(folder, hf, num_classes=num_classes, **kwargs)
        return attach_huggingface_spec(model, folder, hf, given)
    arguments = vit_arguments(hf, source=os.path.join(folder, "config.json"))
    qkv_bias = arguments.pop("_qkv_bias")
    weights_path = _weights_file(folder)
    arrays = normalize_names(read_state_dict(weights_path))
    classifier = arrays.get("classifier.weight")
    if num_classes is None and classifier is not None and classifier.ndim == 2:
        num_classes = int(classifier.shape[0])
    num_classes, include_top = A.head_arguments(num_classes, kwargs.pop("include_top", None))
    config = ViTConfig.from_variant(
        arguments.pop("variant"),
        **{
            **arguments,
            "image_size": arguments["image_size"] if image_size is None else image_size,
            "num_classes": num_classes,
            "include_top": include_top,
            "name": kwargs.pop("name", None) or _model_name(hf),
            **kwargs,
        },
    )
    if config.include_top and config.representation_size and "pooler.dense.weight" in arrays:
        act = hf.get("pooler_act", "tanh")
        if act != "tanh":
            raise ValueError(
                f"{folder}: pooler_act {act!r}; keras_vit's pre_logits is dense + tanh."
            )
    model = build_model(config)
    table = huggingface_name_table(config, qkv_bias=qkv_bias)
    fills = {} if qkv_bias else L.zero_qkv_biases(config.num_layers)
    load_arrays(
        model, arrays, table, weights_path, logger, fills=fills, skip=_skips(arrays, config)
    )
    labels = hf.get("id2label")
    if labels and config.include_top and len(labels) == config.num_classes:
        logger.info("%d classes, e.g. %s", len(labels), list(labels.values())[:3])
    return attach_huggingface_spec(model, folder, hf, given)


def _model_name(hf):
    name = hf.get("_name_or_path") or "vit_huggingface"
    return re.sub(r"[^0-9A-Za-z_]+", "_", os.path.basename(str(name).rstrip("/"))) or "vit"
