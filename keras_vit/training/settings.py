"""Checks of training settings that need no framework: the command line runs them on a recipe's
config before TensorFlow, JAX or PyTorch is imported, and the library functions that take these
settings (`enable_lora`, `with_layer_decay`, the data pipelines, `load_splits`) run the same ones.
"""

import numbers

# LoRA's targets: the attention and GELU-MLP Dense layers of a block.
LORA_TARGETS = ("query", "key", "value", "attention_output", "mlp_dense_1", "mlp_dense_2")
# The projections of a SwiGLU MLP (`mlp="swiglu"`: EVA-02), which has no mlp_dense_1 / _2.
SWIGLU_TARGETS = ("mlp_gate", "mlp_up", "mlp_down")
# The Dense layers of a `ParallelScalingBlock` (`block_kind="parallel_scaling"`: timm's
# ParallelScalingBlock): the fused input projection (MLP hidden, q, k, v), then the attention
# and MLP output projections, or one fused output projection (`fused_output`: timm's
# DiffParallelScalingBlock). Such a block has none of `LORA_TARGETS`.
PARALLEL_SCALING_TARGETS = ("in_proj", "attention_out", "mlp_out", "out_proj")
ALL_TARGETS = LORA_TARGETS + SWIGLU_TARGETS + PARALLEL_SCALING_TARGETS
DEFAULT_TARGETS = ("query", "value")
# DeiT distillation: "hard" (the teacher's argmax) or "soft" (KL at a temperature).
DISTILLATION_MODES = ("hard", "soft")


def _is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_lora_rank(rank):
    if not _is_int(rank) or rank < 1:
        raise ValueError(f"rank must be a positive integer. Received: rank={rank!r}")
    return int(rank)


def check_lora_targets(targets):
    if isinstance(targets, str):
        targets = (targets,)
    try:
        targets = tuple(targets)
    except TypeError:
        raise ValueError(
            f"targets must be a sequence of names from {ALL_TARGETS}. Received: targets={targets!r}"
        ) from None
    unknown = [t for t in targets if t not in ALL_TARGETS]
    if not targets or unknown or len(set(targets)) != len(targets):
        raise ValueError(
            f"targets must be distinct names from {ALL_TARGETS}, at least one. "
            f"Received: targets={targets!r}"
        )
    return tuple(t for t in ALL_TARGETS if t in targets)  # canonical order


def check_lora_alpha(alpha):
    if alpha is None:
        return None
    if not _is_real(alpha) or not 0 < alpha < float("inf"):
        raise ValueError(f"alpha must be a positive number or None. Received: alpha={alpha!r}")
    return float(alpha)


def check_lora_settings(rank, targets=DEFAULT_TARGETS, alpha=None):
    """Checks LoRA settings as `enable_lora` does; returns `(rank, targets, alpha)`.

    Raises:
        ValueError: a rank that is not a positive integer, targets not from `ALL_TARGETS` (the
            message lists them), a non-positive alpha.

    Example:

    >>> check_lora_settings(4, ["value", "query"])
    (4, ('query', 'value'), None)
    """
    return check_lora_rank(rank), check_lora_targets(targets), check_lora_alpha(alpha)


def check_repeats(repeats, batch_size):
    """Checks `repeated_augmentation` (a positive int dividing the batch size); returns it."""
    if not _is_int(repeats) or repeats < 1:
        raise ValueError(
            "repeated_augmentation (--repeated-augmentation) must be a positive integer. "
            f"Received: repeated_augmentation={repeats!r}"
        )
    if batch_size % repeats:
        raise ValueError(
            f"repeated_augmentation ({repeats}, --repeated-augmentation) must divide the batch "
            f"size. Received: batch_size={batch_size}"
        )
    return repeats


def check_validation_fraction(fraction):
    """Raises `ValueError` unless `fraction` is a number in [0, 1) (0: no validation split)."""
    if not _is_real(fraction) or not 0 <= fraction < 1:
        raise ValueError(
            "validation_fraction (--validation-fraction) must be a number in [0, 1) (0: no "
            f"validation split). Received: validation_fraction={fraction!r}"
        )


def check_decay(decay):
    """Layer-wise learning-rate decay: a rate in (0, 1]."""
    if not _is_real(decay) or not 0 < decay <= 1:
        raise ValueError(
            f"layer_decay (--layer-decay) must be in (0, 1]. Received: layer_decay={decay!r}"
        )


def check_ema(ema):
    """A weight average's momentum: None or a number in [0, 1)."""
    if ema is not None and (not _is_real(ema) or not 0 <= ema < 1):
        raise ValueError(f"ema (--ema) must be a momentum in [0, 1). Received: ema={ema!r}")
