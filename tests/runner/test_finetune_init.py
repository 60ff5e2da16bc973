"""`keras-vit finetune --init` from a timm file, a Hugging Face folder or a converted `.keras`
model, on the families keras_vit reads (rotary + SwiGLU, relative position, NaFlex), and
`--naflex` fine-tuning on a folder of images of mixed sizes."""

import json
import os

import keras
import numpy as np
import pytest

pytest.importorskip("tensorflow")

from keras_vit.cli import main  # noqa: E402
from keras_vit.runner import finetune  # noqa: E402
from keras_vit.runner.init_checkpoint import init_format  # noqa: E402
from tests.helpers import backend_independent, to_numpy  # noqa: E402
from tests.weights.timm_cases import perturb  # noqa: E402

TINY = dict(num_layers=1, hidden_dim=32, num_heads=2)
# id: (timm name, timm.create_model overrides, our overrides, fine-tuning image size).
FAMILIES = {
    "vit": ("vit_base_patch16_224", dict(img_size=32), dict(mlp_dim=128), 48),
    "eva02": ("eva02_tiny_patch14_224", dict(img_size=28), {}, 42),  # rotary + SwiGLU
    "beit": ("beitv2_base_patch16_224", dict(img_size=32), dict(mlp_dim=128), 48),  # relpos
    "naflex": ("naflexvit_base_patch16_gap", {}, dict(mlp_dim=128), 48),
}


@pytest.fixture(scope="module")
def timm_files(tmp_path_factory):
    """Tiny perturbed timm models of each family saved with safetensors (and as .keras)."""
    from keras_vit import from_timm
    from keras_vit.weights.state_dict import write_safetensors
    from tests.weights.references import import_timm, import_torch

    torch, timm = import_torch(), import_timm()
    root = tmp_path_factory.mktemp("timm")
    files = {}
    for case, (name, create, ours, _) in FAMILIES.items():
        model = timm.create_model(
            name, pretrained=False, depth=1, embed_dim=32, num_heads=2, num_classes=3, **create
        )
        perturb(torch, model.eval())
        state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
        path = write_safetensors(state, str(root / f"{case}.safetensors"))
        keras_path = str(root / f"{case}.keras")
        from_timm(name, path, **TINY, **ours).save(keras_path)
        files[case] = (path, keras_path)
    return files


def _config(**overrides):
    config = finetune.get_config(smoke=True)
    config.update(overrides)
    return config


def _check_transferred(model, reference):
    """Every weight but the head equals `reference`'s (same layer names); the head is zero."""
    for layer in model.layers:
        if not layer.weights:
            continue
        if layer.name == "head":
            assert not any(np.any(to_numpy(w)) for w in layer.weights)
            continue
        ref = reference.get_layer(layer.name)
        for w, v in zip(layer.weights, ref.weights, strict=True):
            np.testing.assert_allclose(to_numpy(w), to_numpy(v), rtol=1e-6, err_msg=w.path)


@pytest.mark.parametrize("case", list(FAMILIES))
def test_init_from_timm_and_converted_keras(case, timm_files):
    from keras_vit import from_timm

    name, _, ours, size = FAMILIES[case]
    path, keras_path = timm_files[case]
    overrides = dict(TINY, **ours)
    naflex = case == "naflex"
    common = dict(image_size=size, model_overrides=overrides, naflex=naflex)
    model, info = finetune.build_model(5, _config(init=path, timm_name=name, **common))
    assert info["init_format"] == "timm" and model.output_shape == (None, 5)
    # The timm file at the new size, through timm's own loader (the head aside).
    reference = from_timm(name, path, image_size=None if naflex else size, **overrides)
    _check_transferred(model, reference)
    # The converted .keras file: the same architecture, resized by the recipe.
    from_keras, info = finetune.build_model(5, _config(init=keras_path, **common))
    assert info["init_format"] == "keras" and from_keras.output_shape == (None, 5)
    assert ViTConfig_of(from_keras) == ViTConfig_of(model)


def test_naflex_twin_of_a_plain_checkpoint_gives_its_outputs(tmp_path):
    """`--naflex` from a plain ViT (class and register tokens with position rows): on one
    unpadded image at the table's grid the NaFlex twin computes the plain model's features
    (the prefix position rows folded into the tokens)."""
    from keras_vit.data import naflex_batch
    from keras_vit.models.vit import ViT
    from tests.helpers import randomize_weights

    plain = ViT("mu/4", image_size=16, num_classes=3, num_register_tokens=2)
    randomize_weights(plain, scale=0.2)
    plain.save(str(tmp_path / "plain.keras"))
    twin, _ = finetune.build_model(3, _config(init=str(tmp_path / "plain.keras"), naflex=True))
    image = np.random.default_rng(0).uniform(-1, 1, (16, 16, 3)).astype("float32")
    features = [keras.Model(m.input, m.head.input) for m in (plain, twin)]
    expected = to_numpy(features[0](image[None]))
    actual = to_numpy(features[1](naflex_batch([image], 4, 16)))
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)


def test_mae_encoder_fine_tunes_with_gap_fc_norm_and_drop_path(tmp_path):
    """MAE's fine-tuning protocol from its `encoder.keras` (issue 44): `--pooling gap --fc-norm
    --drop-path-rate`: global average pooling, a new fc_norm (ones / zeros) instead of the final
    norm, drop path rising to the rate; every encoder weight copied. Without the options the
    source's head is kept (the class token, the final norm)."""
    from keras_vit.models.mae import build_mae_model, extract_mae_encoder
    from tests.helpers import randomize_weights

    mae = build_mae_model("mu/4", image_size=16, decoder_hidden_dim=16, decoder_num_layers=1,
                          decoder_num_heads=2, decoder_mlp_dim=32, seed=0)
    randomize_weights(mae, scale=0.2)
    encoder = extract_mae_encoder(mae)
    encoder.save(str(tmp_path / "encoder.keras"))
    init = str(tmp_path / "encoder.keras")
    model, info = finetune.build_model(
        3, _config(init=init, pooling="gap", fc_norm=True, drop_path_rate=0.1)
    )
    assert (model.config.pooling, model.config.fc_norm, model.final_norm) == ("gap", True, None)
    assert model.config.drop_path_rate == 0.1
    rates = [block.drop_path_rate for block in model.blocks]
    assert rates[0] == 0.0 and rates[-1] == pytest.approx(0.1)
    width = model.config.hidden_dim
    np.testing.assert_array_equal(to_numpy(model.fc_norm.gamma), np.ones(width, "float32"))
    np.testing.assert_array_equal(to_numpy(model.fc_norm.beta), np.zeros(width, "float32"))
    for block, source in zip(model.blocks, encoder.blocks, strict=True):
        for a, b in zip(block.weights, source.weights, strict=True):
            np.testing.assert_array_equal(to_numpy(a), to_numpy(b), err_msg=a.path)
    assert info["architecture"]["pooling"] == "gap" and info["architecture"]["fc_norm"] is True
    kept, _ = finetune.build_model(3, _config(init=init))
    assert (kept.config.pooling, kept.config.fc_norm) == ("token", False)
    assert kept.final_norm is not None and kept.config.drop_path_rate == 0.0


def ViTConfig_of(model):  # noqa: N802
    from keras_vit.models.config import ViTConfig

    return ViTConfig.from_model(model).to_kwargs("size", "encoder", "input")


def test_init_from_huggingface_folder(tmp_path):
    from keras_vit import from_huggingface
    from tests.weights.references import import_torch, import_transformers

    import_torch()
    transformers = import_transformers()
    hf = transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        image_size=32, patch_size=8, num_labels=4,
    )  # fmt: skip
    transformers.ViTForImageClassification(hf).eval().save_pretrained(tmp_path / "hf")
    folder = str(tmp_path / "hf")
    model, info = finetune.build_model(7, _config(init=folder, image_size=48))
    assert info["init_format"] == "huggingface" and model.input_shape == (None, 48, 48, 3)
    _check_transferred(model, from_huggingface(folder, image_size=48))
    # A SigLIP 2 NaFlex tower: a NaFlex model, its position table at its own grid.
    vision = transformers.Siglip2VisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        patch_size=4, num_patches=16,
    )  # fmt: skip
    transformers.Siglip2VisionModel(vision).eval().save_pretrained(tmp_path / "siglip2")
    folder = str(tmp_path / "siglip2")
    model, info = finetune.build_model(7, _config(init=folder, naflex=True))
    assert set(model.input) == {"patches", "patch_coord", "patch_valid"}
    _check_transferred(model, from_huggingface(folder))


def test_cli_lora_on_swiglu_targets_from_a_rotary_timm_file(tmp_path, timm_files, capsys):
    """`keras-vit finetune --init FILE --timm-name eva02_* --lora-targets ...mlp_gate...`
    end to end (rotary + SwiGLU: EVA-02); the SwiGLU targets on a GELU-MLP model: a clear
    error naming the targets it has."""
    from keras_vit.training.lora import get_lora_settings

    name = FAMILIES["eva02"][0]
    argv = ["--smoke", "--dataset", "synthetic:3:48:28", "--verbose", "0", "--lora-rank", "2",
            "--lora-targets", "value,mlp_gate,mlp_up,mlp_down", "--num-layers", "1",
            "--hidden-dim", "32", "--num-heads", "2"]  # fmt: skip
    out = str(tmp_path / "eva02")
    assert main(["finetune", *argv, "--image-size", "28", "--init", timm_files["eva02"][0],
                 "--timm-name", name, "--out", out]) == 0  # fmt: skip
    with open(os.path.join(out, "metrics.json")) as f:
        metrics = json.load(f)
    assert metrics["model"]["init_format"] == "timm" and metrics["model"]["timm_name"] == name
    assert metrics["model"]["lora"]["targets"] == ["value", "mlp_gate", "mlp_up", "mlp_down"]
    assert all(np.isfinite(metrics["history"]["loss"]))
    trained = keras.saving.load_model(os.path.join(out, "model.keras"))  # merged kernels
    assert get_lora_settings(trained) is None and trained.config.rotary_embedding == "eva02"
    assert os.path.isfile(os.path.join(out, "lora.npz"))
    vit = ["--image-size", "32", "--mlp-dim", "128", "--init", timm_files["vit"][0],
           "--timm-name", FAMILIES["vit"][0], "--out", str(tmp_path / "vit")]  # fmt: skip
    assert main(["finetune", *argv, *vit]) == 2
    err = capsys.readouterr().err
    assert "with a GELU MLP, mlp='mlp') has no LoRA target 'mlp_gate'" in err, err
    assert "'mlp_dense_1', 'mlp_dense_2')" in err and "--lora-targets" in err


@backend_independent  # file-format and argument checks: no Keras computation
def test_init_format_errors_name_expected_and_received(tmp_path):
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    (tmp_path / "empty").mkdir()
    for name in ("m.keras", "w.safetensors", "w.npz", "w.txt"):
        (tmp_path / name).write_bytes(b"x")
    assert init_format(str(tmp_path / "hf")) == "huggingface"
    assert init_format(str(tmp_path / "m.keras")) == "keras"
    assert init_format(str(tmp_path / "w.safetensors"), "vit_tiny_patch16_224") == "timm"
    cases = [
        ("w.safetensors", None, "needs its timm model name: add --timm-name"),
        ("m.keras", "vit_tiny_patch16_224", "init is a keras checkpoint. Received"),
        ("w.npz", None, "goes to --weights"),
        ("w.txt", None, "init (--init) must be a .keras model"),
        ("empty", None, "Received: a folder without config.json"),
    ]
    for path, name, message in cases:
        with pytest.raises(ValueError, match="Received") as error:
            init_format(str(tmp_path / path), name)
        assert message in str(error.value), str(error.value)
    with pytest.raises(FileNotFoundError, match="Expected a .keras model"):
        init_format(str(tmp_path / "missing.keras"))
    # Names (not paths): timm's registered names and Hub repo ids; a mistyped name is refused.
    assert init_format("vit_small_patch14_dinov2.lvd142m") == "timm"
    assert init_format("hf-hub:timm/vit_small_patch14_dinov2.lvd142m@main") == "timm"
    assert init_format("google/vit-base-patch16-224") == "huggingface"
    assert init_format("hf://google/vit-base-patch16-224@main") == "huggingface"
    with pytest.raises(FileNotFoundError, match="Did you mean the timm name vit_tiny_patch16_224"):
        init_format("vit_tiny_patch16_244")
    with pytest.raises(ValueError, match="init is a name"):
        init_format("vit_small_patch14_dinov2", "vit_small_patch14_dinov2")


def test_init_format_errors_through_the_cli(tmp_path, capsys):
    """Through the CLI, before any data is loaded (its error path asks the backend whether JAX
    runs several processes: run on every backend)."""
    (tmp_path / "w.txt").write_bytes(b"x")
    out = str(tmp_path / "out")
    assert main(["finetune", "--smoke", "--init", str(tmp_path / "w.txt"), "--out", out]) == 2
    assert "Received: " in capsys.readouterr().err
    assert main(["finetune", "--smoke", "--max-patches", "16", "--out", out]) == 2
    assert "add --naflex" in capsys.readouterr().err


def test_timm_name_that_does_not_fit_the_file(timm_files):
    """A size flag that contradicts the file is named as the cause (not the file); a file of
    another architecture than the name is named as the file."""
    path = timm_files["vit"][0]
    config = _config(init=path, timm_name="vit_base_patch16_224", image_size=32,
                     model_overrides=dict(TINY, mlp_dim=64))  # fmt: skip
    with pytest.raises(ValueError, match=r"--mlp-dim 64 contradicts the --init checkpoint .*"
                       r"whose mlp_dim is 128.* Drop --mlp-dim"):  # fmt: skip
        finetune.build_model(3, config)
    config.update(timm_name="beitv2_base_patch16_224", model_overrides=dict(TINY, mlp_dim=128))
    with pytest.raises(ValueError, match="does not fit the timm model 'beitv2_base_patch16_224'"):
        finetune.build_model(3, config)


SIZES = ((12, 20), (20, 12), (16, 16), (9, 30))  # (height, width): four aspect ratios


@pytest.fixture(scope="module")
def mixed_folder(tmp_path_factory):
    """`folder:` data of 2 classes, PNG files of four sizes (no two classes alike)."""
    from PIL import Image

    root = tmp_path_factory.mktemp("mixed")
    rng = np.random.default_rng(0)
    for label in range(2):
        os.makedirs(root / f"c{label}")
        for i in range(8):
            h, w = SIZES[i % len(SIZES)]
            base = np.full((h, w, 3), 40 + 170 * label, "float64")
            pixels = np.clip(base + rng.normal(0, 30, (h, w, 3)), 0, 255).astype("uint8")
            Image.fromarray(pixels).save(root / f"c{label}" / f"{i}.png")
    return str(root)


@backend_independent  # tf.data and NumPy only
def test_naflex_pipeline_batches_are_the_numpy_batching(mixed_folder):
    from keras_vit.data import load_source, naflex_batch
    from keras_vit.data.naflex_pipelines import naflex_eval_pipeline, naflex_train_pipeline

    source = load_source(f"folder:{mixed_folder}", "test")
    batch, _ = next(iter(naflex_eval_pipeline(source, patch_size=4, max_patches=16,
                                              batch_size=64).as_numpy_iterator()))  # fmt: skip
    images = [image / 127.5 - 1.0 for image, _ in source.dataset.as_numpy_iterator()]
    assert len({image.shape for image in images}) > 1  # mixed sizes, no square resize
    expected = naflex_batch(images, 4, 16)
    for key, value in expected.items():
        np.testing.assert_allclose(batch[key], value, rtol=1e-5, atol=1e-5, err_msg=key)
    train = naflex_train_pipeline(source, patch_size=4, max_patches=16, batch_size=2, epochs=2,
                                  steps_per_epoch=1, flip=False)  # fmt: skip
    batches = list(train.as_numpy_iterator())
    assert len(batches) == 2 and batches[0][0]["patches"].shape == (2, 16, 48)


@backend_independent  # tf.data and NumPy only
def test_naflex_pipelines_normalise_with_the_models_spec(mixed_folder):
    """A NaFlex model with its own input spec (ImageNet mean and std) gets its pixels that way
    in the eval and the training pipeline, not the default [-1, 1]."""
    from keras_vit.data import load_source, naflex_batch
    from keras_vit.data.naflex_pipelines import naflex_eval_pipeline, naflex_train_pipeline
    from keras_vit.models import PreprocessingConfig
    from keras_vit.models.preprocessing_config import IMAGENET_MEAN, IMAGENET_STD

    spec = PreprocessingConfig(mean=IMAGENET_MEAN, std=IMAGENET_STD)
    source = load_source(f"folder:{mixed_folder}", "test")
    batch, _ = next(iter(naflex_eval_pipeline(source, patch_size=4, max_patches=16, batch_size=64,
                                              preprocessing=spec).as_numpy_iterator()))  # fmt: skip
    mean, std = np.array(IMAGENET_MEAN), np.array(IMAGENET_STD)
    images = [(image / 255.0 - mean) / std for image, _ in source.dataset.as_numpy_iterator()]
    expected = naflex_batch(images, 4, 16)
    for key, value in expected.items():
        np.testing.assert_allclose(batch[key], value, rtol=1e-4, atol=1e-4, err_msg=key)
    train = naflex_train_pipeline(source, patch_size=4, max_patches=16, batch_size=2, epochs=1,
                                  steps_per_epoch=1, flip=False, preprocessing=spec)  # fmt: skip
    patches = next(train.as_numpy_iterator())[0]["patches"]
    assert np.abs(patches).max() > 1.2  # ImageNet-normalised values leave [-1, 1]


def test_naflex_finetune_on_mixed_sizes_from_a_timm_file(tmp_path, mixed_folder, timm_files,
                                                          capsys):
    """A recipe file: `naflexvit` from its timm file, `--naflex` batches of a folder of
    mixed-size images (each at its aspect ratio, at most 16 patches) through `model.fit`."""
    name, _, ours, _ = FAMILIES["naflex"]
    recipe = tmp_path / "recipe.py"
    recipe.write_text(
        'RECIPE = "finetune"\n'
        f"CONFIG = dict(init={timm_files['naflex'][0]!r}, timm_name={name!r}, "
        f"model_overrides={dict(TINY, **ours)!r}, dataset='folder:{mixed_folder}', "
        "naflex=True, max_patches=16, epochs=1, steps_per_epoch=2, batch_size=4, "
        "warmup_steps=1, eval_batch_size=16, validation_freq=0, tensorboard=False, "
        "checkpoints=False)\n"
    )
    out = str(tmp_path / "run")
    assert main(["finetune", "--config", str(recipe), "--out", out, "--verbose", "0"]) == 0
    with open(os.path.join(out, "metrics.json")) as f:
        metrics = json.load(f)
    assert metrics["model"]["init_format"] == "timm" and metrics["model"]["timm_name"] == name
    assert all(np.isfinite(metrics["history"]["loss"])) and 0 <= metrics["test_accuracy"] <= 1
    model = keras.saving.load_model(os.path.join(out, "model.keras"))
    assert set(model.input) == {"patches", "patch_coord", "patch_valid"}
    assert model.output_shape == (None, 2)
    # A NaFlex --init without --naflex: a clear error naming the flags.
    argv = ["--init", os.path.join(out, "model.keras"), "--dataset", f"folder:{mixed_folder}",
            "--out", str(tmp_path / "again"), "--verbose", "0", "--batch-size", "4"]  # fmt: skip
    assert main(["finetune", *argv]) == 2
    assert "fine-tune it with --naflex --max-patches N" in capsys.readouterr().err


def _cli_config(*argv):
    from keras_vit.cli.app import build_parser
    from keras_vit.cli.config import config_from_args
    from keras_vit.runner import presets

    args = build_parser().parse_args(["finetune", *argv])
    return config_from_args(presets.recipe("finetune"), "finetune", args)


@backend_independent  # config merging only
def test_the_presets_model_never_applies_to_an_init_checkpoint():
    """The digits preset's 4 layers of width 64 were applied to every --init checkpoint (a timm
    name failed with 151 problems): with --init only the sizes the user states remain."""
    assert finetune.get_config()["model_overrides"]["num_layers"] == 4  # the preset's
    config = _cli_config("--init", "vit_tiny_patch16_224.augreg_in21k_ft_in1k")
    assert config["model"] is None and config["model_overrides"] == {}
    config = _cli_config("--init", "m.keras", "--num-heads", "3")
    assert config["model"] is None and config["model_overrides"] == {"num_heads": 3}
    config = _cli_config("--num-heads", "2")  # from scratch: the preset's sizes, one changed
    assert config["model"] == "Ti/4" and config["model_overrides"]["num_layers"] == 4


def test_a_timm_file_on_the_default_settings_takes_its_sizes_from_its_shapes(tmp_path):
    """`finetune --init FILE --timm-name NAME` with no size flag: the file's depth, width and MLP
    width are the model's (a file of another depth than the name, as timm's
    `create_model(name, depth=1)` writes), and the model keeps the checkpoint's name."""
    from keras_vit import export_timm, from_timm

    source = from_timm("vit_tiny_patch16_224", num_classes=0, num_layers=1, hidden_dim=48,
                       mlp_dim=96)  # fmt: skip
    path = str(tmp_path / "tiny.safetensors")
    export_timm(source, path)
    config = _cli_config("--init", path, "--timm-name", "vit_tiny_patch16_224",
                         "--image-size", "32")  # fmt: skip
    model, info = finetune.build_model(3, config)
    sizes = model.config
    assert (sizes.num_layers, sizes.hidden_dim, sizes.mlp_dim, sizes.num_heads) == (1, 48, 96, 3)
    assert model.name == info["name"] == "vit_tiny_patch16_224"
    _check_transferred(model, from_timm("vit_tiny_patch16_224", path, image_size=32,
                                        num_layers=1, hidden_dim=48, mlp_dim=96))  # fmt: skip


def test_a_timm_file_whose_width_the_names_heads_do_not_divide_asks_for_num_heads(tmp_path):
    """The shapes show a timm file's width but not its heads: a width-32 file under
    `--timm-name vit_tiny_patch16_224` (3 heads) failed with `num_heads must divide
    hidden_dim` and no word of what to change (audit of issue 56); the message names
    --num-heads, and with it the file loads."""
    from keras_vit import export_timm, from_timm

    source = from_timm("vit_tiny_patch16_224", num_classes=0, num_layers=1, hidden_dim=32,
                       num_heads=2, mlp_dim=64, image_size=32)  # fmt: skip
    path = str(tmp_path / "w32.safetensors")
    export_timm(source, path)
    argv = ("--init", path, "--timm-name", "vit_tiny_patch16_224", "--image-size", "32")
    with pytest.raises(ValueError, match=r"heads is not in a checkpoint's shapes.*--num-heads"):
        finetune.build_model(3, _cli_config(*argv))
    model, _ = finetune.build_model(3, _cli_config(*argv, "--num-heads", "2"))
    assert (model.config.hidden_dim, model.config.num_heads) == (32, 2)


def test_size_flags_that_contradict_an_init_model_are_refused_before_anything_is_written(
    tmp_path, capsys
):
    """The battery's `finetune --init MAE/encoder.keras --num-layers 6` (applied silently) and
    `--hidden-dim` contradicting `--init` (ignored, exit 0): refused, naming both."""
    from keras_vit.models.vit import ViT

    encoder = str(tmp_path / "encoder.keras")
    ViT("mu/4", image_size=16, include_top=False, pooling=None).save(encoder)
    out = tmp_path / "never"
    for flag, value, theirs in (("--num-layers", "6", "num_layers is 2"),
                                ("--hidden-dim", "64", "hidden_dim is 32")):  # fmt: skip
        assert main(["finetune", "--smoke", "--init", encoder, flag, value, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"{flag} {value} contradicts the --init checkpoint" in err and theirs in err, err
        assert "Traceback" not in err and not out.exists()
    # Images of another channel count than the checkpoint takes: named, and nothing left behind.
    assert main(["finetune", "--smoke", "--init", encoder, "--num-channels", "1", "--out",
                 str(out)]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "num_channels (--num-channels) 1 contradicts" in err and "pass --num-channels 3" in err
    assert not out.exists()
