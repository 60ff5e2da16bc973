"""Optimizers and loss of the paper, built from Keras' own classes.

Pre-training: Adam (beta1 0.9, beta2 0.999) with decoupled weight decay (`keras.optimizers.AdamW`).
Fine-tuning: SGD with momentum 0.9, no weight decay. Both clip the gradient at global norm 1
(`global_clipnorm`) and can accumulate gradients over several batches
(`gradient_accumulation_steps`) to reach a large effective batch on few devices.
"""

import keras

OPTIMIZERS = ("adamw", "adam", "sgd")

if keras.backend.backend() == "torch":  # the PyTorch adapter: a fused update (see its docstring)
    from keras_vit.models._torch_optimizer import AdamBase as _AdamBase
    from keras_vit.models._torch_optimizer import AdamWBase as _AdamWBase
else:
    _AdamBase, _AdamWBase = keras.optimizers.Adam, keras.optimizers.AdamW


@keras.saving.register_keras_serializable(package="keras_vit")
class FusedAdamW(_AdamWBase):
    """`keras.optimizers.AdamW` whose update is one fused kernel on PyTorch.

    The same arguments, variables, config and update as `keras.optimizers.AdamW` on every
    backend (its optimizer variables load into an `AdamW` and back). On PyTorch the Adam update
    is PyTorch's fused AdamW kernel computing Keras' formula and the global-norm clipping uses
    foreach ops (`keras_vit/models/_torch_optimizer.py`); on JAX and TensorFlow it is
    Keras' `AdamW` unchanged. `build_optimizer("adamw", ...)` returns one.

    Example:

    >>> opt = FusedAdamW(learning_rate=1e-3, weight_decay=0.05)
    >>> isinstance(opt, keras.optimizers.AdamW), opt.weight_decay
    (True, 0.05)
    """


@keras.saving.register_keras_serializable(package="keras_vit")
class FusedAdam(_AdamBase):
    """`keras.optimizers.Adam` whose update is one fused kernel on PyTorch (see `FusedAdamW`)."""


def build_optimizer(
    name,
    learning_rate,
    *,
    weight_decay=0.0,
    beta_1=0.9,
    beta_2=0.999,
    momentum=0.9,
    global_clipnorm=1.0,
    gradient_accumulation_steps=None,
    ema_momentum=None,
):
    """Builds the paper's optimizer.

    Args:
        name: `"adamw"` (pre-training: Adam with decoupled weight decay), `"adam"`
            (no weight decay) or `"sgd"` (fine-tuning, momentum).
        learning_rate: float or a `LearningRateSchedule` (e.g. `WarmupDecay`).
        weight_decay: float. Decoupled weight decay (adamw only). Defaults to 0.
        beta_1, beta_2: Adam moments. Default to 0.9 and 0.999.
        momentum: SGD momentum. Defaults to 0.9.
        global_clipnorm: optional float. Clip gradients at this global norm. Defaults to 1.
        gradient_accumulation_steps: optional int >= 2. Apply the update every this many
            batches with the averaged gradient. Defaults to None (every batch).
        ema_momentum: optional float in [0, 1). Keep Keras' exponential moving average of
            the weights (`use_ema`) at this momentum; it replaces the weights when `fit`
            ends. Defaults to None (no average).

    Returns:
        A `keras.optimizers.Optimizer`: for "adamw" / "adam" a `FusedAdamW` / `FusedAdam`
        (Keras' `AdamW` / `Adam`, with a fused update on PyTorch).

    Example:

    >>> build_optimizer("sgd", 0.01).momentum
    0.9

    Reference:
        Dosovitskiy et al., 2021, Sec. 4.1 (Training & Fine-tuning) and Appendix B.1.
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}. Received: optimizer={name!r}")
    if gradient_accumulation_steps is not None and (
        not isinstance(gradient_accumulation_steps, int) or gradient_accumulation_steps < 1
    ):
        raise ValueError(
            "gradient_accumulation_steps must be None or a positive int. "
            f"Received: gradient_accumulation_steps={gradient_accumulation_steps!r}"
        )
    if gradient_accumulation_steps == 1:
        gradient_accumulation_steps = None
    common = dict(
        learning_rate=learning_rate,
        global_clipnorm=global_clipnorm,
        gradient_accumulation_steps=gradient_accumulation_steps,
    )
    if ema_momentum is not None:
        common.update(use_ema=True, ema_momentum=float(ema_momentum))
    if name == "adamw":
        return FusedAdamW(
            weight_decay=weight_decay, beta_1=beta_1, beta_2=beta_2, **common
        )
    if name == "adam":
        if weight_decay:
            raise ValueError(
                "optimizer='adam' has no weight decay; use 'adamw'. "
                f"Received: weight_decay={weight_decay}"
            )
        return FusedAdam(beta_1=beta_1, beta_2=beta_2, **common)
    if weight_decay:
        raise ValueError(
            "Fine-tuning uses SGD without weight decay (paper, Appendix B.1.1). "
            f"Received: optimizer='sgd', weight_decay={weight_decay}"
        )
    return keras.optimizers.SGD(momentum=momentum, **common)


def build_loss(label_smoothing=0.0, from_logits=True):
    """Categorical cross-entropy on one-hot targets, with optional label smoothing.

    The pipelines in `keras_vit.data` yield one-hot labels, so MixUp/CutMix (which mix
    labels) and label smoothing share one loss.

    Args:
        label_smoothing: float in [0, 1). Defaults to 0.
        from_logits: bool. The ViT builders return logits by default. Defaults to True.

    Returns:
        A `keras.losses.CategoricalCrossentropy`.
    """
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(
            f"label_smoothing must be in [0, 1). Received: label_smoothing={label_smoothing}"
        )
    return keras.losses.CategoricalCrossentropy(
        from_logits=from_logits, label_smoothing=label_smoothing
    )
