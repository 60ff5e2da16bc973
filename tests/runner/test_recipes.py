"""Smoke runs of the pretrain / finetune / fewshot recipes through their CLI commands."""

import json
import math
import os

import keras
import numpy as np
import pytest

pytest.importorskip("tensorflow")

from keras_vit.cli import main  # noqa: E402
from keras_vit.models.vit import ViT  # noqa: E402
from keras_vit.runner import finetune  # noqa: E402
from tests.helpers import randomize_weights, to_numpy  # noqa: E402


def cli(command, *argv):
    return main([command, *argv])


def check_training_artefacts(out, zero_head=False):
    for path in ("model.keras", "metrics.json", "log.csv", "checkpoints/last.keras",
                 "checkpoints/best.keras", "logs"):
        assert os.path.exists(os.path.join(out, path)), path
    assert not os.path.exists(os.path.join(out, "backup"))  # removed after a finished run
    with open(os.path.join(out, "metrics.json")) as f:
        metrics = json.load(f)
    losses = metrics["history"]["loss"]
    assert len(losses) == 3 and all(math.isfinite(v) for v in losses)
    if zero_head:
        # A zero-initialised head starts at exactly ln(K): the held-out loss must end below it
        # (SGD's per-epoch training losses over 3 x 3 steps are too noisy to compare).
        assert metrics["test_loss"] < math.log(metrics["num_classes"]) - 1e-4, metrics["test_loss"]
    else:
        assert losses[-1] < losses[0], losses
    assert 0.0 <= metrics["test_accuracy"] <= 1.0
    assert metrics["backend"] == keras.backend.backend()
    keras.saving.load_model(os.path.join(out, "model.keras"))
    return metrics


def test_pretrain_then_finetune_at_a_new_resolution(tmp_path):
    pre = str(tmp_path / "pre")
    code = cli("pretrain", "--smoke", "--out", pre, "--verbose", "0", "--jit-compile", "false")
    assert code == 0
    metrics = check_training_artefacts(pre)
    assert metrics["total_steps"] == 24 and metrics["config"]["optimizer"] == "adamw"
    assert metrics["config"]["jit_compile"] is False

    fine = str(tmp_path / "fine")
    # 16 steps per epoch: the zero-head check below needs more than the smoke's 3 x 8 SGD steps
    # to be clear of noise on every backend.
    code = cli("finetune", "--smoke", "--init", os.path.join(pre, "model.keras"),
               "--image-size", "24", "--remat", "--out", fine, "--verbose", "0",
               "--steps-per-epoch", "16")
    assert code == 0
    metrics = check_training_artefacts(fine, zero_head=True)
    assert metrics["model"]["source_image_size"] == [16, 16]
    model = keras.saving.load_model(os.path.join(fine, "model.keras"))
    assert model.input_shape == (None, 24, 24, 3)
    blocks = [layer for layer in model.layers if layer.name.startswith("encoderblock_")]
    assert blocks and all(block.remat for block in blocks)  # --remat reached the model
    assert metrics["config"]["optimizer"] == "sgd" and metrics["config"]["decay"] == "cosine"


def test_fewshot_smoke(tmp_path):
    model = ViT("mu/4", image_size=16, num_classes=10, representation_size=16)
    randomize_weights(model, scale=0.1)
    path = str(tmp_path / "m.keras")
    model.save(path)
    out = str(tmp_path / "fs")
    assert cli("fewshot", "--smoke", "--model-path", path, "--out", out) == 0
    with open(os.path.join(out, "metrics.json")) as f:
        metrics = json.load(f)
    assert set(metrics["shots"]) == {"1", "2"}
    assert metrics["feature_dim"] == 16  # pre-logits features
    for result in metrics["shots"].values():
        assert 0.0 <= result["accuracy_mean"] <= 1.0


def test_fewshot_refuses_a_pretraining_model_naming_its_encoder(tmp_path, capsys):
    """`fewshot --model-path mae.keras` ended in `AttributeError: 'MaskedAutoencoder' object
    has no attribute 'input'` (audit of issue 56): refused, saying where its encoder is."""
    from keras_vit.models.mae import build_mae_model

    mae = build_mae_model("mu/4", image_size=16, num_layers=1, decoder_hidden_dim=16,
                          decoder_num_layers=1, decoder_num_heads=2, decoder_mlp_dim=32)
    path = str(tmp_path / "mae.keras")
    mae.save(path)
    out = tmp_path / "fs"
    assert cli("fewshot", "--smoke", "--model-path", path, "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert "takes a VisionTransformer" in err and "encoder.keras" in err, err
    assert "Traceback" not in err and not (out / "metrics.json").exists()


def test_transfer_weights_resamples_position_embedding_and_zeroes_head():
    source = ViT("mu/4", image_size=16, num_classes=5, representation_size=32)
    randomize_weights(source)
    arch = finetune.init_kwargs(source, finetune.get_config(smoke=True))
    assert arch["num_layers"] == 2 and arch["patch_size"] == (4, 4) and arch["pooling"] == "token"
    target = ViT("mu/4", image_size=24, num_classes=7, **arch)
    copied = finetune.transfer_weights(source, target)
    assert "head" not in copied and "patch_encoder" in copied
    expected = source.get_layer("patch_encoder").resampled_position_embedding((6, 6))
    np.testing.assert_allclose(
        to_numpy(target.get_layer("patch_encoder").position_embeddings), expected, rtol=1e-6
    )
    for name in ("encoderblock_0", "encoderblock_1", "encoder_norm"):
        pairs = zip(source.get_layer(name).weights, target.get_layer(name).weights, strict=True)
        for a, b in pairs:
            np.testing.assert_array_equal(to_numpy(a), to_numpy(b))
    assert not np.any(to_numpy(target.get_layer("head").kernel))
    with pytest.raises(ValueError, match="no layer"):
        finetune.transfer_weights(ViT("mu/4", image_size=16, num_layers=1), target)


def test_init_kwargs_pool_a_tokens_only_encoder():
    """A tokens-only encoder (MPP's encoder.keras) fine-tunes with its class token, else gap."""
    config = finetune.get_config(smoke=True)
    with_token = ViT("mu/4", image_size=16, include_top=False, pooling=None)
    assert finetune.init_kwargs(with_token, config)["pooling"] == "token"
    gap = ViT("mu/4", image_size=16, include_top=False, pooling=None, class_token=False)
    assert finetune.init_kwargs(gap, config)["pooling"] == "gap"


@pytest.mark.parametrize(
    "name, path",
    [("pretrain", "recipes/pretrain_i21k_b16.py"), ("finetune", "recipes/finetune_cifar10_b16.py"),
     ("pretrain-mpp", "recipes/pretrain_mpp_imagenet_b16.py"),
     ("pretrain-mae", "recipes/pretrain_mae_imagenet_b16.py"),
     ("finetune", "recipes/finetune_mae_imagenet_b16.py"),
     ("finetune", "recipes/finetune_digits.py")],
)
def test_print_config_shows_the_paper_numbers(name, path, capsys, tmp_path, monkeypatch):
    """--print-config prints the merged config as JSON, exits 0, and trains nothing."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    monkeypatch.chdir(tmp_path)
    assert cli(name, "--config", os.path.join(root, path), "--print-config", "--seed", "3") == 0
    config = json.loads(capsys.readouterr().out)
    assert config["seed"] == 3 and not os.listdir(tmp_path)
    expected = {
        "pretrain": dict(model="B/16", batch_size=4096, learning_rate=1e-3, weight_decay=0.03,
                         warmup_steps=10_000, decay="linear", epochs=90, representation_size=768),
        "pretrain-mpp": dict(model="B/16", learning_rate=2e-4, steps=1_000_000, decay="cosine",
                             corruption_rate=0.5, mask_fraction=0.8, random_fraction=0.1),
        "pretrain-mae": dict(model="B/16", learning_rate=1.5e-4 * 4096 / 256, beta_2=0.95,
                             weight_decay=0.05, warmup_epochs=40, decay="cosine", epochs=800,
                             mask_ratio=0.75, norm_pix_loss=True, decoder_hidden_dim=512,
                             decoder_num_layers=8, decoder_num_heads=16, batch_size=4096),
    }
    if "mae" in path and name == "finetune":
        expected["finetune"] = dict(batch_size=1024, epochs=100, learning_rate=2e-3,
                                    weight_decay=0.05, layer_decay=0.65, warmup_epochs=5,
                                    drop_path_rate=0.1, pooling="gap", fc_norm=True,
                                    label_smoothing=0.1, global_clipnorm=None)
    elif "cifar10" in path:
        expected["finetune"] = dict(image_size=384, batch_size=512, steps=10_000,
                                    learning_rate=0.01, warmup_steps=500, optimizer="sgd")
    else:
        expected["finetune"] = dict(image_size=24, batch_size=32, epochs=60, learning_rate=0.03,
                                    rotation=12.0, crop_scale=[0.8, 1.0], label_smoothing=0.1)
    for key, value in expected[name].items():
        assert config[key] == value, key


def test_cli_reports_bad_dataset(tmp_path, capsys):
    code = cli("pretrain", "--smoke", "--dataset", "tfds:mnist", "--data-dir", str(tmp_path),
               "--out", str(tmp_path / "x"))
    assert code == 2
    assert "not prepared" in capsys.readouterr().err


def test_jit_compile_flag_values(capsys):
    """--jit-compile takes auto, true or false (any case); anything else names what it got."""
    from keras_vit.cli.flags import jit_compile

    assert [jit_compile(v) for v in ("auto", "TRUE", "False")] == ["auto", True, False]
    assert cli("pretrain", "--smoke", "--jit-compile", "maybe") == 2
    err = capsys.readouterr().err
    assert "expected auto, true or false; received 'maybe'" in err


def test_experiment_file_runs_through_the_cli(tmp_path):
    """recipes/finetune_digits.py with --smoke: file < smoke shrink < flags, all applied."""
    path = os.path.join(os.path.dirname(__file__), "..", "..", "recipes", "finetune_digits.py")
    out = str(tmp_path / "ft")
    argv = ["--config", path, "--smoke", "--out", out, "--verbose", "0", "--jit-compile", "false",
            "--steps-per-epoch", "16"]  # 3 x 16 SGD steps: clear of noise (see above)
    assert cli("finetune", *argv) == 0
    metrics = check_training_artefacts(out, zero_head=True)
    config = metrics["config"]
    assert config["model"] == "mu/4" and config["epochs"] == 3  # the smoke shrink
    assert config["rotation"] == 12.0 and config["label_smoothing"] == 0.1  # the file
    assert config["out"] == out and config["jit_compile"] is False  # the flags
    assert config["steps_per_epoch"] == 16


def test_finetune_on_synthetic_data_with_steps_per_execution(tmp_path, capsys):
    out = str(tmp_path / "synthetic")
    argv = ["--smoke", "--dataset", "synthetic:4:256:16", "--out", out, "--verbose", "0"]
    steps_per_execution = 4
    if keras.backend.backend() == "torch":  # Keras runs PyTorch one step per call
        assert cli("finetune", *argv, "--steps-per-execution", "4") == 2
        assert "steps_per_execution (--steps-per-execution) must be 1" in capsys.readouterr().err
        steps_per_execution = 1
    code = cli("finetune", *argv, "--steps-per-execution", str(steps_per_execution))
    assert code == 0
    metrics = check_training_artefacts(out, zero_head=True)
    # 10% of the 256 training images held out for validation (--validation-fraction 0.1).
    sizes = ("num_train_examples", "num_validation_examples", "num_test_examples")
    assert [metrics[key] for key in sizes] == [230, 26, 64]
    # One pass over the 230 training images in whole batches of 32 (under the smoke's cap of 8).
    assert metrics["num_classes"] == 4 and metrics["steps_per_epoch"] == 7
    assert metrics["config"]["steps_per_execution"] == steps_per_execution
    assert metrics["throughput"]["images_per_second"] > 0


def test_finetune_with_lora_trains_adapters_and_head_only(tmp_path, capsys):
    from keras_vit.training.lora import get_lora_settings
    from keras_vit.training.lora_files import load_lora_weights

    init = ViT("mu/4", image_size=16, num_classes=10)
    randomize_weights(init, scale=0.1)
    init_path = str(tmp_path / "init.keras")
    init.save(init_path)
    out = str(tmp_path / "lora")
    argv = ["--smoke", "--dataset", "synthetic:4:256:16", "--init", init_path, "--out", out,
            "--verbose", "0", "--lora-rank", "2", "--lora-targets", "value,mlp_dense_1"]
    assert cli("finetune", *argv[:-1], "value,qkv") == 2  # an unknown target, before any data
    assert "Received: targets=('value', 'qkv')" in capsys.readouterr().err
    assert cli("finetune", *argv) == 0
    metrics = check_training_artefacts(out, zero_head=True)
    settings = {"rank": 2, "alpha": 2.0, "targets": ["value", "mlp_dense_1"]}
    assert {k: metrics["model"]["lora"][k] for k in settings} == settings
    # Per block: value A (32, 2, 2) + B (2, 16), mlp_dense_1 A (32, 2) + B (2, 64); head 32x4+4.
    assert metrics["model"]["lora"]["trainable_params"] == 2 * (128 + 32 + 64 + 128) + 132
    trained = keras.saving.load_model(os.path.join(out, "model.keras"))  # merged kernels
    assert get_lora_settings(trained) is None
    for name in ("patch_encoder", "encoderblock_0"):  # the frozen encoder came through as is
        block, source = trained.get_layer(name), init.get_layer(name)
        for w, v in zip(block.weights, source.weights, strict=True):
            if "value" in w.path or "mlp_dense_1/kernel" in w.path:
                continue
            np.testing.assert_array_equal(to_numpy(w), to_numpy(v), err_msg=w.path)
    # The adapters file on the base model gives the trained model's outputs.
    config = finetune.get_config(smoke=True)
    config.update(init=init_path, image_size=16)
    base, _ = finetune.build_model(4, config)
    load_lora_weights(base, metrics["lora_weights_path"])
    images = np.random.default_rng(0).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    np.testing.assert_allclose(to_numpy(base(images)), to_numpy(trained(images)), atol=1e-5)


def test_finetune_toolkit_options_run_and_are_recorded(tmp_path, capsys):
    """--layer-decay, --ema, --repeated-augmentation and --teacher/--distillation in one run."""
    teacher = ViT("mu/4", image_size=16, num_classes=4)
    randomize_weights(teacher, scale=0.1)
    teacher_path = str(tmp_path / "teacher.keras")
    teacher.save(teacher_path)
    out = str(tmp_path / "toolkit")
    argv = ["--smoke", "--dataset", "synthetic:4:256:16", "--out", out, "--verbose", "0",
            "--layer-decay", "0.75", "--ema", "0.9", "--repeated-augmentation", "2"]
    assert cli("finetune", *argv, "--repeated-augmentation", "5") == 2  # 5 does not divide 32
    assert "must divide the batch size" in capsys.readouterr().err
    assert cli("finetune", *argv, "--teacher", teacher_path) == 2  # no --distillation
    assert "needs both --teacher" in capsys.readouterr().err
    assert cli("finetune", *argv, "--layer-decay", "1.5") == 2
    assert "(0, 1]" in capsys.readouterr().err
    assert cli("finetune", *argv, "--teacher", teacher_path, "--distillation", "soft",
               "--distillation-tau", "2") == 0
    metrics = check_training_artefacts(out, zero_head=True)
    config = metrics["config"]
    assert (config["layer_decay"], config["ema"], config["repeated_augmentation"]) == (0.75, 0.9, 2)
    assert metrics["model"]["distillation"] == {
        "teacher": teacher_path, "mode": "soft", "tau": 2.0, "alpha": 0.5}
    saved = keras.saving.load_model(os.path.join(out, "model.keras"))
    assert saved.get_layer("head_dist") is not None  # the student, not the wrapper


def test_pretrain_mae_then_finetune_init(tmp_path):
    """Two steps of MAE pre-training on digits: finite, decreasing loss; the artefacts (the
    reconstruction grid included); `finetune --init` from its encoder."""
    from keras_vit.runner import pretrain_mae

    out = str(tmp_path / "mae")
    code = cli("pretrain-mae", "--smoke", "--out", out, "--verbose", "0", "--steps", "2",
               "--mask-ratio", "0.5", "--lr", "0.003")
    assert code == 0
    for path in ("model.keras", "encoder.keras", "metrics.json", pretrain_mae.GRID_FILE):
        assert os.path.exists(os.path.join(out, path)), path
    with open(os.path.join(out, "metrics.json")) as f:
        metrics = json.load(f)
    assert metrics["config"]["mask_ratio"] == 0.5
    assert math.isfinite(metrics["test_loss"])
    assert metrics["test_loss"] < metrics["initial_test_loss"]
    with open(os.path.join(out, pretrain_mae.GRID_FILE), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    fine = str(tmp_path / "fine")
    # MAE's fine-tuning protocol: GAP + fc_norm, drop path, layer decay, mixup / cutmix.
    code = cli("finetune", "--smoke", "--init", os.path.join(out, "encoder.keras"), "--out",
               fine, "--verbose", "0", "--steps-per-epoch", "2", "--pooling", "gap",
               "--fc-norm", "--drop-path-rate", "0.1", "--layer-decay", "0.65",
               "--augment", "mixup,cutmix")
    assert code == 0
    saved = keras.saving.load_model(os.path.join(fine, "model.keras"), compile=False)
    assert (saved.config.pooling, saved.config.fc_norm) == ("gap", True)
    assert saved.config.drop_path_rate == 0.1 and saved.final_norm is None


def test_patch_dropout_flag_reaches_pretrain_and_finetune_models(capsys, tmp_path, monkeypatch):
    from keras_vit.runner import pretrain, pretrain_mae

    monkeypatch.chdir(tmp_path)
    assert cli("pretrain", "--smoke", "--patch-dropout-rate", "0.5", "--print-config") == 0
    config = json.loads(capsys.readouterr().out)
    assert config["patch_dropout_rate"] == 0.5
    model, _ = pretrain.build_model(10, config)
    assert model.config.patch_dropout_rate == 0.5
    source = ViT("mu/4", image_size=16, include_top=False, pooling=None)
    assert finetune.init_kwargs(source, config)["patch_dropout_rate"] == 0.5
    with pytest.raises(ValueError, match="pretrain and finetune only"):
        pretrain_mae.run(dict(pretrain_mae.get_config(smoke=True), patch_dropout_rate=0.5))


def test_drop_path_pooling_and_fc_norm_flags_reach_the_models(capsys, tmp_path, monkeypatch):
    """`--drop-path-rate`, `--pooling`, `--fc-norm` (issue 44: MAE's fine-tuning head): from
    scratch through pretrain and finetune, from `--init` over the checkpoint's own head; the
    self-supervised recipes refuse the head options and pass drop path to the encoder."""
    from keras_vit.runner import pretrain, pretrain_mae, pretrain_mpp

    monkeypatch.chdir(tmp_path)
    flags = ("--drop-path-rate", "0.2", "--pooling", "gap", "--fc-norm", "--print-config")
    for command, module in (("pretrain", pretrain), ("finetune", finetune)):
        assert cli(command, "--smoke", *flags) == 0
        config = json.loads(capsys.readouterr().out)
        settings = (config["drop_path_rate"], config["pooling"], config["fc_norm"])
        assert settings == (0.2, "gap", True)
        model, _ = module.build_model(10, config)
        assert (model.config.drop_path_rate, model.config.pooling) == (0.2, "gap")
        assert model.config.fc_norm and model.final_norm is None
    # finetune from scratch without the flags: the class token and the final norm, as before
    model, _ = finetune.build_model(10, finetune.get_config(smoke=True))
    assert (model.config.pooling, model.config.fc_norm, model.config.drop_path_rate) == (
        "token", False, 0.0)
    source = ViT("mu/4", image_size=16, num_classes=3, pooling="gap", fc_norm=True)
    kept = finetune.init_kwargs(source, finetune.get_config(smoke=True))
    assert (kept["pooling"], kept["fc_norm"]) == ("gap", True)
    for module in (pretrain_mae, pretrain_mpp):
        for option in (dict(pooling="gap"), dict(fc_norm=True)):
            with pytest.raises(ValueError, match="--pooling and --fc-norm"):
                module.run(dict(module.get_config(smoke=True), **option))
        overrides = pretrain_mpp.builder_overrides(
            dict(module.get_config(smoke=True), drop_path_rate=0.1)
        )
        assert overrides["drop_path_rate"] == 0.1
