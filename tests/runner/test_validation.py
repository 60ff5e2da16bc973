"""Per-epoch validation and best.keras see the validation split only; the test split is evaluated
once; metrics.json names each figure's split; a resume keeps the split (keras_vit/runner/setup.py,
run.py, resume.py)."""

import json
import os

import keras
import pytest

pytest.importorskip("tensorflow")

from keras_vit.cli import main  # noqa: E402
from keras_vit.runner import pretrain  # noqa: E402

DATASET = "synthetic:3:40:16"  # 40 training images (3 classes), 10 test images


class CountValidation(keras.callbacks.Callback):
    """Counts the batches `fit` validates on (evaluation batches of 1: the examples)."""

    def __init__(self):
        super().__init__()
        self.batches = 0

    def on_test_batch_end(self, batch, logs=None):
        self.batches += 1


class Stop(Exception):
    pass


class StopAfterFirstEpoch(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        raise Stop()


def config(out, **overrides):
    base = pretrain.get_config(smoke=True)
    base.update(
        out=str(out), verbose=0, jit_compile=False, dataset=DATASET, batch_size=8,
        steps_per_epoch=2, eval_batch_size=1, tensorboard=False,
    )  # fmt: skip
    base.update(overrides)
    return base


def test_validation_and_best_keras_use_the_carved_split_and_test_is_named(tmp_path):
    counter = CountValidation()
    metrics = pretrain.run(config(tmp_path / "run", validation_fraction=0.1), [counter])
    # One validation pass (validation_freq 3 of 3 epochs) over the 4 carved images, not the test.
    assert counter.batches == metrics["num_validation_examples"] == 4
    sizes = ("num_train_examples", "num_validation_examples", "num_test_examples")
    assert [metrics[key] for key in sizes] == [36, 4, 10]
    splits = metrics["splits"]
    assert [splits[k]["examples"] for k in ("train", "validation", "test")] == [36, 4, 10]
    assert splits["validation"]["source"] == "carved from train (fraction 0.1, seed 0, stratified)"
    assert "best.keras" in splits["validation"]["figures"]
    assert splits["test"]["figures"].startswith("test_*")
    assert "val_accuracy" in metrics["history"] and 0 <= metrics["test_accuracy"] <= 1
    assert os.path.exists(tmp_path / "run" / "checkpoints" / "best.keras")
    with open(tmp_path / "run" / "metrics.json") as f:
        assert json.load(f)["splits"] == splits


def test_fraction_zero_means_no_validation_and_no_best_keras(tmp_path, capsys):
    counter = CountValidation()
    metrics = pretrain.run(config(tmp_path / "run", validation_fraction=0), [counter])
    assert "No validation split (none (validation_fraction 0)" in capsys.readouterr().out
    assert counter.batches == 0 and metrics["num_validation_examples"] == 0
    assert (
        metrics["num_train_examples"] == 40 and metrics["splits"]["validation"]["figures"] == "none"
    )
    assert not any(key.startswith("val_") for key in metrics["history"])
    assert not os.path.exists(tmp_path / "run" / "checkpoints" / "best.keras")


@pytest.mark.parametrize("fraction", [1.0, -0.5, "0.1"])
def test_bad_validation_fraction_is_refused_before_anything_is_written(tmp_path, fraction):
    with pytest.raises(ValueError, match=r"validation_fraction \(--validation-fraction\)"):
        pretrain.run(config(tmp_path / "run", validation_fraction=fraction))
    assert not (tmp_path / "run").exists()


def test_a_carve_that_leaves_a_part_empty_is_refused_and_leaves_no_folder(tmp_path):
    with pytest.raises(ValueError, match=r"0.01 of the 40 training examples"):
        pretrain.run(config(tmp_path / "small", validation_fraction=0.01))
    assert not (tmp_path / "small").exists()


def test_the_cli_refuses_an_out_of_range_flag(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["pretrain", "--smoke", "--out", str(out), "--validation-fraction", "1"]) == 2
    err = capsys.readouterr().err
    assert "argument --validation-fraction: expected a number in [0, 1); received '1'" in err
    assert not out.exists()


def test_a_resume_keeps_the_split_and_refuses_another(tmp_path, capsys):
    out = tmp_path / "run"
    with pytest.raises(Stop):
        pretrain.run(config(out, validation_fraction=0.25), callbacks=[StopAfterFirstEpoch()])
    with open(out / "backup" / "run_config.json") as f:
        recorded = json.load(f)["splits"]
    assert recorded["validation"] == {
        "examples": 10,
        "source": "carved from train (fraction 0.25, seed 0, stratified)",
    }
    with pytest.raises(ValueError) as info:
        pretrain.run(config(out, validation_fraction=0.1))
    message = str(info.value)
    assert "Cannot resume" in message and "data splits (--validation-fraction" in message
    counter = CountValidation()
    metrics = pretrain.run(config(out, validation_fraction=0.25), [counter])
    assert metrics["resumed_at_epoch"] == 1 and counter.batches == 10
    assert {k: {"examples": v["examples"], "source": v["source"]}
            for k, v in metrics["splits"].items()} == recorded  # fmt: skip
