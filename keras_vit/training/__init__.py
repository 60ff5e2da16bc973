"""Training library: schedules, optimizers, augmentation, data pipelines, few-shot evaluation,
distribution, several processes (`multihost`), LoRA (`lora`), quantization (`quantization`),
quantization-aware training (`qat`).
`data` (tf.data), `distribution` and `multihost` import TensorFlow/JAX lazily.
Its public names are imported on first use (`__getattr__`), so that `keras_vit.training.cv_augment`
or `keras_vit.training.addresses` load no framework (the command line's flag checks use them)."""

import importlib
import importlib.util

# {public name: the module defining it}
_NAMES = {
    "RandomResizedCrop": "augment",
    "build_augmenters": "augment",
    "LinearProbe": "fewshot",
    "fewshot_accuracy": "fewshot",
    "sample_shots": "fewshot",
    "solve_ridge": "fewshot",
    "enable_lora": "lora",
    "load_lora_weights": "lora_files",
    "get_lora_settings": "lora",
    "merge_lora": "lora",
    "save_lora_weights": "lora_files",
    "build_loss": "optimizers",
    "build_optimizer": "optimizers",
    "FusedAdam": "optimizers",
    "FusedAdamW": "optimizers",
    "quantization_aware": "qat",
    "quantize": "quantization",
    "WarmupCosineDecay": "schedules",
    "WarmupDecay": "schedules",
    "WarmupLinearDecay": "schedules",
}


def __getattr__(name):
    if name not in _NAMES:
        if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}"):
            return importlib.import_module(f"{__name__}.{name}")  # a submodule
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_NAMES[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_NAMES))


__all__ = sorted(_NAMES)
