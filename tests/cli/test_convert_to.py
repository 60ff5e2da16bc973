"""Tests for keras_vit/cli/convert_to.py: `keras-vit convert MODEL.keras OUTPUT --to ...`."""

import numpy as np
import pytest

from keras_vit import ViT
from keras_vit.cli import main
from tests.cli.test_cli import error_of
from tests.helpers import to_numpy
from tests.weights.keras_models import images_for, perturbed


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny classifier with random weights, saved as .keras, and its outputs."""
    model = perturbed(ViT("mu/8", image_size=32, num_classes=3, approximate_gelu=False))
    path = str(tmp_path_factory.mktemp("convert_to") / "mu.keras")
    model.save(path)
    images = images_for(model)
    return path, images, to_numpy(model(images))


def _torch_outputs(model, images):
    import torch

    with torch.no_grad():
        out = model.eval()(torch.from_numpy(images).permute(0, 3, 1, 2))
    return getattr(out, "logits", out).numpy()


def test_to_timm_prints_the_create_model_call(saved, tmp_path, capsys):
    from tests.weights.references import import_timm, import_torch

    import_torch()
    timm = import_timm()
    from safetensors.torch import load_file

    path, images, expected = saved
    output = str(tmp_path / "mu.safetensors")
    assert main(["convert", path, output, "--to", "timm"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        f"Wrote {output}: the state dict of timm's vit_base_patch16_224 (from the keras_vit "
        f"model 'vit_mu8' in {path}). In PyTorch:"
    )
    call = lines[1].removeprefix("  model = ")
    assert call.startswith(
        "timm.create_model('vit_base_patch16_224', pretrained=False, img_size=32"
    )
    model = eval(call, {"timm": timm})  # the printed call, as a user would run it
    model.load_state_dict(load_file(output), strict=True)
    np.testing.assert_allclose(_torch_outputs(model, images), expected, rtol=1e-5, atol=1e-5)
    assert main(["convert", path, output, "--to", "timm"]) == 2
    assert "--overwrite" in error_of(capsys)


def test_to_huggingface(saved, tmp_path, capsys):
    from tests.weights.references import import_torch, import_transformers

    import_torch()
    transformers = import_transformers()
    path, images, expected = saved
    folder = str(tmp_path / "hf")
    assert main(["convert", path, folder, "--to", "huggingface"]) == 0
    out = capsys.readouterr().out
    assert f"transformers.AutoModelForImageClassification.from_pretrained({folder!r})" in out
    model = transformers.AutoModelForImageClassification.from_pretrained(folder)
    np.testing.assert_allclose(_torch_outputs(model, images), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--to", "timm"], "expects 2 arguments, MODEL OUTPUT"),
        (["--to", "timm", "--num-classes", "4"], "--num-classes applies to --from only"),
        (["--to", "huggingface", "--from", "timm"], "--from (a checkpoint into a .keras model)"),
    ],
)
def test_to_mistakes_exit_2(argv, message, saved, tmp_path, capsys):
    path, _, _ = saved
    extra = [str(tmp_path / "x")] if "expects" in message else []
    assert main(["convert", path, str(tmp_path / "out"), *extra, *argv]) == 2
    err = error_of(capsys)
    assert err.startswith("keras-vit convert: error:") and message in err


def test_what_timm_cannot_express_exits_2_and_writes_nothing(tmp_path, capsys):
    path = str(tmp_path / "pre_logits.keras")
    ViT("mu/8", image_size=32, num_classes=3, representation_size=16).save(path)
    output = tmp_path / "out.safetensors"
    assert main(["convert", path, str(output), "--to", "timm"]) == 2
    assert "export_timm cannot write representation_size=16" in error_of(capsys)
    assert not output.exists()


def test_a_masked_autoencoder_converts_to_both(tmp_path, capsys):
    """`pretrain-mae`'s model: a ViTMAEForPreTraining folder, or its encoder for timm."""
    from safetensors.numpy import load_file

    from keras_vit.models.mae import build_mae_model

    mae = build_mae_model("mu/4", image_size=16, num_layers=1, decoder_hidden_dim=16,
                          decoder_num_layers=1, decoder_num_heads=2, decoder_mlp_dim=32)
    path = str(tmp_path / "mae.keras")
    mae.save(path)
    folder = str(tmp_path / "hf")
    assert main(["convert", path, folder, "--to", "huggingface"]) == 0
    out = capsys.readouterr().out
    assert f"transformers.ViTMAEForPreTraining.from_pretrained({folder!r})" in out
    names = set(load_file(f"{folder}/model.safetensors"))
    assert "decoder.decoder_pred.weight" in names and "vit.embeddings.cls_token" in names
    # ... and back: the written model's summary ended the command with an AttributeError
    # (a MaskedAutoencoder has no input_shape) after the file was written (audit of issue 56).
    back = str(tmp_path / "back.keras")
    assert main(["convert", "--from", "huggingface", folder, back]) == 0
    out = capsys.readouterr().out
    assert "(a MaskedAutoencoder), encoder input (16, 16, 3)" in out, out
    output = str(tmp_path / "encoder.safetensors")
    assert main(["convert", path, output, "--to", "timm"]) == 0
    out = capsys.readouterr().out
    assert "its encoder is written" in out and "timm.create_model(" in out
    names = set(load_file(output))
    assert "cls_token" in names and not any("decoder" in n for n in names)
