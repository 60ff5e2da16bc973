"""Tests for keras_vit/families/mae/huggingface.py: transformers' ViTMAE folders both ways.

A tiny perturbed `ViTMAEForPreTraining` (raw and `norm_pix_loss` targets) saved with
`save_pretrained`: our `loss`, `logits` and `mask` against transformers' given the same `noise`
(within 1e-5); its `ViTMAEModel` encoder as a plain ViT; our export loaded back by transformers.
"""

import json
import os
import stat

import numpy as np
import pytest

from keras_vit import export_huggingface, from_huggingface
from keras_vit.families.mae.huggingface import export_huggingface_mae
from keras_vit.models.mae import MaskedAutoencoder, mae_sincos_table
from tests.helpers import to_numpy
from tests.weights.references import import_torch, import_transformers
from tests.weights.timm_cases import assert_close, perturb, random_images

torch = import_torch()  # imported before transformers, whatever the backend
transformers = import_transformers()

SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
             image_size=16, patch_size=4, decoder_hidden_size=16, decoder_num_hidden_layers=1,
             decoder_num_attention_heads=2, decoder_intermediate_size=32)  # fmt: skip


def _run(model, images, noise):
    with torch.no_grad():
        return model(torch.from_numpy(images).permute(0, 3, 1, 2), noise=torch.from_numpy(noise))


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf_mae")
    found = {}
    for seed, norm_pix_loss in enumerate((False, True)):
        config = transformers.ViTMAEConfig(**SIZES, norm_pix_loss=norm_pix_loss, mask_ratio=0.5)
        model = perturb(torch, transformers.ViTMAEForPreTraining(config), seed).eval()
        folder = root / f"norm_pix_{norm_pix_loss}"
        model.save_pretrained(folder)
        found[norm_pix_loss] = dict(model=model, folder=str(folder))
    return found


@pytest.mark.parametrize("norm_pix_loss", [False, True])
def test_pretraining_outputs_equal_transformers(norm_pix_loss, references):
    ref = references[norm_pix_loss]
    images = random_images(16, seed=3)
    noise = np.random.default_rng(4).uniform(size=(2, 16)).astype("float32")
    out = _run(ref["model"], images, noise)
    model = from_huggingface(ref["folder"])
    assert isinstance(model, MaskedAutoencoder)
    assert (model.mask_ratio, model.norm_pix_loss) == (0.5, norm_pix_loss)
    ours = model(images, noise=noise, training=False)
    np.testing.assert_array_equal(to_numpy(ours["mask"]), out.mask.numpy())
    assert_close(to_numpy(ours["logits"]), out.logits.numpy())
    np.testing.assert_allclose(float(to_numpy(ours["loss"])), float(out.loss), rtol=1e-5)


def test_encoder_folder_is_a_plain_vit(references, tmp_path):
    ref = references[False]
    ref["model"].vit.save_pretrained(tmp_path / "encoder")
    assert json.loads((tmp_path / "encoder" / "config.json").read_text())["architectures"] == [
        "ViTMAEModel"
    ]
    encoder = from_huggingface(str(tmp_path / "encoder"), pooling=None)
    images = random_images(16, seed=5)
    # with mask_ratio 0 transformers' encoder keeps every patch, in order for sorted noise
    ref["model"].vit.config.mask_ratio = 0.0
    ref["model"].vit.embeddings.config.mask_ratio = 0.0
    noise = np.tile(np.arange(16, dtype="float32"), (2, 1))
    with torch.no_grad():
        hidden = (
            ref["model"]
            .vit(torch.from_numpy(images).permute(0, 3, 1, 2), noise=torch.from_numpy(noise))
            .last_hidden_state.numpy()
        )
    ref["model"].vit.config.mask_ratio = 0.5
    assert_close(to_numpy(encoder(images, training=False)), hidden)


def test_export_loads_in_transformers(references, tmp_path):
    ref = references[True]
    model = from_huggingface(ref["folder"])
    previous = os.umask(0o022)
    try:  # keras_vit.export_huggingface hands a MaskedAutoencoder to the mae family's writer
        folder = export_huggingface(model, tmp_path / "export")
    finally:
        os.umask(previous)
    assert sorted(os.listdir(folder)) == ["config.json", "model.safetensors"]  # nothing staged
    for name in os.listdir(folder):  # the mode the umask gives, as every export
        assert stat.S_IMODE(os.stat(os.path.join(folder, name)).st_mode) == 0o644, name
    loaded = transformers.ViTMAEForPreTraining.from_pretrained(folder).eval()
    images = random_images(16, seed=6)
    noise = np.random.default_rng(7).uniform(size=(2, 16)).astype("float32")
    out = _run(loaded, images, noise)
    ours = model(images, noise=noise)
    assert_close(to_numpy(ours["logits"]), out.logits.numpy())
    np.testing.assert_allclose(float(to_numpy(ours["loss"])), float(out.loss), rtol=1e-5)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        export_huggingface_mae(model, folder)


def test_export_checks_every_target_before_writing(references, tmp_path):
    model = from_huggingface(references[False]["folder"])
    (tmp_path / "export" / "config.json").mkdir(parents=True)
    with pytest.raises(IsADirectoryError, match="config.json"):
        export_huggingface(model, tmp_path / "export", overwrite=True)
    assert os.listdir(tmp_path / "export") == ["config.json"]  # no model.safetensors written
    with pytest.raises(ValueError, match=r"'\.keras' names a Keras model archive"):
        export_huggingface_mae(model, tmp_path / "mae.keras")
    assert not os.path.lexists(tmp_path / "mae.keras")


def test_pretraining_models_are_named_with_their_encoder(references, tmp_path):
    from keras_vit.models.config import ViTConfig
    from keras_vit.models.mae import extract_mae_encoder

    model = from_huggingface(references[False]["folder"])
    with pytest.raises(ValueError, match=r"extract_mae_encoder\(model\)"):
        ViTConfig.from_model(model)
    assert ViTConfig.from_model(extract_mae_encoder(model)) == model.encoder_config


def test_sincos_tables_equal_transformers():
    from transformers.models.vit_mae import modeling_vit_mae as hf

    table = hf.build_2d_sinusoidal_position_embedding(4, 4, embed_dim=16, cls_token=True)
    half = table.shape[-1] // 2
    table = torch.cat([table[..., half:], table[..., :half]], dim=-1).numpy()
    np.testing.assert_allclose(mae_sincos_table((4, 4), 16)[0], table, atol=1e-6)


@pytest.mark.parametrize(
    "name, variant",
    [("vit_base_patch16_224.mae", "B/16"), ("timm/vit_large_patch16_224.mae", "L/16"),
     ("vit_huge_patch14_224.mae", "H/14")],
)  # fmt: skip
def test_timm_mae_names_are_plain_vits(name, variant):
    """timm's `*.mae` weights are plain ViT encoders: `from_timm` reads them as the base name."""
    from keras_vit.weights.timm.names import parse_timm_name

    spec = parse_timm_name(name)
    assert (spec.family.name, spec.tag, spec.arguments["variant"]) == ("vit", "mae", variant)
