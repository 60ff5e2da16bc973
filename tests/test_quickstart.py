import json
import os

import keras
import numpy as np
import pytest

from keras_vit.quickstart import load_digits, random_affine, run


def test_digits_split_is_fixed_and_scaled():
    x_train, x_test, y_train, y_test = load_digits(image_size=16)
    assert x_train.shape == (1257, 16, 16, 1) and x_test.shape == (540, 16, 16, 1)
    assert 0 <= x_train.min() and x_train.max() <= 255
    np.testing.assert_array_equal(load_digits(image_size=16)[3], y_test)


def test_random_affine_identity_and_shape():
    rng = np.random.default_rng(0)
    images = np.random.rand(4, 16, 16, 1).astype("float32")
    same = random_affine(images, rng, max_shift=0, max_rotation=0, scale=(1, 1))
    np.testing.assert_allclose(same, images, atol=1e-6)
    moved = random_affine(images, rng)
    assert moved.shape == images.shape and not np.allclose(moved, images)


def test_quickstart_smoke(tmp_path):
    metrics = run(out_dir=str(tmp_path), verbose=0, epochs=3, warmup_epochs=1, num_layers=1)
    losses = metrics["train_loss"]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert metrics["backend"] == keras.backend.backend()
    assert 0.0 <= metrics["test_accuracy"] <= 1.0 and metrics["test_examples"] == 540
    with open(tmp_path / "metrics.json") as f:
        assert json.load(f)["test_accuracy"] == metrics["test_accuracy"]
    model = keras.saving.load_model(os.path.join(tmp_path, "model.keras"))
    assert model.output_shape == (None, 10)


def test_quickstart_uses_the_runner_digits_split():
    """The runner's digits source holds out the same stratified 30% as `load_digits`."""
    from keras_vit.training import data

    _, _, y_train, y_test = load_digits(image_size=16)
    for split, labels in (("train", y_train), ("test", y_test)):
        source = data.load_source("digits", split)
        np.testing.assert_array_equal(data.numpy_arrays(data.eval_pipeline(
            source, image_size=8, batch_size=512))[1], labels)


def test_quickstart_refuses_a_finished_out_and_rejects_unknown_settings(tmp_path):
    (tmp_path / "metrics.json").write_text("{}")
    with pytest.raises(FileExistsError, match="--overwrite"):
        run(out_dir=str(tmp_path), verbose=0, epochs=1)
    with pytest.raises(ValueError, match="test_fraction"):
        run(out_dir=str(tmp_path / "new"), verbose=0, test_fraction=0.2)
