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

import logging
import os

from keras_vit.models import arguments as A
from keras_vit.models.config import ViTConfig
from keras_vit.models.encoder import build_model
from keras_vit.weights import loading as L
from keras_vit.weights.huggingface.arguments import (
    check_classifier_present,
    check_huggingface_arguments,
)
from keras_vit.weights.huggingface.common import (
    _folder,
    load_arrays,
    model_name,
    read_config,
    weights_file,
)
from keras_vit.weights.huggingface.input_spec import attach_huggingface_spec
from keras_vit.weights.huggingface.vit import (
    _skips,
    huggingface_name_table,
    normalize_names,
    vit_arguments,
)
from keras_vit.weights.registry import huggingface_reader
from keras_vit.weights.state_dict import read_state_dict

logger = logging.getLogger(__name__)


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
        (`keras_vit.weights.huggingface.input_spec.HF_DEFAULTS`); `preprocessing=` overrides it.

    Raises:
        FileNotFoundError: the folder, `config.json` or the weights are missing.
        ValueError: an unsupported config value (naming it), or weights that do not fit
            (one message listing every missing, unexpected or mis-shaped array).

    Example:

    >>> model = from_huggingface("vit-base-patch16-224")  # doctest: +SKIP
    """
    force_download = check_huggingface_arguments(path, revision, cache_dir, force_download)
    A.check_size_arguments(
        image_size=image_size, num_classes=num_classes, patch_size=kwargs.get("patch_size")
    )
    folder = _folder(path, revision, cache_dir, force_download)
    hf = read_config(folder)
    given = "preprocessing" in kwargs  # else the folder's preprocessor_config.json
    loader = huggingface_reader(hf.get("model_type"))  # a registered family's (keras_vit.families)
    if loader is not None:
        if image_size is not None:
            kwargs["image_size"] = image_size
        model = loader(folder, hf, num_classes=num_classes, **kwargs)
        return attach_huggingface_spec(model, folder, hf, given)
    arguments = vit_arguments(hf, source=os.path.join(folder, "config.json"))
    qkv_bias = arguments.pop("_qkv_bias")
    weights_path = weights_file(folder)
    arrays = normalize_names(read_state_dict(weights_path))
    check_classifier_present(hf, arrays, num_classes, os.path.join(folder, "config.json"),
                             weights_path)  # fmt: skip
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
            "name": kwargs.pop("name", None) or model_name(hf),
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
