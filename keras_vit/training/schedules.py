"""Learning-rate schedules of the paper: linear warm-up, then linear or cosine decay."""

import math

import keras
from keras import ops

DECAYS = ("linear", "cosine")


@keras.saving.register_keras_serializable(package="keras_vit")
class WarmupDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from 0 to `peak_learning_rate`, then linear or cosine decay.

    For step `t`, warm-up length `w` and total length `T`:
    `lr = peak * t / w` while `t < w`; afterwards, with `p = clip((t - w) / (T - w), 0, 1)`,
    linear decay gives `end + (peak - end) * (1 - p)` and cosine decay
    `end + (peak - end) * 0.5 * (1 + cos(pi * p))`. After `T` steps the rate stays at `end`.

    Args:
        peak_learning_rate: float. Rate reached at the end of the warm-up.
        total_steps: int. Steps of the whole run (warm-up included).
        warmup_steps: int. Linear warm-up steps (0 for none). Defaults to 0.
        decay: `"linear"` (pre-training) or `"cosine"` (fine-tuning). Defaults to `"cosine"`.
        end_learning_rate: float. Rate at the end of the decay. Defaults to 0.

    Example:

    >>> schedule = WarmupDecay(1e-3, total_steps=100, warmup_steps=10, decay="linear")
    >>> round(float(schedule(5)), 6), round(float(schedule(55)), 6)
    (0.0005, 0.0005)

    Reference:
        Dosovitskiy et al., 2021, Appendix B.1 (pre-training: 10k warm-up steps, linear decay)
        and B.1.1 (fine-tuning: cosine decay).
    """

    def __init__(
        self,
        peak_learning_rate,
        total_steps,
        warmup_steps=0,
        decay="cosine",
        end_learning_rate=0.0,
    ):
        if not (isinstance(peak_learning_rate, (int, float)) and peak_learning_rate > 0):
            raise ValueError(
                "peak_learning_rate must be a positive number. "
                f"Received: peak_learning_rate={peak_learning_rate!r}"
            )
        if not (isinstance(total_steps, int) and total_steps > 0):
            raise ValueError(
                f"total_steps must be a positive int. Received: total_steps={total_steps!r}"
            )
        if not (isinstance(warmup_steps, int) and 0 <= warmup_steps <= total_steps):
            raise ValueError(
                "warmup_steps must be an int in [0, total_steps]. "
                f"Received: warmup_steps={warmup_steps!r}, total_steps={total_steps}"
            )
        if decay not in DECAYS:
            raise ValueError(f"decay must be one of {DECAYS}. Received: decay={decay!r}")
        if not (isinstance(end_learning_rate, (int, float)) and 0 <= end_learning_rate):
            raise ValueError(
                "end_learning_rate must be a number >= 0. "
                f"Received: end_learning_rate={end_learning_rate!r}"
            )
        self.peak_learning_rate = float(peak_learning_rate)
        self.total_steps = total_steps
        self.warmup_steps = warmup_steps
        self.decay = decay
        self.end_learning_rate = float(end_learning_rate)

    def __call__(self, step):
        step = ops.cast(step, "float32")
        peak, end = self.peak_learning_rate, self.end_learning_rate
        warmup = float(self.warmup_steps)
        decay_steps = float(max(self.total_steps - self.warmup_steps, 1))
        progress = ops.clip((step - warmup) / decay_steps, 0.0, 1.0)
        if self.decay == "linear":
            decayed = end + (peak - end) * (1.0 - progress)
        else:
            decayed = end + (peak - end) * 0.5 * (1.0 + ops.cos(math.pi * progress))
        if self.warmup_steps == 0:
            return decayed
        warm = peak * step / warmup
        return ops.where(step < warmup, warm, decayed)

    def get_config(self):
        return {
            "peak_learning_rate": self.peak_learning_rate,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
            "decay": self.decay,
            "end_learning_rate": self.end_learning_rate,
        }


def WarmupLinearDecay(peak_learning_rate, total_steps, warmup_steps=0, end_learning_rate=0.0):
    """`WarmupDecay(..., decay="linear")`: the pre-training schedule (Appendix B.1)."""
    return WarmupDecay(peak_learning_rate, total_steps, warmup_steps, "linear", end_learning_rate)


def WarmupCosineDecay(peak_learning_rate, total_steps, warmup_steps=0, end_learning_rate=0.0):
    """`WarmupDecay(..., decay="cosine")`: the fine-tuning schedule (Appendix B.1.1)."""
    return WarmupDecay(peak_learning_rate, total_steps, warmup_steps, "cosine", end_learning_rate)
