"""Training library: schedules, optimizers, augmentation, data pipelines, few-shot evaluation,
distribution, several processes (`multihost`). `data` (tf.data), `distribution` and `multihost`
import TensorFlow/JAX lazily."""

from keras_vit.training.augment import RandomResizedCrop, build_augmenters
from keras_vit.training.fewshot import LinearProbe, fewshot_accuracy, sample_shots, solve_ridge
from keras_vit.training.optimizers import build_loss, build_optimizer
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
    "fewshot_accuracy",
    "sample_shots",
    "solve_ridge",
]
