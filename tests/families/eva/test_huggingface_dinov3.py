"""Tests for keras_vit/families/eva/huggingface_dinov3.py: transformers' DINOv3ViTModel folders.

Two tiny perturbed `DINOv3ViTModel`s saved with `save_pretrained` (the plain GELU MLP with
query / value biases; the gated MLP with a key bias and without output / MLP biases), against
transformers' `last_hidden_state` and `pooler_output` (within 1e-5), on a non-square image with
`dynamic_image_size`; the RoPE tables of transformers, timm and ours compared (the numbers
docs/weights.md quotes).
"""

import numpy as np
import pytest

from keras_vit import from_huggingface
from keras_vit.families.eva.huggingface_dinov3 import dinov3_arguments
from tests.helpers import to_numpy
from tests.weights.references import import_timm, import_torch, import_transformers
from tests.weights.timm_cases import (
    assert_close,
    random_images,
    saved_pretrained,
    torch_forward,
)

torch = import_torch()  # imported before transformers, whatever the backend
transformers = import_transformers()

SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
             image_size=32, patch_size=16, num_register_tokens=4)  # fmt: skip
CASES = {
    "mlp": dict(),
    "gated": dict(use_gated_mlp=True, hidden_act="silu", key_bias=True, proj_bias=False,
                  mlp_bias=False, query_bias=False),  # fmt: skip
}


def _perturb(model, seed):
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            noise = torch.randn(parameter.shape, generator=generator) * 0.2
            around_one = "norm" in name and name.endswith("weight") or "lambda1" in name
            parameter.copy_(noise + 1.0 if around_one else noise)
    return model.eval()


def _run(model, images):
    out = torch_forward(torch, model, images)
    return out.last_hidden_state.numpy(), out.pooler_output.numpy()


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf_dinov3")
    models = {
        case: _perturb(transformers.DINOv3ViTModel(transformers.DINOv3ViTConfig(**SIZES, **kw)), i)
        for i, (case, kw) in enumerate(CASES.items())
    }
    return saved_pretrained(root, models)


@pytest.mark.parametrize("case", list(CASES))
def test_matches_transformers(case, references):
    ref = references[case]
    images = random_images(32, seed=1)
    hidden, _ = _run(ref["model"], images)
    tokens = from_huggingface(ref["folder"], pooling=None)
    assert tokens.output_shape == (None, 1 + 4 + 4, 32)
    assert_close(to_numpy(tokens(images, training=False)), hidden)


def test_dynamic_image_size_on_a_non_square_image(references):
    """The default pooling="token" is pooler_output (the class token of last_hidden_state)."""
    ref = references["gated"]
    images = random_images((48, 32), seed=2)
    model = from_huggingface(ref["folder"], dynamic_image_size=True)
    assert_close(to_numpy(model(images, training=False)), _run(ref["model"], images)[1])


def test_config_checks_name_the_value():
    with pytest.raises(ValueError, match="architecture 'DINOv3ViTBackbone' is not supported"):
        dinov3_arguments({"architectures": ["DINOv3ViTBackbone"]})
    with pytest.raises(ValueError, match="use_gated_mlp with hidden_act 'gelu'"):
        dinov3_arguments({"use_gated_mlp": True, "hidden_act": "gelu"})
    with pytest.raises(ValueError, match="hidden_act 'relu' is not supported"):
        dinov3_arguments({"hidden_act": "relu"})


def test_rope_tables_of_transformers_timm_and_ours():
    """transformers multiplies by inverse frequencies, timm (and we) divide by periods: the
    tables differ by float32 rounding only (DINOv3 B/16 heads, a 16 x 16 grid)."""
    import_timm()
    from timm.layers.pos_embed_sincos import RotaryEmbeddingDinoV3
    from transformers.models.dinov3_vit.modeling_dinov3_vit import (
        DINOv3ViTRopePositionEmbedding,
    )

    from keras_vit.layers import dinov3_rotary_embedding_2d

    head_dim, grid = 64, (16, 16)
    config = transformers.DINOv3ViTConfig(hidden_size=768, num_attention_heads=12, patch_size=16)
    cos, sin = DINOv3ViTRopePositionEmbedding(config).eval()(torch.zeros(1, 3, 256, 256))
    hf = torch.cat([sin, cos], -1).numpy()
    timm = RotaryEmbeddingDinoV3(dim=head_dim, temperature=100).eval().get_embed(grid).numpy()
    order = np.arange(head_dim).reshape(2, -1).T.reshape(-1)
    ours = to_numpy(dinov3_rotary_embedding_2d(grid, head_dim, 100.0))
    ours = ours[:, np.argsort(np.concatenate([order, order + head_dim]))]  # timm's layout
    assert np.abs(hf - timm).max() < 1e-5
    assert np.abs(ours - timm).max() < 2e-6
