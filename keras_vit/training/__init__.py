"""Training library: schedules, optimizers, augmentation, data pipelines, few-shot evaluation,
distribution, several processes (`multihost`), LoRA (`lora`), quantization (`quantization`).
`data` (tf.data), `distribution` and `multihost` import TensorFlow/JAX lazily."""

from keras_vit.training.augment import RandomResizedCrop, build_augmenters
from keras_vit.training.fewshot import LinearProbe, fewshot_accuracy, sample_shots, solve_ridge
from keras_vit.training.lora import (
    enable_lora,
    get_lora_settings,
    load_lora_weights,
    merge_lora,
    save_lora_weights,
)
from keras_vit.training.optimizers import build_loss, build_optimizer
from keras_vit.training.quantization import quantize
from keras_vit.training.schedules import WarmupCosineDecay, WarmupDecay, WarmupLinearDecay

__all__ = [
    "LinearProbe",
    "RandomResizedCrop",
    "WarmupCosineDecay",
    "WarmupDecay",
    "WarmupLinearDecay",
    "build_augmenters",
    "build_loss",
    "build_optimizer",
    "enable_lora",
    "fewshot_accuracy",
    "load_lora_weights",
    "get_lora_settings",
    "merge_lora",
    "quantize",
    "sample_shots",
    "save_lora_weights",
    "solve_ridge",
]
