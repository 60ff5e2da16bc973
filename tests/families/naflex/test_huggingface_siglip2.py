"""keras_vit/families/naflex/huggingface_siglip2.py: transformers' SigLIP 2 NaFlex towers, vs
transformers.

Tiny random `Siglip2VisionModel` (MAP head), `Siglip2ForImageClassification` and `Siglip2Model`
folders, every weight perturbed, run on one NaFlex batch mixing sizes and aspect ratios (a grid
one patch wide included, padding included) given to transformers through `naflex_to_siglip2`.
"""

import numpy as np
import pytest

from keras_vit import from_huggingface
from keras_vit.data import naflex_batch, naflex_from_siglip2, naflex_image_size, naflex_to_siglip2
from keras_vit.families.naflex import huggingface_siglip2 as S
from tests.helpers import backend_independent, to_numpy
from tests.weights.references import import_torch, import_transformers
from tests.weights.timm_cases import assert_close, perturb

torch = import_torch()  # before transformers, whatever the backend
transformers = import_transformers()

VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
              patch_size=4, num_patches=16)  # fmt: skip
TEXT = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
            vocab_size=64, bos_token_id=1, eos_token_id=2, pad_token_id=0)  # fmt: skip
RNG = np.random.default_rng(0)
IMAGES = [RNG.uniform(-1, 1, size).astype("float32") for size in
          [(12, 40, 3), (40, 12, 3), (20, 20, 3), (48, 4, 3)]]  # fmt: skip
BATCH = naflex_batch(IMAGES, 4, 24)


def _hf_run(model, **kwargs):
    inputs = {k: torch.from_numpy(v) for k, v in naflex_to_siglip2(BATCH).items()}
    with torch.no_grad():
        return model(**inputs, **kwargs)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("siglip2")
    vision = transformers.Siglip2VisionConfig(**VISION)
    tower = perturb(torch, transformers.Siglip2VisionModel(vision), seed=1).eval()
    tower.save_pretrained(root / "vision")
    config = transformers.Siglip2Config(vision_config=VISION, text_config=TEXT, num_labels=3)
    classifier = perturb(torch, transformers.Siglip2ForImageClassification(config), seed=2)
    classifier.eval().save_pretrained(root / "classifier")
    full = perturb(torch, transformers.Siglip2Model(config), seed=3).eval()
    full.save_pretrained(root / "full")
    return {"vision": (tower, root / "vision"), "classifier": (classifier, root / "classifier"),
            "full": (full, root / "full")}  # fmt: skip


def test_vision_model_pooler_and_tokens(folders):
    reference, folder = folders["vision"]
    expected = _hf_run(reference)
    valid = BATCH["patch_valid"]
    assert not valid.all() and (BATCH["patch_coord"][3, valid[3], 1] == 0).all()  # w = 1
    model = from_huggingface(folder)
    assert model.config.naflex and model.config.pooling == "map"
    assert_close(to_numpy(model.predict_on_batch(BATCH)), expected.pooler_output.numpy())
    tokens = from_huggingface(folder, pooling=None)
    got = to_numpy(tokens.predict_on_batch(BATCH))
    assert_close(got[valid], expected.last_hidden_state.numpy()[valid])


def test_classifier_and_siglip2_model_vision_tower(folders):
    reference, folder = folders["classifier"]
    model = from_huggingface(folder)
    assert model.output_shape == (None, 3) and model.config.pooling == "gap"
    assert_close(to_numpy(model.predict_on_batch(BATCH)), _hf_run(reference).logits.numpy())
    reference, folder = folders["full"]
    inputs = {k: torch.from_numpy(v) for k, v in naflex_to_siglip2(BATCH).items()}
    with torch.no_grad():
        expected = reference.get_image_features(**inputs).pooler_output.numpy()
    assert_close(to_numpy(from_huggingface(folder).predict_on_batch(BATCH)), expected)


def test_refusals(folders):
    _, folder = folders["vision"]
    with pytest.raises(ValueError, match="any size"):
        from_huggingface(folder, image_size=32)
    with pytest.raises(ValueError, match="hidden_act 'relu'"):
        S.siglip2_arguments({"hidden_act": "relu"})
    with pytest.raises(ValueError, match="not a SigLIP 2"):
        S.siglip2_vision_config({"model_type": "siglip2", "architectures": ["Siglip2TextModel"]})


@backend_independent
def test_siglip2_inputs_round_trip_and_errors():
    inputs = naflex_to_siglip2(BATCH)
    grids = [[side // 4 for side in naflex_image_size(i.shape[:2], 4, 24)] for i in IMAGES]
    assert inputs["spatial_shapes"].tolist() == grids
    assert inputs["pixel_attention_mask"].sum(axis=1).tolist() == [h * w for h, w in grids]
    back = naflex_from_siglip2(**inputs)
    assert all(np.array_equal(back[k], BATCH[k]) for k in BATCH)
    shuffled = {**BATCH, "patch_coord": BATCH["patch_coord"][:, ::-1].copy()}
    with pytest.raises(ValueError, match="row-major"):
        naflex_to_siglip2(shuffled)
    with pytest.raises(ValueError, match="h \\* w valid tokens"):
        naflex_from_siglip2(inputs["pixel_values"], inputs["pixel_attention_mask"], [[1, 1]] * 4)
