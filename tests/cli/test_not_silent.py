"""Settings that used to be accepted or ignored without a word, and raw errors, now end in one
clear line: LoRA flags, config values of the wrong kind, `--augment none`, Keras' error text,
a model too large to build."""

import json

import pytest

from keras_vit.cli import app, main
from keras_vit.cli.config import config_from_args
from keras_vit.cli.types import augment_list


def _error(capsys):
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize(
    "flags", [["--lora-targets", "query,value"], ["--lora-alpha", "4"], ["--lora-targets", "key"]]
)
def test_lora_flags_without_a_rank_are_usage_errors(flags, capsys, tmp_path):
    assert main(["finetune", "--smoke", "--out", str(tmp_path / "o"), *flags]) == 2
    err = _error(capsys)
    assert f"argument {flags[0]}: expected with --lora-rank N" in err
    assert not (tmp_path / "o").exists()


def test_lora_settings_in_a_config_without_a_rank_are_errors(tmp_path):
    from keras_vit.runner import finetune

    for extra in (dict(lora_alpha=2.0), dict(lora_targets=("key",))):
        config = finetune.get_config(smoke=True)
        config.update(out=str(tmp_path / "o"), **extra)
        with pytest.raises(ValueError, match="need a LoRA rank"):
            finetune.run(config)
    assert not (tmp_path / "o").exists()


def test_a_lora_rank_above_the_model_is_refused_and_leaves_no_folder(tmp_path, capsys):
    out = tmp_path / "o"
    argv = ["finetune", "--smoke", "--out", str(out), "--lora-rank", "9999", "--verbose", "0"]
    assert main(argv) == 2
    err = _error(capsys)
    assert "rank must be at most" in err and "Received: rank=9999" in err
    assert not out.exists()


@pytest.mark.parametrize(
    "key, value, expects",
    [
        ("image_size", "abc", "a number"),
        ("augment", "mixup", "a list"),
        ("batch_size", True, "a number"),
        ("checkpoints", "yes", "true or false"),
        ("learning_rate", [], "a number"),
        ("model_overrides", [1], "a dict"),
    ],
)
def test_config_values_of_the_wrong_kind_are_refused_while_reading(tmp_path, key, value, expects):
    path = tmp_path / "exp.json"
    path.write_text(json.dumps({"CONFIG": {key: value}}))
    parser = app.build_parser()
    args = parser.parse_args(["pretrain", "--config", str(path)])
    from keras_vit.runner import pretrain

    with pytest.raises(ValueError) as info:
        config_from_args(pretrain, "pretrain", args)
    message = str(info.value)
    assert f"config key {key!r} expects {expects}" in message and repr(value) in message


def test_config_values_of_the_right_kind_still_read(tmp_path):
    path = tmp_path / "exp.json"
    good = {"image_size": [16, 24], "augment": ["mixup"], "learning_rate": 1, "verbose": 0}
    path.write_text(json.dumps({"CONFIG": good}))
    args = app.build_parser().parse_args(["pretrain", "--config", str(path)])
    from keras_vit.runner import pretrain

    config = config_from_args(pretrain, "pretrain", args)
    assert config["image_size"] == [16, 24] and list(config["augment"]) == ["mixup"]


def test_augment_none_clears_the_config_list(tmp_path):
    assert augment_list("none") == [] and augment_list("") == [] and augment_list(" None ") == []
    path = tmp_path / "exp.json"
    path.write_text(json.dumps({"CONFIG": {"augment": ["mixup", "cutmix"]}}))
    from keras_vit.runner import pretrain

    for value in ("none", ""):
        args = app.build_parser().parse_args(
            ["pretrain", "--config", str(path), "--augment", value]
        )
        assert list(config_from_args(pretrain, "pretrain", args)["augment"]) == []


def test_keras_errors_reach_the_one_line_message_without_colour_or_arguments():
    raw = ValueError(
        "\x1b[1mException encountered when calling Dense.call().\x1b[0m\n\n\x1b[1mInput 0 is "
        "incompatible\x1b[0m\n\nArguments received by Dense.call():\n  • inputs=tf.Tensor("
        "shape=(2, 3), dtype=float32)\n  • weights=[[0.1, 0.2]]"
    )
    text = app._message(raw)
    assert text == "Exception encountered when calling Dense.call(). Input 0 is incompatible."
    assert app._message(RuntimeError("\x1b[31mboom\x1b[0m")) == "RuntimeError: boom."


def test_a_model_too_large_to_build_is_refused_before_allocating():
    from keras_vit.layers.patch_encoder import MAX_TOKENS
    from keras_vit.models.vit import ViT

    with pytest.raises(
        ValueError, match=rf"62,500,000,000 patch tokens.*more than the {MAX_TOKENS:,}"
    ):
        ViT("mu/4", image_size=10**6)
    side = int(MAX_TOKENS**0.5) * 4
    with pytest.raises(ValueError, match="use a smaller image_size"):
        ViT("mu/4", image_size=(side + 4, side))
