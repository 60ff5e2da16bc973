import keras
import numpy as np
import pytest

from keras_vit.training.optimizers import build_loss, build_optimizer
from keras_vit.training.schedules import WarmupDecay


def test_paper_optimizers():
    adamw = build_optimizer("adamw", 1e-3, weight_decay=0.03)
    assert isinstance(adamw, keras.optimizers.AdamW)
    assert (adamw.beta_1, adamw.beta_2, adamw.weight_decay) == (0.9, 0.999, 0.03)
    assert adamw.global_clipnorm == 1.0
    sgd = build_optimizer("sgd", WarmupDecay(0.01, 100, 5), gradient_accumulation_steps=4)
    assert isinstance(sgd, keras.optimizers.SGD) and sgd.momentum == 0.9
    assert sgd.gradient_accumulation_steps == 4
    with pytest.raises(ValueError, match="without weight decay"):
        build_optimizer("sgd", 0.01, weight_decay=0.1)
    with pytest.raises(ValueError, match="optimizer must be one of"):
        build_optimizer("lamb", 0.01)


def test_global_clipnorm_clips_the_update():
    var = keras.Variable(np.zeros(3, "float32"))
    opt = build_optimizer("sgd", 1.0, momentum=0.0)
    opt.apply_gradients(
        [(keras.ops.convert_to_tensor(np.array([30.0, 40.0, 0.0], "float32")), var)]
    )
    np.testing.assert_allclose(keras.ops.convert_to_numpy(var), [-0.6, -0.8, 0.0], rtol=1e-6)


def test_gradient_accumulation_applies_every_k_steps():
    var = keras.Variable(np.zeros(1, "float32"))
    opt = build_optimizer(
        "sgd", 1.0, momentum=0.0, global_clipnorm=None, gradient_accumulation_steps=2
    )
    grad = keras.ops.convert_to_tensor(np.ones(1, "float32"))
    opt.apply_gradients([(grad, var)])
    assert float(keras.ops.convert_to_numpy(var)[0]) == 0.0
    opt.apply_gradients([(grad * 3, var)])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(var), [-2.0], rtol=1e-6)


def test_label_smoothing_loss_matches_numpy():
    loss = build_loss(label_smoothing=0.1)
    logits = np.array([[2.0, 0.0, -1.0]], "float32")
    y = np.array([[0.0, 1.0, 0.0]], "float32")
    smooth = y * 0.9 + 0.1 / 3
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -(smooth * logp).sum()
    np.testing.assert_allclose(
        float(keras.ops.convert_to_numpy(loss(y, logits))), expected, rtol=1e-5
    )
