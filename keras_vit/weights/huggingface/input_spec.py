"""The input spec and class names a transformers folder supplies (`keras_vit.weights.class_names`).

The folder's `preprocessor_config.json`, else the model type's image processor defaults
(`HF_DEFAULTS`); class names from `config.json`'s `id2label`.
"""

import json
import os

from keras_vit.models.preprocessing_config import (
    CLIP_MEAN,
    CLIP_STD,
    IMAGENET_MEAN,
    IMAGENET_STD,
    PreprocessingConfig,
)
from keras_vit.weights.class_names import attach_class_names

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
