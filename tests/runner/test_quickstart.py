import json
import os

import keras
import numpy as np
import pytest

from keras_vit.runner.quickstart import train


def test_quickstart_smoke(tmp_path):
    """A short quickstart (3 of the default 60 epochs) warms up for 5% of its own run (3 of its 57
    steps); it used to refuse every run shorter than 4 epochs (warmup 57 > total steps)."""
    metrics = train(out_dir=str(tmp_path), verbose=0, epochs=3, num_layers=1)
    losses = metrics["train_loss"]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert metrics["backend"] == keras.backend.backend()
    assert 0.0 <= metrics["test_accuracy"] <= 1.0 and metrics["test_examples"] == 540
    with open(tmp_path / "metrics.json") as f:
        saved = json.load(f)
    assert saved["test_accuracy"] == metrics["test_accuracy"]
    assert (saved["total_steps"], saved["warmup_steps"]) == (57, 3)
    model = keras.saving.load_model(os.path.join(tmp_path, "model.keras"))
    assert model.output_shape == (None, 10)


def test_quickstart_uses_the_runner_digits_split():
    """The runner's digits source holds out scikit-learn's stratified 30% (split seed 0)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    from keras_vit import data

    target = load_digits().target
    y_train, y_test = train_test_split(target, test_size=0.3, random_state=0, stratify=target)
    for split, labels in (("train", y_train), ("test", y_test)):
        source = data.load_source("digits", split)
        np.testing.assert_array_equal(data.numpy_arrays(data.eval_pipeline(
            source, image_size=8, batch_size=512))[1], labels)


def test_quickstart_refuses_a_finished_out_and_rejects_unknown_settings(tmp_path):
    (tmp_path / "metrics.json").write_text("{}")
    with pytest.raises(FileExistsError, match="--overwrite"):
        train(out_dir=str(tmp_path), verbose=0, epochs=1)
    with pytest.raises(ValueError, match="test_fraction"):
        train(out_dir=str(tmp_path / "new"), verbose=0, test_fraction=0.2)


def test_quickstart_validates_on_a_carved_split_only_when_asked(tmp_path):
    from keras_vit.runner.quickstart import quickstart_config

    assert quickstart_config(str(tmp_path))["validation_freq"] == 0
    metrics = train(out_dir=str(tmp_path), verbose=0, epochs=2, warmup_epochs=1, num_layers=1,
                    validation_fraction=0.1)
    assert (metrics["validation_examples"], metrics["test_examples"]) == (126, 540)
    with open(tmp_path / "metrics.json") as f:
        saved = json.load(f)
    assert "val_accuracy" in saved["history"] and saved["num_train_examples"] == 1131
