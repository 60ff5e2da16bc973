"""keras_vit/training/distillation.py: DeiT's hard and soft distillation against NumPy."""

import os

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.training import build_loss
from keras_vit.training.distillation import Distiller, distillation_loss
from tests.helpers import randomize_weights, to_numpy


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_losses_match_numpy_and_deit():
    rng = np.random.default_rng(0)
    teacher, student = rng.normal(size=(2, 4, 5)).astype("float32")
    tau = 3.0
    # DeiT losses.py: kl_div(log_softmax(s / T), log_softmax(t / T), "sum", log_target=True)
    # * T * T / s.numel()
    log_p, log_q = log_softmax(student / tau), log_softmax(teacher / tau)
    soft = np.sum(np.exp(log_q) * (log_q - log_p)) * tau * tau / student.size
    np.testing.assert_allclose(to_numpy(distillation_loss("soft", teacher, student, tau)), soft,
                               rtol=1e-5)
    hard = -np.mean(log_softmax(student)[np.arange(4), teacher.argmax(-1)])
    np.testing.assert_allclose(to_numpy(distillation_loss("hard", teacher, student)), hard,
                               rtol=1e-5)


def tiny(**kwargs):
    return keras_vit.ViT("mu/8", image_size=16, num_layers=1, num_classes=3, **kwargs)


@pytest.mark.parametrize("mode", [pytest.param("hard", marks=pytest.mark.slow), "soft"])
def test_train_step_loss_is_deits_split_and_teacher_stays(mode, tmp_path):
    keras.utils.set_random_seed(0)
    student = tiny(distillation_token=True)
    teacher = tiny()
    randomize_weights(student, scale=0.1)
    randomize_weights(teacher, scale=0.3)
    path = str(tmp_path / "teacher.keras")
    teacher.save(path)
    model = Distiller(student, path, mode, tau=2.0)  # a .keras teacher
    model.compile(keras.optimizers.SGD(0.0), build_loss(), metrics=["accuracy"])
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (4, 16, 16, 3)).astype("float32")
    y = np.eye(3)[[0, 1, 2, 0]].astype("float32")
    logs = model.train_on_batch(x, y, return_dict=True)
    cls_head, dist_head = student.get_layer("head"), student.get_layer("head_dist")
    both = keras.Model(student.inputs, [cls_head.output, dist_head.output])
    logits, logits_dist = (to_numpy(t) for t in both(x))
    ce = -np.mean(np.sum(y * log_softmax(logits), -1))
    t_logits = to_numpy(teacher(x))
    expected = 0.5 * ce + 0.5 * to_numpy(distillation_loss(mode, t_logits, logits_dist, 2.0))
    np.testing.assert_allclose(logs["loss"], expected, rtol=1e-4)
    # Metrics and evaluation see the student's own output (the average of both heads).
    np.testing.assert_allclose(to_numpy(model(x))[:, 0], logits, atol=1e-5)
    evaluated = model.evaluate(x, y, verbose=0, return_dict=True)
    np.testing.assert_allclose(evaluated["loss"], to_numpy(build_loss()(y, student(x))),
                               rtol=1e-4)
    assert model.saved_model is student
    assert not any(v.trainable for v in model.teacher.variables)


def test_fit_trains_the_student_only():
    keras.utils.set_random_seed(0)
    student, teacher = tiny(distillation_token=True), tiny()
    randomize_weights(teacher, scale=0.3)
    before = [to_numpy(w) for w in teacher.weights]
    model = Distiller(student, teacher, "hard")
    model.compile(keras.optimizers.Adam(1e-2), build_loss())
    x = np.random.default_rng(1).uniform(-1, 1, (8, 16, 16, 3)).astype("float32")
    history = model.fit(x, np.eye(3)[np.arange(8) % 3], epochs=3, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    for w, b in zip(teacher.weights, before, strict=True):
        np.testing.assert_array_equal(to_numpy(w), b)


def test_errors(tmp_path):
    with pytest.raises(ValueError, match="distillation_token=True"):
        Distiller(tiny(), tiny(), "hard")
    with pytest.raises(ValueError, match="must be one of \\('hard', 'soft'\\)"):
        Distiller(tiny(distillation_token=True), tiny(), "medium")
    with pytest.raises(ValueError, match="distillation_tau .* must be > 0"):
        Distiller(tiny(distillation_token=True), tiny(), "soft", tau=0)
    with pytest.raises(ValueError, match="the student's 3 classes"):
        teacher = keras_vit.ViT("mu/8", image_size=16, num_layers=1, num_classes=4)
        Distiller(tiny(distillation_token=True), teacher, "soft")
    with pytest.raises(FileNotFoundError, match="Teacher model not found"):
        Distiller(tiny(distillation_token=True), os.path.join(tmp_path, "no.keras"))
