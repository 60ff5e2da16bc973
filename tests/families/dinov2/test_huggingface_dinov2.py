"""Tests for keras_vit/families/dinov2/huggingface.py: transformers' DINOv2 folders.

Three tiny perturbed models saved with `save_pretrained` (`Dinov2ForImageClassification` with
the GELU MLP; `Dinov2Model` with `use_swiglu_ffn`; `Dinov2WithRegistersModel`), against
transformers' `last_hidden_state`, `pooler_output` and `logits` (within 1e-5), at the
checkpoint's image size and at another one (the position embedding resampled as transformers
does); the file names and transformers 5's in-memory names map to the same table; bad configs
are refused naming the value; the two position-embedding resamplings compared (the numbers
docs/weights.md quotes).
"""

import numpy as np
import pytest

from keras_vit import from_huggingface
from keras_vit.families.dinov2.huggingface import dinov2_arguments, normalize_names
from keras_vit.layers.position_embedding import resample_position_embedding
from tests.helpers import backend_independent, to_numpy
from tests.weights.references import import_torch, import_transformers
from tests.weights.timm_cases import (
    assert_close,
    perturb,
    random_images,
    saved_pretrained,
    torch_forward,
)

torch = import_torch()  # imported before transformers, whatever the backend
transformers = import_transformers()

SIZES = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28,
             patch_size=14, layerscale_value=0.5)  # fmt: skip
# case: (transformers class, config class, config options)
CASES = {
    "classifier": ("Dinov2ForImageClassification", "Dinov2Config", dict(num_labels=3)),
    "swiglu": ("Dinov2Model", "Dinov2Config", dict(use_swiglu_ffn=True)),
    "registers": ("Dinov2WithRegistersModel", "Dinov2WithRegistersConfig",
                  dict(num_register_tokens=2)),
}  # fmt: skip



@pytest.fixture(scope="module")
def references(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf_dinov2")
    models = {
        case: getattr(transformers, cls)(getattr(transformers, config_cls)(**SIZES, **options))
        for case, (cls, config_cls, options) in CASES.items()
    }
    for seed, model in enumerate(models.values()):
        perturb(torch, model, seed, ("lambda",)).eval()
    return saved_pretrained(root, models)


def test_classifier_logits_and_tokens(references):
    ref = references["classifier"]
    images = random_images(28, seed=1)
    out = torch_forward(torch, ref["model"], images)
    model = from_huggingface(ref["folder"])
    assert model.output_shape == (None, 3)
    assert_close(to_numpy(model(images, training=False)), out.logits.numpy())
    tokens = from_huggingface(ref["folder"], include_top=False, pooling=None)
    hidden = torch_forward(torch, ref["model"].dinov2, images).last_hidden_state.numpy()
    assert_close(to_numpy(tokens(images, training=False)), hidden)


@pytest.mark.parametrize("case", ["swiglu", "registers"])
def test_model_at_another_image_size(case, references):
    """56 px (a 4 x 4 grid from the 2 x 2 one): `interpolate_pos_encoding` against our
    resampling at load time; the default pooling is `pooler_output` (checked once)."""
    ref = references[case]
    images = random_images(56, seed=2)
    out = torch_forward(torch, ref["model"], images)
    tokens = from_huggingface(ref["folder"], image_size=56, pooling=None)
    prefix = 1 + (2 if case == "registers" else 0)
    assert tokens.output_shape == (None, prefix + 16, 32)
    assert_close(to_numpy(tokens(images, training=False)), out.last_hidden_state.numpy())
    if case == "registers":  # one default-pooling model is enough (JAX compiles each)
        pooled = from_huggingface(ref["folder"], image_size=56)
        assert_close(to_numpy(pooled(images, training=False)), out.pooler_output.numpy())


@backend_independent
def test_file_and_in_memory_names_agree(references):
    """transformers 5's `state_dict()` names and the saved file's map to the same arrays."""
    from safetensors.numpy import load_file  # read_state_dict asks Keras for a distribution

    model = references["swiglu"]["model"]
    memory = {k: v.numpy() for k, v in model.state_dict().items()}
    saved = load_file(references["swiglu"]["folder"] + "/model.safetensors")
    assert any(".mlp.weights_in." in k for k in saved)
    assert any(".mlp.gate_proj." in k for k in memory)
    from_memory, from_file = normalize_names(memory), normalize_names(saved)
    assert sorted(from_memory) == sorted(from_file)
    for key, value in from_memory.items():
        np.testing.assert_array_equal(value, from_file[key], err_msg=key)


@backend_independent
def test_config_checks_name_the_value():
    with pytest.raises(ValueError, match="architecture 'Dinov2Backbone' is not supported"):
        dinov2_arguments({"model_type": "dinov2", "architectures": ["Dinov2Backbone"]})
    with pytest.raises(ValueError, match="hidden_act 'relu' is not supported"):
        dinov2_arguments({"model_type": "dinov2", "hidden_act": "relu"})
    with pytest.raises(ValueError, match="model_type 'vit' is not DINOv2"):
        dinov2_arguments({"model_type": "vit"})
    with pytest.raises(ValueError, match="patch_size must be an int or a pair"):
        dinov2_arguments({"model_type": "dinov2", "patch_size": "14"})


@backend_independent
def test_resampling_of_transformers_and_timm():
    """`Dinov2Model` resamples bicubic without antialiasing, timm (and transformers' DINOv2
    with registers) with: both reproduced exactly; they differ when the grid shrinks (ViT-S/14's
    37 x 37 table to 16 x 16, 224 px) and slightly when it grows (to 64 x 64, 896 px)."""
    rng = np.random.default_rng(0)
    posemb = rng.normal(size=(1, 1 + 37 * 37, 8)).astype("float32")
    grid = torch.from_numpy(posemb[:, 1:].reshape(1, 37, 37, 8)).permute(0, 3, 1, 2)
    for size in (16, 64):
        found = {}
        for antialias in (False, True):
            ref = torch.nn.functional.interpolate(
                grid, size=(size, size), mode="bicubic", align_corners=False, antialias=antialias
            )
            ref = ref.permute(0, 2, 3, 1).reshape(1, -1, 8).numpy()
            ours = resample_position_embedding(
                posemb, size, 1, interpolation="bicubic", antialias=antialias
            )
            assert np.abs(ours[:, 1:] - ref).max() < 1e-5
            found[antialias] = ref
        difference = np.abs(found[True] - found[False]).max() / np.abs(posemb).max()
        assert difference > (0.1 if size == 16 else 1e-3)
