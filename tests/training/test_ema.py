"""Weight EMA through `build_optimizer(ema_momentum=...)` (Keras' `use_ema`): the average, its
replacing the weights at the end of `fit`, and its restoring from a backup."""

import keras
import numpy as np

import keras_vit
from keras_vit.runner.backup import AtomicBackupAndRestore
from keras_vit.training import build_optimizer
from tests.helpers import to_numpy

X = np.random.default_rng(0).uniform(-1, 1, (8, 16, 16, 3)).astype("float32")
Y = np.eye(3)[np.arange(8) % 3].astype("float32")


def tiny():
    keras.utils.set_random_seed(0)
    return keras_vit.ViT("mu/8", image_size=16, num_layers=1, num_classes=3)


def test_average_and_its_replacing_the_weights():
    model = tiny()
    opt = build_optimizer("sgd", 0.1, ema_momentum=0.5, global_clipnorm=None)
    variables = model.trainable_variables
    opt.build(variables)
    rng = np.random.default_rng(0)
    averages = None
    for _ in range(3):
        grads = [rng.normal(size=v.shape).astype("float32") for v in variables]
        opt.apply([keras.ops.convert_to_tensor(g) for g in grads], variables)
        step = [to_numpy(v) for v in variables]
        if averages is None:  # the first step copies the weights, later ones average at 0.5
            averages = step
        else:
            averages = [0.5 * a + 0.5 * w for a, w in zip(averages, step, strict=True)]
    opt.finalize_variable_values(variables)  # what fit does at its end
    for variable, expected in zip(variables, averages, strict=True):
        np.testing.assert_allclose(to_numpy(variable), expected, rtol=1e-5, atol=1e-6)


def test_fit_ends_with_the_average():
    model = tiny()
    model.compile(build_optimizer("adam", 1e-2, ema_momentum=0.9), "mse")
    model.fit(X, Y, batch_size=4, epochs=1, verbose=0)
    for variable, average in zip(
        model.trainable_variables, model.optimizer._model_variables_moving_average, strict=True
    ):
        np.testing.assert_array_equal(to_numpy(variable), to_numpy(average))


def test_backup_restores_the_average(tmp_path):
    model = tiny()
    model.compile(build_optimizer("adamw", 1e-2, weight_decay=0.1, ema_momentum=0.9), "mse")
    backup = AtomicBackupAndRestore(str(tmp_path / "backup"))
    model.fit(X, Y, batch_size=4, epochs=1, verbose=0, callbacks=[backup])
    saved = [to_numpy(v) for v in model.optimizer._model_variables_moving_average]
    again = tiny()
    again.compile(build_optimizer("adamw", 1e-2, weight_decay=0.1, ema_momentum=0.9), "mse")
    restore = AtomicBackupAndRestore(str(tmp_path / "backup"))
    restore.set_model(again)
    restore.on_train_begin()
    restored = [to_numpy(v) for v in again.optimizer._model_variables_moving_average]
    assert len(restored) == len(saved)
    for a, b in zip(restored, saved, strict=True):
        np.testing.assert_array_equal(a, b)
