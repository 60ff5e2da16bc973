"""What every Hugging Face `transformers` reader shares: the folder (or Hub repo) and its
`config.json`, the weights file, head arguments, skip notes, name-table rows, the loading step.

The readers are `keras_vit.weights.huggingface.vit` (transformers' `ViTModel`, read by
`from_huggingface` when no registered family claims the `model_type`) and the families' own
(`keras_vit/families/<name>/huggingface*.py`, by `model_type`), which build on this module.
"""

import os
import re

from keras_vit.models import arguments as A
from keras_vit.models.config import ViTConfig
from keras_vit.models.variable_paths import PATHS
from keras_vit.weights import loading as L
from keras_vit.weights.config_types import HF_CONFIG_FIELDS, check_fields, read_json_object
from keras_vit.weights.hub import download_snapshot, is_repo_id, split_repo
from keras_vit.weights.huggingface.arguments import not_found_anywhere

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
# hidden_act -> approximate_gelu (transformers' ACT2FN names for GELU).
ACTIVATIONS = {
    "gelu": False,
    "gelu_python": False,
    "gelu_new": True,
    "gelu_pytorch_tanh": True,
    "gelu_fast": True,
}


def read_config(path):
    """The `config.json` of a `save_pretrained` folder, as a dict (names the file on errors)."""
    folder = _folder(path)
    config_path = os.path.join(folder, "config.json")
    if not os.path.isfile(config_path):
        raise FileNotFoundError(
            f"No config.json in {folder!r}. Expected a folder written by transformers' "
            "save_pretrained (config.json and model.safetensors or pytorch_model.bin)."
        )
    return check_hf_config(read_json_object(config_path, "config.json"), config_path)


def check_hf_config(config, source):
    """`config` (a transformers `config.json` dict, and its nested `vision_config`) with every
    field keras_vit reads of the type transformers writes (`keras_vit.weights.config_types`):
    a ValueError naming `source`, the field and the value otherwise. Nothing is coerced."""
    check_fields(config, HF_CONFIG_FIELDS, source, nullable=_NULLABLE)
    if isinstance(config.get("vision_config"), dict):
        check_fields(config["vision_config"], HF_CONFIG_FIELDS, f"{source} (vision_config)",
                     nullable=_NULLABLE)  # fmt: skip
    return config


_NULLABLE = ("architectures", "_name_or_path", "vision_config")


def _folder(path, revision=None, cache_dir=None, force_download=False):
    if is_repo_id(path):
        repo_id, revision = split_repo(path, revision)
        try:
            return download_snapshot(
                repo_id, revision=revision, cache_dir=cache_dir, force_download=force_download
            )
        except FileNotFoundError as error:
            if str(path).startswith(("hf://", "hf-hub:", "hf_hub:")):
                raise
            raise not_found_anywhere(path, error) from error
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
        raise ValueError(
            f"Expected a save_pretrained folder (config.json + weights). Received the file {path!r}"
        )
    return path


def weights_file(folder):
    """The weights file of a `save_pretrained` folder (the first of `WEIGHT_FILES` there)."""
    for name in WEIGHT_FILES:
        candidate = os.path.join(folder, name)
        if os.path.isfile(candidate):
            return candidate
    raise FileNotFoundError(f"No weights in {folder!r}: expected one of {', '.join(WEIGHT_FILES)}.")


def size_pair(value, name, config_path):
    """An `image_size` / `patch_size` of a `config.json`: an int or a pair of ints."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    pair = isinstance(value, (list, tuple)) and len(value) == 2
    if pair and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return tuple(value)
    raise ValueError(f"{config_path}: {name} must be an int or a pair of ints. Received: {value!r}")

# transformers' size fields and keras_vit's names for them, with transformers' ViT defaults.
SIZE_FIELDS = (
    ("num_layers", "num_hidden_layers", 12),
    ("hidden_dim", "hidden_size", 768),
    ("mlp_dim", "intermediate_size", 3072),
    ("num_heads", "num_attention_heads", 12),
    ("num_channels", "num_channels", 3),
)


def _count(value, key, config_path):
    """A positive count of a `config.json` (an int, not a bool: 2.9 layers is no count)."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"{config_path}: {key} must be a positive int. Received: {key}={value!r}"
        )
    return value


def size_arguments(config, config_path, *, variant="B/16", epsilon_key="layer_norm_eps",
                   **defaults):  # fmt: skip
    """The `keras_vit.ViT` size arguments of a transformers `config.json`, read once for every
    reader: `variant` (every size below overrides it), `num_layers`, `hidden_dim`, `mlp_dim`,
    `num_heads`, `num_channels`, `patch_size`, `image_size`, `layer_norm_epsilon`.

    Args:
        config: dict, the `config.json` (a vision config's part of it).
        config_path: str, the file, for messages.
        variant: the `ViT` variant the sizes override. Defaults to `"B/16"`.
        epsilon_key: the norm epsilon's key (`"layer_norm_eps"`, AIMv2's `"rms_norm_eps"`).
        **defaults: `{config key: default}` where the model type's defaults differ from
            transformers' ViT (`patch_size=14`, `layer_norm_eps=1e-6`, ...).

    Raises:
        ValueError: a size that is not a positive int (or a pair for the image and patch
            sizes), or an epsilon that is not a number, naming the file and the key.

    Example:

    >>> size_arguments({"hidden_size": 32, "num_attention_heads": 2}, "config.json",
    ...                patch_size=14)["patch_size"]
    14
    """
    values = {"variant": variant}
    for ours, key, default in SIZE_FIELDS:
        values[ours] = _count(config.get(key, defaults.get(key, default)), key, config_path)
    for key, default in (("patch_size", 16), ("image_size", 224)):
        values[key] = size_pair(config.get(key, defaults.get(key, default)), key, config_path)
    epsilon = config.get(epsilon_key, defaults.get(epsilon_key, 1e-12))
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or epsilon <= 0:
        raise ValueError(
            f"{config_path}: {epsilon_key} must be a positive number. "
            f"Received: {epsilon_key}={epsilon!r}"
        )
    values["layer_norm_epsilon"] = float(epsilon)
    return values


def check_architectures(config, supported, source="config.json"):
    """Raises a ValueError naming the first of `config["architectures"]` not in `supported`."""
    unknown = [a for a in config.get("architectures") or () if a not in supported]
    if unknown:
        raise ValueError(
            f"{source}: architecture {unknown[0]!r} is not supported. Expected one of {supported}."
        )


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
            "name": kwargs.pop("name", None) or model_name(hf),
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
    p = PATHS
    return {
        "embeddings.cls_token": (p["class_token"], L.IDENTITY),
        "embeddings.position_embeddings": (p["position_embedding"], position_transform),
        "embeddings.patch_embeddings.projection.weight": (p["patch_kernel"], L.CONV),
        "embeddings.patch_embeddings.projection.bias": (p["patch_bias"], L.IDENTITY),
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


def model_name(hf):
    """A Keras model name from `config.json`'s `_name_or_path` (its last part, `[0-9A-Za-z_]`)."""
    name = hf.get("_name_or_path") or "vit_huggingface"
    return re.sub(r"[^0-9A-Za-z_]+", "_", os.path.basename(str(name).rstrip("/"))) or "vit"
