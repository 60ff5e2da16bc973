"""The input spec and class names a transformers folder supplies (`keras_vit.weights.class_names`).

The folder's `preprocessor_config.json`, else the model type's image processor defaults (the
ones its family registered, `ModelFamily.huggingface_input_specs`, else `VIT_DEFAULTS`); class
names from `config.json`'s `id2label`.
"""

import os

from keras_vit.models.preprocessing_config import PreprocessingConfig
from keras_vit.weights.class_names import attach_class_names
from keras_vit.weights.config_types import HF_PROCESSOR_FIELDS, check_fields, read_json_object
from keras_vit.weights.registry import huggingface_input_spec_defaults

# transformers' ViTImageProcessor defaults, where a folder has no preprocessor_config.json and
# no family registered its model type's (`ModelFamily.huggingface_input_specs`).
VIT_DEFAULTS = {"image_mean": (0.5,) * 3, "image_std": (0.5,) * 3, "resample": 2}


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
        processor = read_json_object(path, "preprocessor_config.json")
        check_fields(processor, HF_PROCESSOR_FIELDS, path)
        try:
            return PreprocessingConfig.from_huggingface(processor, image_size)
        except ValueError as error:  # another image_size than the processor's: its crop ratio
            if "another size" not in str(error):
                raise ValueError(f"{path}: {error}") from error
            return _at_other_size(processor, image_size)
    model_type = hf_config.get("model_type")
    defaults = huggingface_input_spec_defaults(model_type) if isinstance(model_type, str) else None
    return PreprocessingConfig.from_huggingface(defaults or VIT_DEFAULTS, image_size)


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
