"""keras_vit/weights/huggingface/verify.py: `export_huggingface` checks, before writing, that
the model its `config.json` describes loads exactly the weights it writes (transformers' model on
the meta device, keys as `from_pretrained` renames them; keras_vit's declaration where
transformers is missing), and the declaration is transformers' own."""

import os

import numpy as np
import pytest

import keras_vit
from keras_vit.weights.huggingface import export as E
from keras_vit.weights.huggingface import verify
from tests.weights.references import import_torch, import_transformers

torch = import_torch()
transformers = import_transformers()

CASES = {
    "classifier": dict(image_size=16, num_classes=3),
    "headless_no_qkv_bias": dict(image_size=(16, 24), num_classes=0, include_top=False),
}


def _export(case, folder):
    model = keras_vit.ViT("mu/8", num_layers=1, **CASES[case])
    if case == "headless_no_qkv_bias":  # all-zero q/k/v biases: written as qkv_bias=False
        for weight in model.weights:
            if weight.path.endswith(("query/bias", "key/bias", "value/bias")):
                weight.assign(np.zeros(weight.shape, "float32"))
    return model, keras_vit.export_huggingface(model, str(folder))


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_declaration_is_transformers_own(case, tmp_path):
    import json

    from safetensors.numpy import load_file

    _, folder = _export(case, tmp_path / case)
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        hf = json.load(f)
    written = {k: v.shape for k, v in load_file(os.path.join(folder, "model.safetensors")).items()}
    expected, renamed, source = verify.expected_state_shapes(hf, written)
    assert source == "transformers" and expected == renamed
    assert verify.declared_state_shapes(hf) == written


def test_a_masked_autoencoder_s_declaration_is_transformers_own():
    from keras_vit.families.mae.huggingface import mae_huggingface_config
    from keras_vit.models.mae import build_mae_model
    from keras_vit.weights.writing import state_dict_from_table

    model = build_mae_model("mu/8", image_size=16, num_layers=1, decoder_hidden_dim=16,
                            decoder_num_layers=1, decoder_num_heads=2,
                            decoder_mlp_dim=32)  # fmt: skip
    hf = mae_huggingface_config(model)
    from keras_vit.families.mae.huggingface import mae_name_table

    arrays, _ = state_dict_from_table(model, mae_name_table(model))
    arrays = {k if k.startswith("decoder.") else f"vit.{k}": v for k, v in arrays.items()}
    written = {k: tuple(v.shape) for k, v in arrays.items()}
    expected, renamed, _ = verify.expected_state_shapes(hf, written)
    assert expected == renamed
    assert verify.declared_state_shapes(hf) == written


@pytest.mark.parametrize("transformers_installed", [True, False], ids=["meta", "declared"])
def test_a_config_that_does_not_fit_the_weights_is_refused_before_writing(
    transformers_installed, tmp_path, monkeypatch
):
    """A config.json whose model would not load the weights (here: an intermediate size the
    MLP weights do not have) is refused, and the folder stays empty."""
    if not transformers_installed:
        monkeypatch.setattr(verify, "importable_transformers", lambda: None)
    real = E.huggingface_config
    monkeypatch.setattr(
        E, "huggingface_config", lambda *a, **k: {**real(*a, **k), "intermediate_size": 48}
    )
    model = keras_vit.ViT("mu/8", image_size=16, num_layers=1, num_classes=3)
    folder = tmp_path / "vit"
    source = "transformers" if transformers_installed else "keras_vit's declaration"
    with pytest.raises(ValueError, match=rf"\(checked against {source}\); nothing was written.*"
                                         r"other shapes: \[.*(mlp.fc1|intermediate)"):  # fmt: skip
        keras_vit.export_huggingface(model, str(folder))
    assert not folder.exists() or not os.listdir(folder)
    with pytest.raises(ValueError, match="No declared state dict of transformers' 'BeitModel'"):
        verify.declared_state_shapes({"architectures": ["BeitModel"]})
