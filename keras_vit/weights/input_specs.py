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
`pretrained_cfg` `label_names`, or the tag's label set where keras_vit ships it
(`imagenet-1k`: `keras_vit.weights.imagenet`); none for other label sets (ImageNet-21k, ...).
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

    Example:

    >>> timm_class_names("deit_tiny_patch16_224")[:2]
    ('tench', 'goldfish')
    """
    cfg = None
    if isinstance(checkpoint, (str, os.PathLike)):
        config_path = os.path.join(os.path.dirname(os.fspath(checkpoint)), "config.json")
        if os.path.isfile(config_path):
            cfg = _read_json(config_path).get("pretrained_cfg")
    if not isinstance(cfg, dict):
        from keras_vit.weights.timm_pretrained import pretrained_cfg

        try:
            cfg = pretrained_cfg(name)
        except ValueError:
            return None
    names = cfg.get("label_names")
    if isinstance(names, list) and names and all(isinstance(n, str) for n in names):
        return tuple(names)
    if cfg.get("label_set") == "imagenet-1k":
        from keras_vit.weights.imagenet import imagenet_classes

        return tuple(label for _, label in imagenet_classes())
    return None


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
            **{**spec.layer_arguments(), "resize": None, "crop_mode": "center",
               "crop_pct": min(1.0, crop / short)}
        )
    return PreprocessingConfig(**{**spec.layer_arguments(), "resize": None, "crop_mode": "squash"})


def attach_huggingface_spec(model, folder, hf_config, given):
    """Sets the folder's spec (unless the user gave one) and its `id2label` class names on a
    model `from_huggingface` built."""
    if not given and hasattr(model, "set_preprocessing"):
        model.set_preprocessing(
            huggingface_input_spec(folder, hf_config, model.config.image_size)
        )
    return attach_class_names(model, huggingface_class_names(hf_config))
