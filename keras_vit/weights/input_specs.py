"""The input spec each checkpoint source supplies (`ViTConfig.preprocessing`, issue 42).

- timm: the checkpoint folder's `config.json` `pretrained_cfg` (the Hub layout `timm/<name>`:
  `model.safetensors` beside `config.json`), else keras_vit's table of timm's pretrained configs
  for the name (`keras_vit.weights.timm_pretrained.pretrained_cfg`), else timm's defaults
  (`resolve_data_config` with no config: ImageNet mean and std, crop_pct 0.875, bilinear);
- transformers: the folder's `preprocessor_config.json`, else the model type's image processor
  defaults (`HF_DEFAULTS`);
- the official `.npz` and the presets: the default `PreprocessingConfig()` (`[-1, 1]`).

A spec the user gave (`preprocessing=` to `from_timm` / `from_huggingface`) wins.

Class names travel the same way (`ViTConfig.class_names`): transformers' `id2label`; timm's
Hub `config.json` `label_names` (what `export_timm(config_json=True)` writes back,
`timm_label_fields`), or the tag's label set where keras_vit ships it (`imagenet-1k`:
`keras_vit.weights.imagenet`); none for other label sets (ImageNet-21k, ...).
"""

import json
import os
import warnings

from keras_vit.models.preprocessing_config import (
    CLIP_MEAN,
    CLIP_STD,
    IMAGENET_MEAN,
    IMAGENET_STD,
    PreprocessingConfig,
)

# transformers' image processor defaults per model type, where a folder has no
# preprocessor_config.json: (mean, std, resample) of the class `AutoImageProcessor` picks.
HF_DEFAULTS = {
    "vit": ((0.5,) * 3, (0.5,) * 3, 2),  # ViTImageProcessor
    "dinov2": (IMAGENET_MEAN, IMAGENET_STD, 3),  # BitImageProcessor (DINOv2's config)
    "dinov2_with_registers": (IMAGENET_MEAN, IMAGENET_STD, 3),
    "dinov3_vit": (IMAGENET_MEAN, IMAGENET_STD, 2),  # DINOv3ViTImageProcessorFast
    "beit": ((0.5,) * 3, (0.5,) * 3, 3),  # BeitImageProcessor
    "siglip2_vision_model": ((0.5,) * 3, (0.5,) * 3, 2),
    "aimv2_vision_model": (CLIP_MEAN, CLIP_STD, 3),
}


def _read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def timm_input_spec(name, checkpoint=None):
    """The `PreprocessingConfig` of a timm name (and its checkpoint file, if a path).

    Example:

    >>> spec = timm_input_spec("vit_small_patch14_dinov2.lvd142m")
    >>> spec.mean, spec.crop_pct, spec.interpolation
    ((0.485, 0.456, 0.406), 1.0, 'bicubic')
    """
    if isinstance(checkpoint, (str, os.PathLike)):
        config_path = os.path.join(os.path.dirname(os.fspath(checkpoint)), "config.json")
        if os.path.isfile(config_path):
            cfg = _read_json(config_path).get("pretrained_cfg")
            if isinstance(cfg, dict):
                return _spec_of(cfg, name)
    from keras_vit.weights.timm_pretrained import pretrained_cfg

    try:
        cfg = pretrained_cfg(name)
    except ValueError:  # an architecture without pretrained tags: timm's defaults
        cfg = {}
    return _spec_of(cfg, name)


def _spec_of(cfg, name):
    """`PreprocessingConfig.from_timm(cfg)`; a crop mode the preprocessor lacks (timm's
    `"border"`, the VLM towers') becomes `"center"` with a warning: the model is built all the
    same, and the warning says how to set the spec."""
    if cfg.get("crop_mode") not in (None, "center", "squash"):
        warnings.warn(
            f"{name}: timm's pretrained_cfg crop_mode={cfg['crop_mode']!r} has no form in "
            "keras_vit's preprocessor; model.preprocessor crops with crop_mode='center' "
            "(mean, std, interpolation and crop_pct as timm's). Pass preprocessing= to set "
            "another.",
            stacklevel=3,
        )
        cfg = {**cfg, "crop_mode": "center"}
    return PreprocessingConfig.from_timm(cfg)


def timm_class_names(name, checkpoint=None):
    """The class names of a timm name's head (or its checkpoint's `config.json`), or None.

    A `config.json` beside the checkpoint file (timm's Hub layout) decides: its `label_names`
    (top level, where timm's `save_for_hf` writes them; or inside `pretrained_cfg`), else the
    label set timm infers from its class count (`infer_imagenet_subset`: 1000 classes are
    ImageNet-1k's). Without one, timm's pretrained config for the name (its `label_set`).
    ImageNet-1k's WordNet ids (timm's `label_names` for that set) become keras_vit's readable
    ImageNet-1k names, as `decode_predictions` pairs them.

    Example:

    >>> timm_class_names("deit_tiny_patch16_224")[:2]
    ('tench', 'goldfish')
    """
    if isinstance(checkpoint, (str, os.PathLike)):
        config_path = os.path.join(os.path.dirname(os.fspath(checkpoint)), "config.json")
        if os.path.isfile(config_path):
            config = _read_json(config_path)
            if isinstance(config, dict) and isinstance(config.get("pretrained_cfg"), dict):
                return _hub_config_class_names(config)
    from keras_vit.weights.timm_pretrained import pretrained_cfg

    try:
        cfg = pretrained_cfg(name)
    except ValueError:
        return None
    return _imagenet_names() if cfg.get("label_set") == "imagenet-1k" else None


def _hub_config_class_names(config):
    """The class names a timm Hub `config.json` gives (see `timm_class_names`), or None."""
    cfg = config["pretrained_cfg"]
    labels = config.get("label_names", cfg.get("label_names"))
    if labels:
        names = _ordered_labels(labels)
        if names is not None and names == tuple(wnid for wnid, _ in _imagenet_rows()):
            return _imagenet_names()
        return names
    num_classes = config.get("num_classes", cfg.get("num_classes"))
    return _imagenet_names() if num_classes == 1000 else None


def _ordered_labels(labels):
    """timm's `label_names` (a list, or a dict {class index: name} where ids have gaps) in
    class order; None when they do not name every class from 0 or are not strings."""
    if isinstance(labels, dict):
        try:
            indexed = sorted((int(k), v) for k, v in labels.items())
        except (TypeError, ValueError):
            return None
        if [i for i, _ in indexed] != list(range(len(indexed))):
            return None
        labels = [v for _, v in indexed]
    if isinstance(labels, (list, tuple)) and labels and all(isinstance(n, str) for n in labels):
        return tuple(labels)
    return None


def timm_label_fields(class_names):
    """The top-level `config.json` fields timm's `save_for_hf` writes for a head's class names:
    `label_names` (ImageNet-1k's as their WordNet ids, timm's unique names for that set, with
    the readable names as `label_descriptions`); {} without names.

    Example:

    >>> timm_label_fields(("cat", "dog"))
    {'label_names': ['cat', 'dog']}
    """
    if not class_names:
        return {}
    if tuple(class_names) == _imagenet_names():
        rows = _imagenet_rows()
        return {
            "label_names": [wnid for wnid, _ in rows],
            "label_descriptions": {wnid: label for wnid, label in rows},
        }
    return {"label_names": list(class_names)}


def _imagenet_rows():
    from keras_vit.weights.imagenet import imagenet_classes

    return imagenet_classes()


def _imagenet_names():
    return tuple(label for _, label in _imagenet_rows())


def attach_class_names(model, names):
    """Sets `names` on `model` when they fit its head (one per class), else leaves it."""
    config = getattr(model, "config", None)
    if (
        names
        and hasattr(model, "set_class_names")
        and config.include_top
        and config.num_classes == len(names)
        and config.class_names is None
    ):
        model.set_class_names(tuple(names))
    return model


def huggingface_class_names(hf_config):
    """`id2label` of a transformers `config.json` in class order, or None."""
    labels = hf_config.get("id2label")
    if not isinstance(labels, dict) or not labels:
        return None
    try:
        ordered = sorted((int(k), str(v)) for k, v in labels.items())
    except ValueError:
        return None
    if [k for k, _ in ordered] != list(range(len(ordered))):
        return None
    names = tuple(v for _, v in ordered)
    # transformers' placeholder labels (LABEL_0, ...) name nothing.
    return None if all(v == f"LABEL_{i}" for i, v in enumerate(names)) else names


def huggingface_input_spec(folder, hf_config, image_size):
    """The `PreprocessingConfig` of a transformers folder for the model's `image_size`.

    Example:

    >>> huggingface_input_spec("/no/such/folder", {"model_type": "dinov2"}, (224, 224)).mean
    (0.485, 0.456, 0.406)
    """
    path = os.path.join(os.fspath(folder), "preprocessor_config.json")
    if os.path.isfile(path):
        processor = _read_json(path)
        try:
            return PreprocessingConfig.from_huggingface(processor, image_size)
        except ValueError as error:  # another image_size than the processor's: its crop ratio
            if "another size" not in str(error):
                raise
            return _at_other_size(processor, image_size)
    mean, std, resample = HF_DEFAULTS.get(hf_config.get("model_type"), HF_DEFAULTS["vit"])
    return PreprocessingConfig.from_huggingface(
        {"image_mean": mean, "image_std": std, "resample": resample}, image_size
    )


def _at_other_size(processor, image_size):
    """The processor's spec for a model resized to `image_size`: its crop fraction kept."""
    spec = PreprocessingConfig.from_huggingface(
        {k: v for k, v in processor.items() if k not in ("size", "crop_size", "do_center_crop")},
        image_size,
    )
    size, crop = processor.get("size") or {}, processor.get("crop_size")
    short = size.get("shortest_edge") if isinstance(size, dict) else size
    if processor.get("do_center_crop") and short and crop:
        crop = crop["height"] if isinstance(crop, dict) else crop
        return PreprocessingConfig(
            **{
                **spec.layer_arguments(),
                "resize": None,
                "crop_mode": "center",
                "crop_pct": min(1.0, crop / short),
            }
        )
    return PreprocessingConfig(**{**spec.layer_arguments(), "resize": None, "crop_mode": "squash"})


def attach_huggingface_spec(model, folder, hf_config, given):
    """Sets the folder's spec (unless the user gave one) and its `id2label` class names on a
    model `from_huggingface` built."""
    if not given and hasattr(model, "set_preprocessing"):
        model.set_preprocessing(huggingface_input_spec(folder, hf_config, model.config.image_size))
    return attach_class_names(model, huggingface_class_names(hf_config))
