"""The input spec and class names a timm checkpoint supplies (`keras_vit.weights.class_names`).

The checkpoint folder's `config.json` (timm's Hub layout), else keras_vit's table of timm's
pretrained configs for the name (`keras_vit.weights.timm.pretrained`), else timm's defaults;
class names from that `config.json`'s `label_names` or the tag's label set (ImageNet-1k's from
`keras_vit.weights.imagenet`), and back (`timm_label_fields`, what `export_timm` writes).
"""

import json
import os
import warnings

from keras_vit.models.preprocessing_config import PreprocessingConfig


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
    from keras_vit.weights.timm.pretrained import pretrained_cfg

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
    from keras_vit.weights.timm.pretrained import pretrained_cfg

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
