"""keras_vit/families/aimv2/huggingface.py: transformers' AIMv2 vision encoders, vs transformers.

Tiny perturbed `Aimv2VisionModel` (with its attention-pooling head, left out) and the vision
tower of an `Aimv2Model`, against transformers' `last_hidden_state` and its mean (timm's pooled
output); the configs keras_vit refuses.
"""

import pytest

from keras_vit import from_huggingface
from keras_vit.families.aimv2 import huggingface as A
from tests.helpers import backend_independent, to_numpy
from tests.weights.references import import_torch, import_transformers
from tests.weights.timm_cases import assert_close, perturb, random_images

torch = import_torch()  # before transformers, whatever the backend
transformers = import_transformers()

VISION = dict(hidden_size=32, intermediate_size=88, num_hidden_layers=2, num_attention_heads=2,
              image_size=28, patch_size=14)  # fmt: skip
TEXT = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
            vocab_size=64)  # fmt: skip
IMAGES = random_images(28)


def _hf_tokens(model):
    with torch.no_grad():
        pixels = torch.from_numpy(IMAGES).permute(0, 3, 1, 2)
        return model(pixel_values=pixels).last_hidden_state.numpy()


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("aimv2")
    tower = perturb(torch, transformers.Aimv2VisionModel(transformers.Aimv2VisionConfig(**VISION)))
    tower.eval().save_pretrained(root / "vision")
    config = transformers.Aimv2Config(vision_config=VISION, text_config=TEXT)
    full = perturb(torch, transformers.Aimv2Model(config), seed=1).eval()
    full.save_pretrained(root / "full")
    return {"vision": (tower, root / "vision"), "full": (full.vision_model, root / "full")}


@pytest.mark.parametrize("kind", ["vision", "full"])
def test_last_hidden_state_matches_transformers(folders, kind):
    reference, folder = folders[kind]
    model = from_huggingface(folder)
    assert model.config.norm == "rmsnorm" and model.config.pooling is None
    expected = _hf_tokens(reference)
    assert_close(to_numpy(model(IMAGES, training=False)), expected)
    if kind == "vision":  # the mean of the tokens: timm's pooled output
        pooled = from_huggingface(folder, pooling="gap", include_top=False)
        assert_close(to_numpy(pooled(IMAGES, training=False)), expected.mean(axis=1))


@backend_independent
def test_refused_configs_say_why():
    with pytest.raises(ValueError, match="is_native=True .* is not supported"):
        A.aimv2_arguments({"model_type": "aimv2_vision_model", "is_native": True})
    with pytest.raises(ValueError, match="hidden_act must be 'silu'.*Received: hidden_act='gelu'"):
        A.aimv2_arguments({"model_type": "aimv2_vision_model", "hidden_act": "gelu"})
    with pytest.raises(ValueError, match="model_type 'vit' is not an AIMv2 vision encoder"):
        A.aimv2_arguments({"model_type": "vit"})
    args = A.aimv2_arguments({"model_type": "aimv2", "vision_config": {"hidden_size": 64}})
    assert (args["hidden_dim"], args["mlp_dim"], args["layer_norm_epsilon"]) == (64, 2816, 1e-5)
