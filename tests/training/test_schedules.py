import keras
import numpy as np
import pytest

from keras_vit.training.schedules import WarmupCosineDecay, WarmupDecay, WarmupLinearDecay


def np_schedule(step, peak, total, warmup, decay, end=0.0):
    step = np.asarray(step, "float64")
    progress = np.clip((step - warmup) / max(total - warmup, 1), 0, 1)
    if decay == "linear":
        decayed = end + (peak - end) * (1 - progress)
    else:
        decayed = end + (peak - end) * 0.5 * (1 + np.cos(np.pi * progress))
    if warmup == 0:
        return decayed
    return np.where(step < warmup, peak * step / warmup, decayed)


@pytest.mark.parametrize("decay", ["linear", "cosine"])
@pytest.mark.parametrize("warmup,end", [(0, 0.0), (10, 0.0), (25, 1e-5)])
def test_matches_numpy(decay, warmup, end):
    schedule = WarmupDecay(
        3e-3, total_steps=100, warmup_steps=warmup, decay=decay, end_learning_rate=end
    )
    steps = np.arange(0, 120)
    got = np.array([float(keras.ops.convert_to_numpy(schedule(s))) for s in steps])
    np.testing.assert_allclose(
        got, np_schedule(steps, 3e-3, 100, warmup, decay, end), rtol=1e-5, atol=1e-9
    )


def test_aliases_and_serialization():
    lin = WarmupLinearDecay(1e-3, 50, 5)
    cos = WarmupCosineDecay(1e-3, 50, 5)
    assert lin.decay == "linear" and cos.decay == "cosine"
    config = keras.optimizers.schedules.serialize(cos)
    clone = keras.optimizers.schedules.deserialize(config)
    assert isinstance(clone, WarmupDecay) and clone.get_config() == cos.get_config()
    # Inside an optimizer, through a .keras round trip.
    opt = keras.optimizers.SGD(learning_rate=lin)
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(opt))
    assert isinstance(restored._learning_rate, WarmupDecay)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(peak_learning_rate=0.0, total_steps=10), "peak_learning_rate"),
        (dict(peak_learning_rate=1.0, total_steps=0), "total_steps"),
        (dict(peak_learning_rate=1.0, total_steps=10, warmup_steps=11), "warmup_steps"),
        (dict(peak_learning_rate=1.0, total_steps=10, decay="step"), "decay"),
    ],
)
def test_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        WarmupDecay(**kwargs)
