"""Tests for keras_vit/families/beit/huggingface.py: transformers' BEiT folders.

Two tiny perturbed models saved with `save_pretrained`: `BeitForImageClassification` with a
relative position bias per block, mean pooling and LayerScale; `BeitModel` with one shared bias,
an absolute position embedding, the class token after the final norm and no LayerScale. Against
transformers' `logits`, `pooler_output` and `last_hidden_state` (within 1e-5), at the
checkpoint's size and, against `interpolate_pos_encoding=True`, at others; transformers 5's
in-memory names map to the file's; bad configs and `dynamic_image_size` are refused.
"""

import numpy as np
import pytest

from keras_vit import from_huggingface
from keras_vit.families.beit.huggingface import beit_arguments, normalize_names
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

SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
             image_size=32, patch_size=16)  # fmt: skip
CASES = {
    "block": ("BeitForImageClassification",
              dict(num_labels=3, use_relative_position_bias=True, use_mean_pooling=True,
                   layer_scale_init_value=0.1)),
    "shared": ("BeitModel",
               dict(use_shared_relative_position_bias=True, use_absolute_position_embeddings=True,
                    use_mean_pooling=False, layer_scale_init_value=0.0)),
}  # fmt: skip



@pytest.fixture(scope="module")
def references(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf_beit")
    models = {
        case: getattr(transformers, cls)(transformers.BeitConfig(**SIZES, **options))
        for case, (cls, options) in CASES.items()
    }
    for seed, model in enumerate(models.values()):
        perturb(torch, model, seed, ("lambda",)).eval()
    return saved_pretrained(root, models)


def test_classifier_with_a_bias_per_block(references):
    ref = references["block"]
    images = random_images(32, seed=1)
    assert_close(
        to_numpy(from_huggingface(ref["folder"])(images, training=False)),
        torch_forward(torch, ref["model"], images).logits.numpy(),
    )
    tokens = from_huggingface(ref["folder"], include_top=False, pooling=None)
    hidden = torch_forward(torch, ref["model"].beit, images).last_hidden_state.numpy()
    assert_close(to_numpy(tokens(images, training=False)), hidden)


def test_model_with_a_shared_bias(references):
    ref = references["shared"]
    images = random_images(32, seed=2)
    out = torch_forward(torch, ref["model"], images)
    pooled = from_huggingface(ref["folder"])
    assert pooled.output_shape == (None, 32)
    assert_close(to_numpy(pooled(images, training=False)), out.pooler_output.numpy())
    tokens = from_huggingface(ref["folder"], pooling=None)
    assert_close(to_numpy(tokens(images, training=False)), out.last_hidden_state.numpy())


@backend_independent
def test_in_memory_names_map_to_the_file_names(references):
    from safetensors.numpy import load_file  # read_state_dict asks Keras for a distribution

    for case in CASES:
        model = references[case]["model"]
        memory = {k: v.numpy() for k, v in model.state_dict().items()}
        saved = load_file(references[case]["folder"] + "/model.safetensors")
        from_memory, from_file = normalize_names(memory), normalize_names(saved)
        assert sorted(from_memory) == sorted(from_file)
        for key, value in from_memory.items():
            np.testing.assert_array_equal(value, from_file[key], err_msg=key)


@backend_independent
def test_config_checks_name_the_value(references):
    with pytest.raises(ValueError, match="architecture 'BeitForSemanticSegmentation' is not"):
        beit_arguments({"architectures": ["BeitForSemanticSegmentation"]})
    with pytest.raises(ValueError, match="hidden_act 'relu' is not supported"):
        beit_arguments({"hidden_act": "relu"})
    with pytest.raises(ValueError, match="both set"):
        beit_arguments({"use_relative_position_bias": True,
                        "use_shared_relative_position_bias": True})  # fmt: skip
    with pytest.raises(ValueError, match="dynamic_image_size=True is not supported"):
        from_huggingface(references["block"]["folder"], dynamic_image_size=True)


@pytest.mark.parametrize(("case", "size"), [("block", (48, 48)), ("shared", (48, 32))])
def test_another_image_size_as_transformers_interpolates(references, case, size):
    """At another (also non-square) size: transformers' `interpolate_pos_encoding=True` (each
    relative position table resized bilinearly, the absolute table bicubically)."""
    ref = references[case]
    images = random_images(size, seed=3)
    with torch.no_grad():
        out = ref["model"](
            torch.from_numpy(images).permute(0, 3, 1, 2), interpolate_pos_encoding=True
        )
    expected = out.logits if case == "block" else out.pooler_output
    model = from_huggingface(ref["folder"], image_size=size)
    assert model.config.image_size == size
    assert_close(to_numpy(model.predict_on_batch(images)), expected.numpy())


def test_table_resize_equals_pytorch_interpolate():  # keras.ops resample: every backend
    """`resize_relative_position_table_bilinear` against `F.interpolate` on the offset map."""
    from keras_vit.layers.relative_position import resize_relative_position_table_bilinear

    table = np.random.default_rng(0).normal(size=(7 * 7 + 3, 2)).astype("float32")  # 4 x 4
    for grid in ((6, 6), (2, 3)):
        offsets = torch.from_numpy(table[:49]).reshape(1, 7, 7, 2).permute(0, 3, 1, 2)
        rows, cols = 2 * grid[0] - 1, 2 * grid[1] - 1
        resized = torch.nn.functional.interpolate(offsets, size=(rows, cols), mode="bilinear")
        expected = np.concatenate(
            [resized.permute(0, 2, 3, 1).reshape(rows * cols, 2).numpy(), table[49:]]
        )
        got = resize_relative_position_table_bilinear(table, grid, (4, 4))
        np.testing.assert_allclose(got, expected, atol=1e-6)
    with pytest.raises(ValueError, match=r"a 4 x 4 window has 52 rows. Received: shape \(50, 2\)"):
        resize_relative_position_table_bilinear(table[:50], (2, 2), (4, 4))
