"""Keras' own `AdamW` / `Adam` given keras_vit's fused update on PyTorch (in `compile`).

`model.compile(keras.optimizers.AdamW(...))` (or `"adamw"`, `"adam"`) on a keras_vit model
runs the same update as `keras_vit.training.FusedAdamW`: on PyTorch the four methods of
`keras_vit/models/_torch_optimizer.py` are bound to the user's optimizer instance, which keeps
its class, config, variables and saved form (a `.keras` file still names
`keras.optimizers.AdamW`; plain Keras loads it). Only an optimizer of exactly Keras' class is
touched (not a subclass: its methods are its author's), possibly inside Keras'
`LossScaleOptimizer`. Nothing changes on JAX or TensorFlow.

`FusedOptimizerCompile` is the `compile` of `VisionTransformer` that does it. Off for one
model: `model.compile(..., fused_optimizer=False)`; for the process:
`KERAS_VIT_FUSED_OPTIMIZER=0` (read at each `compile`).
"""

import os

import keras

ENV_VARIABLE = "KERAS_VIT_FUSED_OPTIMIZER"


def fused_by_default():
    """Whether `compile` fuses when not told (`KERAS_VIT_FUSED_OPTIMIZER`, `"1"` by default).

    Example:

    >>> import os
    >>> fused_by_default() == (os.environ.get("KERAS_VIT_FUSED_OPTIMIZER", "1") != "0")
    True
    """
    value = os.environ.get(ENV_VARIABLE, "1").strip()
    if value not in ("0", "1", ""):
        raise ValueError(
            f"{ENV_VARIABLE} must be 0 (Keras' own Adam/AdamW update) or 1 (keras_vit's fused "
            f"update on PyTorch). Received: {ENV_VARIABLE}={value!r}"
        )
    return value != "0"


def resolve_fused(fused):
    """`compile`'s `fused_optimizer` argument checked, None read from the environment.

    Example:

    >>> resolve_fused(False)
    False
    """
    if fused is None:
        return fused_by_default()
    if not isinstance(fused, bool):
        raise ValueError(f"fused_optimizer must be None, True or False. Received: {fused!r}")
    return fused


def _keras_adam_classes():
    from keras.src.backend.torch.optimizers import torch_adam, torch_adamw

    # What `keras.optimizers.Adam(...)` / `AdamW(...)` make on PyTorch (Keras' TorchOptimizer
    # swaps the class in `__new__`).
    return (torch_adam.Adam, torch_adamw.AdamW)


def fuse_optimizer(optimizer, fused=None):
    """Gives a Keras `AdamW` / `Adam` instance the fused update on PyTorch (in place).

    Args:
        optimizer: the optimizer a model compiled with (`model.optimizer`); a
            `keras.optimizers.LossScaleOptimizer` is looked into.
        fused: optional bool. False takes the fused update off an instance that has it.
            Defaults to None (`KERAS_VIT_FUSED_OPTIMIZER`, on unless it is `0`).

    Returns:
        True when the optimizer now runs the fused update (also a `FusedAdamW`), False when
        it runs its class's own (another backend, another class or a subclass, or off).

    Example:

    >>> opt = keras.optimizers.SGD()
    >>> fuse_optimizer(opt), isinstance(opt, keras.optimizers.SGD)
    (False, True)
    """
    fused = resolve_fused(fused)
    if keras.backend.backend() != "torch":
        return False
    if type(optimizer) is keras.optimizers.LossScaleOptimizer:
        optimizer = optimizer.inner_optimizer
    from keras_vit.models import _torch_optimizer

    if type(optimizer) not in _keras_adam_classes():
        return _torch_optimizer.installed(optimizer)  # `keras_vit.training.FusedAdamW`: True
    if fused:
        _torch_optimizer.install(optimizer)
    else:
        _torch_optimizer.uninstall(optimizer)
    return fused


class FusedOptimizerCompile:
    """Mixin over `keras.Model`: `compile` gives Keras' `AdamW` / `Adam` the fused update.

    `compile(..., fused_optimizer=None)` is Keras' `Model.compile` followed by
    `fuse_optimizer(model.optimizer, fused_optimizer)`: the compile config Keras records (and
    saves) is the one it was given. `compile_from_config` is Keras' own, which a model with its
    own `compile` must restate (Keras skips a custom `compile` when loading otherwise).
    """

    def compile(self, optimizer="rmsprop", *args, fused_optimizer=None, **kwargs):
        """Keras' `Model.compile`; on PyTorch, Keras' `AdamW` / `Adam` get the fused update.

        Args:
            optimizer, *args, **kwargs: Keras' `Model.compile` arguments.
            fused_optimizer: optional bool. False keeps Keras' own Adam / AdamW update.
                Defaults to None (on, unless `KERAS_VIT_FUSED_OPTIMIZER=0`).
        """
        fused = resolve_fused(fused_optimizer)  # a bad value is refused before compiling
        super().compile(optimizer, *args, **kwargs)
        fuse_optimizer(self.optimizer, fused)

    def compile_from_config(self, config):
        """Keras' `Trainer.compile_from_config`, calling this class's `compile`."""
        config = keras.saving.deserialize_keras_object(config)
        self.compile(**config)
        if hasattr(self, "optimizer") and self.built:
            self.optimizer.build(self.trainable_variables)
