"""Tests for keras_vit/cli: the command table, values checked while parsing, the error policy."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from keras_vit.cli import COMMANDS, app, build_parser, main
from keras_vit.cli.config import config_from_args, read_config_file
from tests.helpers import backend_independent

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAMES = [
    "quickstart",
    "pretrain",
    "finetune",
    "fewshot",
    "pretrain-mpp",
    "pretrain-mae",
    "convert",
    "weights",
    "export",
    "plan",
    "inspect",
]


def error_of(capsys):
    """stderr of the last command, checked to be one paragraph without a traceback."""
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    return err


# --- the table and the parser --------------------------------------------------------------------


def test_the_table_has_every_command():
    assert list(COMMANDS) == NAMES
    parser = build_parser()
    assert list(parser.subcommands) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_help_exits_0_and_names_every_flag(name, capsys):
    assert main([name, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: keras-vit {name}")
    flags = [
        option
        for action in build_parser().subcommands[name]._actions
        for option in action.option_strings
    ]
    assert "--debug" in flags and len(flags) > 2
    for flag in flags:
        assert flag in out, flag
    if name in ("pretrain", "finetune", "fewshot", "pretrain-mpp", "quickstart", "convert"):
        assert "--overwrite" in out  # and the convention is said in the epilog
    assert "never write over existing work unless given --overwrite" in " ".join(out.split())


def test_top_level_help_and_unknown_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in NAMES:
        assert name in out
    assert main(["nope"]) == 2
    err = error_of(capsys)
    assert err.startswith("keras-vit: error:") and "'nope'" in err and "pretrain-mpp" in err
    assert main([]) == 2


@backend_independent  # --help and a usage error load no framework (tests/cli/test_quiet.py)
def test_python_dash_m_keras_vit_runs_the_cli():
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run(
        [sys.executable, "-m", "keras_vit", "--help"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: keras-vit") and "pretrain-mpp" in result.stdout
    result = subprocess.run(
        [sys.executable, "-m", "keras_vit", "pretrain", "--steps", "0"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 2
    assert "keras-vit pretrain: error: argument --steps" in result.stderr


# --- values checked while parsing ------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, named",
    [
        (["pretrain", "--steps", "0"], "--steps"),
        (["pretrain", "--epochs", "-1"], "--epochs"),
        (["finetune", "--batch-size", "0"], "--batch-size"),
        (["finetune", "--steps-per-epoch", "0"], "--steps-per-epoch"),
        (["finetune", "--warmup-steps", "-1"], "--warmup-steps"),
        (["finetune", "--lora-rank", "0"], "--lora-rank"),
        (["finetune", "--lora-rank", "2", "--lora-alpha", "0"], "--lora-alpha"),
        (["pretrain", "--num-layers", "0"], "--num-layers"),
        (["pretrain", "--dropout", "1.0"], "--dropout"),
        (["pretrain", "--label-smoothing", "-0.1"], "--label-smoothing"),
        (["pretrain", "--lr", "0"], "--lr"),
        (["pretrain", "--crop-scale", "0.9,0.1"], "--crop-scale"),
        (["pretrain", "--image-size", "0"], "--image-size"),
        (["pretrain-mpp", "--corruption-rate", "1.5"], "--corruption-rate"),
        (["fewshot", "--shots", "0,5"], "--shots"),
        (["quickstart", "--epochs", "0"], "--epochs"),
        (["quickstart", "--batch-size", "0"], "--batch-size"),
        (["inspect", "m.keras", "--image", "x.png", "--out", "o", "--discard-ratio", "1"],
         "--discard-ratio"),
        (["convert", "a.npz", "b.keras", "--model", "B/16", "--num-classes", "0"],
         "--num-classes"),
    ],
)
def test_bad_values_are_usage_errors(argv, named, capsys):
    assert main(argv) == 2
    err = error_of(capsys)
    assert err.startswith(f"keras-vit {argv[0]}: error: argument {named}")
    assert "received" in err and f"keras-vit {argv[0]} --help" in err


def test_steps_and_epochs_together_say_which_to_keep(capsys):
    assert main(["finetune", "--steps", "10", "--epochs", "2"]) == 2
    err = error_of(capsys)
    assert "not both" in err and "Keep --steps" in err and "--epochs" in err


def test_fewshot_has_no_ignored_distribution_flag(capsys):
    assert main(["fewshot", "--distribution", "data_parallel"]) == 2
    assert "unrecognized arguments: --distribution" in error_of(capsys)


# --- the error policy ------------------------------------------------------------------------


def _replace_run(monkeypatch, error):
    def run(args):
        raise error

    command = dataclasses.replace(COMMANDS["weights"], run=run, needs=())
    monkeypatch.setitem(COMMANDS, "weights", command)


def test_user_mistake_is_exit_2_in_one_paragraph(monkeypatch, capsys):
    _replace_run(monkeypatch, ValueError("expected a thing.\nReceived: another"))
    assert main(["weights"]) == 2
    assert error_of(capsys) == "keras-vit weights: error: expected a thing. Received: another."
    _replace_run(monkeypatch, FileExistsError("out.keras exists"))
    assert main(["weights"]) == 2
    assert "out.keras exists. Pass --overwrite" in error_of(capsys)


def test_runtime_failure_is_exit_1_with_a_debug_hint(monkeypatch, capsys):
    monkeypatch.delenv("KERAS_VIT_DEBUG", raising=False)
    _replace_run(monkeypatch, RuntimeError("the device fell over"))
    assert main(["weights"]) == 1
    err = error_of(capsys)
    assert err.startswith("keras-vit weights: error: RuntimeError: the device fell over.")
    assert "--debug" in err
    assert main(["--debug", "weights"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "the device fell over" in err
    assert main(["weights", "--debug"]) == 1  # after the command too
    assert "Traceback" in capsys.readouterr().err
    monkeypatch.setenv("KERAS_VIT_DEBUG", "1")
    assert main(["weights"]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_user_mistake_never_shows_a_traceback_without_debug(monkeypatch, capsys):
    monkeypatch.delenv("KERAS_VIT_DEBUG", raising=False)
    _replace_run(monkeypatch, FileNotFoundError(2, "No such file or directory", "data/x.npz"))
    assert main(["weights"]) == 2
    assert error_of(capsys) == (
        "keras-vit weights: error: No such file or directory: 'data/x.npz'. Check the path."
    )


def test_keyboard_interrupt_is_exit_130(monkeypatch, capsys):
    _replace_run(monkeypatch, KeyboardInterrupt())
    assert main(["weights"]) == 130
    assert "interrupted" in capsys.readouterr().err


def test_missing_extra_names_what_to_install(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name)
    )
    assert main(["inspect", "m.keras", "--image", "x.png", "--out", "o"]) == 2
    err = error_of(capsys)
    assert "needs matplotlib" in err and 'pip install "keras-vit[recipes]"' in err


# --- convert ---------------------------------------------------------------------------------


def test_convert_refuses_to_overwrite(tmp_path, capsys):
    output = tmp_path / "model.keras"
    output.write_bytes(b"earlier work")
    argv = ["convert", str(tmp_path / "ViT.npz"), str(output), "--model", "mu/8"]
    assert main(argv) == 2
    err = error_of(capsys)
    assert str(output) in err and "--overwrite" in err
    assert output.read_bytes() == b"earlier work"
    assert main([*argv, "--overwrite"]) == 2  # now the missing checkpoint is the mistake
    assert "ViT.npz" in error_of(capsys)


def _timm_ti16_checkpoint(path):
    """Random weights with timm's names and shapes of `vit_tiny_patch16_224`, as .safetensors."""
    import numpy as np

    import keras_vit
    from keras_vit.models.config import ViTConfig
    from keras_vit.weights.state_dict import write_safetensors
    from keras_vit.weights.timm.reader import timm_name_table

    model = keras_vit.ViT("Ti/16", num_classes=3, image_size=32)
    variables = {v.path: tuple(v.shape) for v in model.weights}
    variables["patch_encoder/position_embeddings"] = (1, 197, 192)  # trained at 224 px
    rng = np.random.default_rng(0)
    arrays = {}
    for key, (paths, transform) in timm_name_table(ViTConfig.from_model(model)).items():
        paths = (paths,) if isinstance(paths, str) else paths
        shape = transform.source_shape(tuple(variables[p] for p in paths))
        arrays[key] = rng.normal(0, 0.2, shape).astype("float32")
    return arrays, write_safetensors(arrays, path)


def test_convert_from_timm(tmp_path, capsys):
    import numpy as np

    import keras_vit
    from tests.helpers import to_numpy

    _, checkpoint = _timm_ti16_checkpoint(tmp_path / "ti16.safetensors")
    output = tmp_path / "ti16.keras"
    name = "vit_tiny_patch16_224.augreg_in21k_ft_in1k"
    argv = ["convert", "--from", "timm", name, checkpoint, str(output), "--image-size", "32"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert f"Wrote {output}: vit_tiny_patch16_224, input (32, 32, 3), output (3,)" in captured.out
    assert "resized pos_embed from (1, 197, 192) to (1, 5, 192)" in captured.err
    assert "assigned 200 model weights" in captured.err  # 152 arrays, qkv split in three
    # The file holds what from_timm builds (tests/weights/timm/test_reader.py checks that against timm).
    images = np.random.default_rng(1).uniform(-1, 1, (1, 32, 32, 3)).astype("float32")
    expected = keras_vit.from_timm(name, checkpoint, image_size=32)(images)
    actual = keras_vit.load_model(str(output))(images)
    np.testing.assert_allclose(to_numpy(actual), to_numpy(expected), rtol=1e-6, atol=1e-6)
    capsys.readouterr()  # from_timm's own log lines
    assert main(argv) == 2 and "--overwrite" in error_of(capsys)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--from", "timm", "vit_tiny_patch16_224"],
         "expects 3 arguments, NAME CHECKPOINT OUTPUT (or 2, NAME OUTPUT"),
        (["--from", "timm", "resnet50", "x.safetensors", "out.keras"],
         "Unknown timm model name 'resnet50'"),
        (["--from", "timm", "vit_tiny_patch16_224", "x.safetensors", "o.keras", "--pooling", "gap"],
         "--pooling applies to --from npz only"),
        (["--from", "huggingface", "missing_folder", "out.keras"],
         "Hugging Face model folder not found"),
        (["a.npz", "b.keras"], "needs --model"),
        (["--from", "timm", "vit_tiny_patch16_224", "missing.safetensors", "o.keras"],
         "Checkpoint file not found"),
    ],
)  # fmt: skip
def test_convert_mistakes_exit_2(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["convert", *argv]) == 2
    err = error_of(capsys)
    assert err.startswith("keras-vit convert: error:") and message in err


def test_convert_from_huggingface(tmp_path, capsys):
    from tests.weights.references import import_torch, import_transformers

    torch, transformers = import_torch(), import_transformers()
    import numpy as np

    config = transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        image_size=32, patch_size=8, num_labels=4,
    )  # fmt: skip
    model = transformers.ViTForImageClassification(config).eval()
    model.save_pretrained(tmp_path / "hf")
    output = tmp_path / "hf.keras"
    assert main(["convert", "--from", "huggingface", str(tmp_path / "hf"), str(output)]) == 0
    assert "output (4,)" in capsys.readouterr().out
    import keras_vit

    images = np.random.default_rng(2).uniform(-1, 1, (1, 32, 32, 3)).astype("float32")
    with torch.no_grad():
        expected = model(torch.from_numpy(images).permute(0, 3, 1, 2)).logits.numpy()
    actual = keras_vit.load_model(str(output)).predict(images, verbose=0)
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)


# --- experiment files (--config) --------------------------------------------------------------


def write(tmp_path, text, name="exp.py"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    "text, line",
    [
        ("CONFIG = __import__('os').system('echo hi')\n", 1),
        ('"""Doc."""\nimport os\n', 2),
        ("CONFIG = dict(steps=1 + len('ab'))\n", 1),
        ("X = 1\nCONFIG = {}\nprint(X)\n", 3),
        ("CONFIG = dict(**{'a': 1})\n", 1),
    ],
)
def test_config_file_is_literal_data(tmp_path, text, line):
    path = write(tmp_path, text)
    with pytest.raises(ValueError, match=f"{path}, line {line}: expected"):
        read_config_file(path)


def test_config_file_reads_literals_and_json(tmp_path):
    path = write(
        tmp_path,
        '"""An experiment."""\n# a comment\nRECIPE = "pretrain"\nPRESET = "paper"\n'
        "CONFIG = dict(steps=5, crop_scale=(0.5, 1.0), model_overrides={'num_layers': -2})\n",
    )
    assert read_config_file(path) == {
        "RECIPE": "pretrain",
        "PRESET": "paper",
        "CONFIG": {"steps": 5, "crop_scale": (0.5, 1.0), "model_overrides": {"num_layers": -2}},
    }
    path = write(tmp_path, json.dumps({"CONFIG": {"steps": 5}}), "exp.json")
    assert read_config_file(path) == {"RECIPE": None, "PRESET": None, "CONFIG": {"steps": 5}}
    with pytest.raises(ValueError, match="expected only the names RECIPE, PRESET, CONFIG"):
        read_config_file(write(tmp_path, "STEPS = 5\n"))
    with pytest.raises(ValueError, match="expected CONFIG to be a dict"):
        read_config_file(write(tmp_path, "CONFIG = [1]\n"))
    with pytest.raises(FileNotFoundError, match="nope.py"):
        read_config_file(str(tmp_path / "nope.py"))


class FakeRecipe:
    """A recipe module's `get_config` (the real ones import TensorFlow-only code)."""

    @staticmethod
    def get_config(preset="digits", smoke=False):
        config = dict(
            model="Ti/4",
            model_overrides={"num_layers": 4},
            steps=None,
            epochs=30 if preset == "digits" else 90,
            learning_rate=1e-3,
            crop_scale=(0.6, 1.0),
            seed=0,
            out="runs/pretrain",
            distribution=None,
            verbose="auto",
        )
        if smoke:
            config.update(model="mu/4", model_overrides={}, epochs=3)
        return config


def config_for(*argv, command="pretrain"):
    args = build_parser().parse_args([command, *argv])
    return config_from_args(FakeRecipe, command, args)


def test_config_precedence_preset_file_smoke_flags(tmp_path):
    path = write(
        tmp_path,
        'PRESET = "paper"\nCONFIG = dict(learning_rate=0.5, seed=7, crop_scale=[0.2, 1.0])\n',
    )
    config = config_for("--config", path)
    assert config["epochs"] == 90  # the file's preset
    assert config["learning_rate"] == 0.5 and config["seed"] == 7  # the file over the preset
    assert config["crop_scale"] == (0.2, 1.0)  # a list where the recipe has a tuple
    config = config_for("--config", path, "--seed", "3", "--preset", "digits", "--smoke")
    assert config["seed"] == 3 and config["learning_rate"] == 0.5  # flags over the file
    assert config["epochs"] == 3 and config["model"] == "mu/4"  # the smoke shrink over the file
    config = config_for("--steps", "100", "--distribution", "none", "--verbose", "0")
    assert config["steps"] == 100 and config["epochs"] is None
    assert config["distribution"] is None and config["verbose"] == 0
    config = config_for("--model", "S/16")
    assert config["model_overrides"] == {}  # a new variant code brings its own sizes
    config = config_for("--num-heads", "2")
    assert config["model_overrides"] == {"num_layers": 4, "num_heads": 2}


def test_config_file_mistakes_are_clear(tmp_path, capsys):
    path = write(tmp_path, "CONFIG = dict(learning_rat=0.1)\n")
    with pytest.raises(ValueError, match=r"unknown config key 'learning_rat'.*learning_rate"):
        config_for("--config", path)
    path = write(tmp_path, "CONFIG = dict(steps=10, epochs=2)\n")
    with pytest.raises(ValueError, match="steps or epochs, not both"):
        config_for("--config", path)
    path = write(tmp_path, 'RECIPE = "finetune"\n')
    with pytest.raises(ValueError, match="keras-vit finetune --config"):
        config_for("--config", path)
    # Through main: exit 2 and one paragraph naming the file, before anything is built.
    assert main(["pretrain", "--config", path, "--out", str(tmp_path / "never")]) == 2
    err = error_of(capsys)
    assert path in err and "RECIPE = 'finetune'" in err
    assert not (tmp_path / "never").exists()


def test_overwrite_flag_reaches_the_config():
    from keras_vit.runner import pretrain

    args = build_parser().parse_args(["pretrain", "--overwrite"])
    assert args.overwrite is True
    assert config_from_args(pretrain, "pretrain", args)["overwrite"] is True
    assert config_from_args(pretrain, "pretrain", build_parser().parse_args(["pretrain"]))[
        "overwrite"
    ] is False


def test_config_file_that_is_not_utf8_names_the_file(tmp_path):
    path = tmp_path / "latin1.py"
    path.write_bytes('CONFIG = dict(out="caf\xe9")\n'.encode("latin-1"))
    with pytest.raises(ValueError, match="is not UTF-8") as info:
        config_for("--config", str(path))
    assert str(path) in str(info.value)


@pytest.mark.parametrize("name", sorted(os.listdir(os.path.join(ROOT, "recipes"))))
def test_every_experiment_file_reads_with_known_keys(name):
    if not name.endswith(".py"):
        return
    path = os.path.join(ROOT, "recipes", name)
    experiment = read_config_file(path)
    assert experiment["RECIPE"] in COMMANDS and experiment["PRESET"] in ("digits", "paper")
    with open(path) as f:
        doc = f.read().split('"""')[1]
    assert f"keras-vit {experiment['RECIPE']} --config recipes/{name}" in doc
    assert "Hardware:" in doc and "Expected:" in doc
    pytest.importorskip("tensorflow")
    import importlib

    module = importlib.import_module(f"keras_vit.runner.{experiment['RECIPE'].replace('-', '_')}")
    args = build_parser().parse_args([experiment["RECIPE"], "--config", path])
    config = config_from_args(module, experiment["RECIPE"], args)
    for key, value in experiment["CONFIG"].items():
        assert config[key] == value


def test_app_module_lists_the_user_errors():
    assert FileExistsError in app.USER_ERRORS and RuntimeError not in app.USER_ERRORS
