"""PyTorch fast path of Keras' Adam / AdamW update (backend-specific, imported only under torch).

keras_vit's adapter for the optimizer, beside `keras_vit/layers/_torch_kernels.py` for the
blocks. Four methods of Keras' PyTorch `Adam` / `AdamW` are replaced by the ones here (each
falling back to Keras' own where noted below), in two ways that run the same functions:
`keras_vit.training.FusedAdamW` / `FusedAdam` derive from Keras' PyTorch classes with them
(`AdamWBase`, `AdamBase`), and `install(optimizer)` binds them to one exact
`keras.optimizers.AdamW` / `Adam` instance (what `VisionTransformer.compile` does,
`keras_vit/models/fused_optimizer.py`): its class, config and variables stay Keras' own. The
functions therefore never call `super()`: their fallback is `KERAS_METHODS[name]`, the method
Keras' PyTorch `Adam` and `AdamW` share (`torch_adamw.AdamW` overrides none of the four).

- the Adam update (`_parallel_update_step`): Keras' PyTorch Adam runs eight `torch._foreach_*`
  passes over the variables (each a loop over tensors, 1-2 ms per pass for ViT-B/16's 200 on a
  CPU); here it is one call of PyTorch's fused AdamW kernel (`torch._fused_adamw_`, the kernel
  of `torch.optim.AdamW(fused=True)`), which reads each tensor once. Keras' update is
  `m <- b1 m + (1 - b1) g`, `v <- b2 v + (1 - b2) g^2`,
  `x <- x - alpha m / (sqrt(v) + eps)` with `alpha = lr sqrt(1 - b2^t) / (1 - b1^t)`;
  PyTorch's puts `eps` inside the bias correction (`sqrt(v) / sqrt(1 - b2^t) + eps`). The kernel
  gets Keras' `alpha` (a tensor, computed as Keras computes it) as its learning rate and a step
  count so large that its own bias corrections are 1, so it computes Keras' formula; weight
  decay stays Keras' own (`_apply_weight_decay`: one `torch._foreach_mul_` before the update,
  with its exclusions), only reading the variables' tensors without `Variable.value`'s scope
  look-ups (3-10 us each);
- the weights' moving average (`use_ema`, `_update_model_variables_moving_average`): two
  foreach passes instead of five Keras ops per variable;
- gradient clipping by global norm (`_clip_gradients`): `torch._foreach_norm` and one
  `torch._foreach_mul` instead of a square and a sum per tensor; the same norm and the same
  non-finite behaviour as `keras.optimizers` (`clip_by_global_norm`), for float32 / float64
  gradients of one dtype.

Equal to Keras' path within float32 rounding (tests/training/test_fused_adamw.py: weight decay
and its exclusions, schedules, clipping, EMA, gradient accumulation, loss scaling, mixed
precision). What takes Keras' own path instead: variables that are not all float32 or float64
of one dtype and device (a bfloat16 / float16 model: Keras then computes in that dtype),
`amsgrad`, a stateless scope (`stateless_apply`), symbolic ("meta") variables.
"""

import types

import torch
from keras import ops
from keras.src.backend.common.stateless_scope import in_stateless_scope
from keras.src.backend.torch.core import get_device
from keras.src.backend.torch.optimizers import torch_adam, torch_adamw
from keras.src.utils import torch_utils

# Keras' own methods that the functions below replace (their fallbacks): the same function
# for its PyTorch Adam and AdamW (tests/training/test_fused_adamw.py checks it).
KERAS_METHODS = {
    name: getattr(torch_adam.Adam, name)
    for name in (
        "_parallel_update_step",
        "_apply_weight_decay",
        "_update_model_variables_moving_average",
        "_clip_gradients",
    )
}

# A step count so large that `1 - beta ** step` is exactly 1 for any beta < 1 (float32/64).
_NO_BIAS_CORRECTION = 2.0**60
_FUSED_DTYPES = (torch.float32, torch.float64)


def _fusable(variables, grads):
    if in_stateless_scope() or str(get_device()) == "meta":
        return False
    first = variables[0]._value
    if first.dtype not in _FUSED_DTYPES:
        return False
    dtype, device = first.dtype, first.device
    for variable, grad in zip(variables, grads, strict=True):
        value = variable._value
        if value.dtype != dtype or value.device != device:
            return False
        if grad.dtype != dtype or grad.device != device or grad.layout != torch.strided:
            return False
    return True


@torch_utils.no_grad
def parallel_update_step(self, grads, variables, learning_rate):
    if self.amsgrad or not _fusable(variables, grads):
        return KERAS_METHODS["_parallel_update_step"](
            self, grads, variables, learning_rate
        )
    values = [variable._value for variable in variables]
    dtype, device = values[0].dtype, values[0].device
    # Keras' `alpha`, as torch_adam.Adam computes it (a tensor on the variables' device).
    lr = ops.cast(learning_rate, dtype)
    step = ops.cast(self.iterations + 1, dtype)  # counts updates, not accumulated batches
    beta_1_power = torch.pow(torch.tensor(self.beta_1, dtype=dtype, device=device), step)
    beta_2_power = torch.pow(torch.tensor(self.beta_2, dtype=dtype, device=device), step)
    alpha = lr * torch.sqrt(1 - beta_2_power) / (1 - beta_1_power)
    indices = [self._get_variable_index(variable) for variable in variables]
    steps = getattr(self, "_fused_steps", None)
    if steps is None or steps.device != device or steps.dtype != dtype:
        steps = torch.tensor(_NO_BIAS_CORRECTION, dtype=dtype, device=device)
        self._fused_steps = steps
    torch._fused_adamw_(
        values,
        [g.contiguous() for g in grads],
        [self._momentums[i]._value for i in indices],
        [self._velocities[i]._value for i in indices],
        [],
        [steps] * len(values),
        lr=alpha,
        beta1=self.beta_1,
        beta2=self.beta_2,
        weight_decay=0.0,
        eps=self.epsilon,
        amsgrad=False,
        maximize=False,
    )


@torch_utils.no_grad
def apply_weight_decay(self, variables):
    if self.weight_decay is None or in_stateless_scope() or str(get_device()) == "meta":
        return KERAS_METHODS["_apply_weight_decay"](self, variables)
    # Keras' torch_optimizer.TorchOptimizer._apply_weight_decay, reading `_value`.
    decayed = [v._value for v in variables if self._use_weight_decay(v)]
    if decayed:
        factor = 1 - self.weight_decay * self._get_current_learning_rate()
        torch._foreach_mul_(decayed, factor)


@torch_utils.no_grad
def update_model_variables_moving_average(self, trainable_variables):
    if not self.use_ema or in_stateless_scope() or str(get_device()) == "meta":
        return KERAS_METHODS["_update_model_variables_moving_average"](
            self, trainable_variables
        )
    pairs = [
        (variable._value, average._value)
        for variable, average in zip(
            trainable_variables, self._model_variables_moving_average, strict=False
        )
        if average is not None
    ]
    if not pairs:
        return None
    values, averages = (list(group) for group in zip(*pairs, strict=True))
    dtype = values[0].dtype
    if dtype not in _FUSED_DTYPES or any(v.dtype != dtype for v in values + averages):
        return KERAS_METHODS["_update_model_variables_moving_average"](
            self, trainable_variables
        )
    # Keras' `momentum * average + (1 - momentum) * variable`, the momentum 0 at step 0.
    momentum = (self.iterations != 0).to(dtype) * self.ema_momentum
    torch._foreach_mul_(averages, momentum)
    torch._foreach_add_(averages, torch._foreach_mul(values, 1 - momentum))
    return None


def clip_gradients(self, grads):
    if (
        (self.clipnorm and self.clipnorm > 0)
        or not (self.global_clipnorm and self.global_clipnorm > 0)
        or grads[0] is None
        or grads[0].dtype not in _FUSED_DTYPES
        or any(g is None or g.dtype != grads[0].dtype for g in grads)
        or in_stateless_scope()
    ):
        return KERAS_METHODS["_clip_gradients"](self, grads)
    return clip_by_global_norm(grads, self.global_clipnorm)


@torch_utils.no_grad
def clip_by_global_norm(grads, clip_norm):
    """`keras.src.optimizers.base_optimizer.clip_by_global_norm` with foreach ops."""
    norms = torch._foreach_norm(grads)
    use_norm = torch.linalg.vector_norm(torch.stack(norms))
    scale = clip_norm * torch.minimum(1.0 / use_norm, torch.as_tensor(1.0 / clip_norm))
    scale = scale + (use_norm - use_norm)  # NaN for a non-finite norm, as Keras does
    return torch._foreach_mul(grads, scale.to(grads[0].dtype))


# The replacements, by the name of the Keras method each replaces.
FUSED = {
    "_parallel_update_step": parallel_update_step,
    "_apply_weight_decay": apply_weight_decay,
    "_update_model_variables_moving_average": update_model_variables_moving_average,
    "_clip_gradients": clip_gradients,
}


class FusedAdamUpdate:
    """Mixin over Keras' PyTorch `Adam` / `AdamW`: the fused update and foreach clipping."""

    _parallel_update_step = parallel_update_step
    _apply_weight_decay = apply_weight_decay
    _update_model_variables_moving_average = update_model_variables_moving_average
    _clip_gradients = clip_gradients


def install(optimizer):
    """Binds the four replacements to one Keras PyTorch `Adam` / `AdamW` instance, in place.

    Its class, config, variables and state stay Keras' own: only its instance dictionary
    gains the four methods (`uninstall` removes them). Returns the optimizer.
    """
    for name, function in FUSED.items():
        # Past the optimizer's own __setattr__, which offers every attribute to its tracker.
        object.__setattr__(optimizer, name, types.MethodType(function, optimizer))
    return optimizer


def installed(optimizer):
    """Whether `optimizer` runs the fused update (installed, or a `FusedAdamUpdate` class)."""
    if isinstance(optimizer, FusedAdamUpdate):
        return True
    own = vars(optimizer)
    return all(
        getattr(own.get(name), "__func__", None) is function for name, function in FUSED.items()
    )


def uninstall(optimizer):
    """Undoes `install`: the instance runs Keras' own methods again. Returns the optimizer."""
    for name in FUSED:
        vars(optimizer).pop(name, None)
    return optimizer


class AdamWBase(FusedAdamUpdate, torch_adamw.AdamW):
    """Keras' PyTorch `AdamW` with the fused update."""


class AdamBase(FusedAdamUpdate, torch_adam.Adam):
    """Keras' PyTorch `Adam` with the fused update."""

