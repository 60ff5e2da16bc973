"""`--patch-sizes` (FlexiViT) on the pretrain and finetune recipes: smoke runs through the CLI."""

import json
import os

import keras
import pytest

pytest.importorskip("tensorflow")

import keras_vit  # noqa: E402
from keras_vit.cli import main  # noqa: E402
from keras_vit.runner import finetune, pretrain  # noqa: E402
from keras_vit.runner.flexi import check_patch_sizes  # noqa: E402


@pytest.mark.slow
def test_pretrain_with_patch_sizes_then_finetune_from_it(tmp_path):
    pre = str(tmp_path / "pre")
    argv = ["--smoke", "--patch-sizes", "2,4,8", "--out", pre, "--verbose", "0"]
    assert main(["pretrain", *argv]) == 0
    with open(os.path.join(pre, "metrics.json")) as f:
        metrics = json.load(f)
    assert metrics["model"]["patch_sizes"] == [2, 4, 8]
    assert metrics["model"]["eval_patch_size"] == [4, 4]  # the smoke model's own (mu/4)
    assert len(metrics["history"]["loss"]) == 3 and 0.0 <= metrics["test_accuracy"] <= 1.0
    model = keras.saving.load_model(os.path.join(pre, "model.keras"))
    assert isinstance(model, keras_vit.FlexiViT) and model.patch_sizes == ((2, 2), (4, 4), (8, 8))
    assert keras_vit.with_patch_size(model, 8).output_shape == (None, metrics["num_classes"])

    fine = str(tmp_path / "fine")
    init = os.path.join(pre, "model.keras")
    argv = ["--smoke", "--init", init, "--out", fine, "--verbose", "0", "--steps-per-epoch", "2"]
    assert main(["finetune", *argv]) == 0
    tuned = keras.saving.load_model(os.path.join(fine, "model.keras"))
    assert not isinstance(tuned, keras_vit.FlexiViT) and tuned.input_shape == (None, 16, 16, 3)


def test_patch_sizes_are_checked_before_any_data(capsys):
    assert main(["pretrain", "--smoke", "--patch-sizes", "4,5"]) == 2
    error = capsys.readouterr().err
    assert "--patch-sizes must be positive ints that divide the image size" in error
    config = dict(finetune.get_config(smoke=True), patch_sizes=[4], lora_rank=2)
    with pytest.raises(ValueError, match="cannot be combined"):
        check_patch_sizes(config)
    assert check_patch_sizes(pretrain.get_config(smoke=True)) is None
    assert check_patch_sizes(dict(pretrain.get_config(), patch_sizes=[2, 8])) == (2, 8)


def test_mpp_refuses_patch_sizes(capsys):
    from keras_vit.runner import pretrain_mpp

    config = dict(pretrain_mpp.get_config(smoke=True), patch_sizes=[2, 4])
    with pytest.raises(ValueError, match="pretrain and finetune only"):
        pretrain_mpp.run(config)
