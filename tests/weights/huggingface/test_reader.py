"""Tests for keras_vit/weights/huggingface/: transformers ViT folders into keras_vit models.

The reference is transformers itself (a `test` extra): small random `ViTModel` /
`ViTForImageClassification`s with every weight perturbed, saved with `save_pretrained`, run by
PyTorch in this process.
"""

import json
import os

import numpy as np
import pytest

from keras_vit import from_huggingface
from keras_vit.weights.huggingface import vit as H
from tests.weights.references import import_torch, import_transformers

torch = import_torch()  # imported before transformers, whatever the backend
transformers = import_transformers()

RTOL = 1e-5
SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)


def _images(size, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (2, size, size, 3)).astype("float32")


def _assert_close(actual, expected, rtol=RTOL):
    error = np.abs(np.asarray(actual, "float64") - expected).max() / np.abs(expected).max()
    assert error <= rtol, f"max relative error {error:.2e} > {rtol:.0e}"


def _perturb(model, seed):
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            noise = torch.randn(parameter.shape, generator=generator) * 0.2
            norm = "layernorm" in name and name.endswith("weight")
            parameter.copy_(noise + 1.0 if norm else noise)
    return model.eval()


def _reference(model, images, **kwargs):
    with torch.no_grad():
        return model(torch.from_numpy(images).permute(0, 3, 1, 2), **kwargs)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Saved models: a classifier (exact GELU), a ViTModel with pooler (tanh GELU, no q/k/v
    bias, eps 1e-6), and the classifier as pytorch_model.bin."""
    root = tmp_path_factory.mktemp("hf")
    config = transformers.ViTConfig(image_size=32, patch_size=8, num_labels=5, **SIZES)
    classifier = _perturb(transformers.ViTForImageClassification(config), seed=1)
    classifier.save_pretrained(root / "classifier")
    os.makedirs(root / "bin")
    with open(root / "bin" / "config.json", "w") as f:
        json.dump(json.loads((root / "classifier" / "config.json").read_text()), f)
    torch.save(classifier.state_dict(), root / "bin" / "pytorch_model.bin")  # v5 names
    base_config = transformers.ViTConfig(
        image_size=32, patch_size=8, hidden_act="gelu_new", qkv_bias=False,
        layer_norm_eps=1e-6, **SIZES,
    )  # fmt: skip
    base = _perturb(transformers.ViTModel(base_config), seed=2)
    base.save_pretrained(root / "base")
    return {"classifier": (classifier, root / "classifier"), "base": (base, root / "base"),
            "bin": (classifier, root / "bin")}  # fmt: skip


def test_classifier_logits(folders):
    model, folder = folders["classifier"]
    images = _images(32)
    ours = from_huggingface(folder)
    assert ours.output_shape == (None, 5)
    _assert_close(ours.predict(images, verbose=0), _reference(model, images).logits.numpy())


def test_pytorch_bin_with_transformers_5_names(folders):
    model, folder = folders["bin"]
    images = _images(32)
    _assert_close(
        from_huggingface(folder).predict(images, verbose=0),
        _reference(model, images).logits.numpy(),
    )


def test_vit_model_last_hidden_state_and_pooler(folders):
    import keras

    model, folder = folders["base"]
    images = _images(32, seed=3)
    expected = _reference(model, images)
    tokens = from_huggingface(folder, pooling=None)
    _assert_close(tokens.predict(images, verbose=0), expected.last_hidden_state.numpy())
    cls = from_huggingface(folder)  # include_top=False, pooling="token"
    _assert_close(cls.predict(images, verbose=0), expected.last_hidden_state[:, 0].numpy())
    with_pooler = from_huggingface(folder, num_classes=3, representation_size=32)
    pre_logits = keras.Model(with_pooler.input, with_pooler.get_layer("pre_logits").output)
    _assert_close(pre_logits.predict(images, verbose=0), expected.pooler_output.numpy())
    assert not np.any(keras.ops.convert_to_numpy(with_pooler.get_layer("head").kernel))


def test_other_image_size_matches_interpolate_pos_encoding(folders):
    model, folder = folders["classifier"]
    images = _images(48, seed=4)
    expected = _reference(model, images, interpolate_pos_encoding=True).logits.numpy()
    _assert_close(from_huggingface(folder, image_size=48).predict(images, verbose=0), expected)


def test_config_arguments_and_errors(tmp_path):
    config = {
        "model_type": "vit",
        "architectures": ["ViTForImageClassification"],
        **SIZES,
        "image_size": [32, 48],
        "patch_size": 8,
        "hidden_act": "gelu_pytorch_tanh",
    }
    arguments = H.vit_arguments(config)
    assert arguments["image_size"] == (32, 48) and arguments["approximate_gelu"]
    assert arguments["layer_norm_epsilon"] == 1e-12 and arguments["num_layers"] == 2
    with pytest.raises(ValueError, match=r"model_type 'deit' is not a ViT"):
        H.vit_arguments({**config, "model_type": "deit"})
    with pytest.raises(ValueError, match=r"hidden_act 'relu' is not supported. Expected one of"):
        H.vit_arguments({**config, "hidden_act": "relu"})
    with pytest.raises(ValueError, match=r"architecture 'ViTForSegmentation' is not supported"):
        H.vit_arguments({**config, "architectures": ["ViTForSegmentation"]})
    with pytest.raises(FileNotFoundError, match="not found"):
        from_huggingface(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="No config.json"):
        from_huggingface(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(FileNotFoundError, match=r"No weights .*model\.safetensors"):
        from_huggingface(tmp_path)


def test_checkpoint_that_does_not_fit(folders, tmp_path):
    _, folder = folders["classifier"]
    config = json.loads((folder / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 3}))
    os.symlink(folder / "model.safetensors", tmp_path / "model.safetensors")
    with pytest.raises(ValueError) as info:
        from_huggingface(tmp_path)
    assert "missing    encoder.layer.2.layernorm_before.weight: expected (32,)" in str(info.value)
    assert "16 problem(s)" in str(info.value)
