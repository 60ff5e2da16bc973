"""DINOv3 through `keras_vit.from_timm` (timm's `Eva` with `RotaryEmbeddingDinoV3`).

DINOv3's rotary table against timm's `RotaryEmbeddingDinoV3` (eval mode) on non-square grids;
every `vit_*_dinov3*` name's rotary settings on the meta device; timm's MLP widths for builder
overrides. The whole models (one tiny perturbed timm model per code path, `dynamic_image_size`,
`feature_extractor`) and the weight-name tables of every name are in
`tests/families/eva/test_timm_eva.py` (cases `dinov3_qkvb`, `dinov3_swiglu`).
"""

import numpy as np
import pytest

from keras_vit import export_timm, from_timm
from keras_vit.layers import RotaryEmbedding2D, apply_rotary_embedding
from keras_vit.weights.timm import names as N
from keras_vit.weights.timm import reader as T
from tests.helpers import to_numpy
from tests.weights.references import import_timm, import_torch

torch = import_torch()  # before timm, whatever the backend
timm = import_timm()


@pytest.mark.parametrize("normalize", ["separate", "min", "max"])
def test_rotary_table_matches_timm_dinov3(normalize):
    """Our interleaved table is timm's half-split one with its channels reordered."""
    from timm.layers.pos_embed_sincos import RotaryEmbeddingDinoV3, apply_rot_embed_cat

    grid, head_dim = (3, 5), 16
    rope = RotaryEmbeddingDinoV3(
        dim=head_dim, temperature=100, normalize_coords=normalize, grid_offset=0.25,
        shift_coords=0.5, jitter_coords=2.0, rescale_coords=2.0,  # augmentations: off in eval
    ).eval()  # fmt: skip
    expected = rope.get_embed(grid).numpy()
    layer = RotaryEmbedding2D(head_dim, temperature=100.0, grid_offset=0.25, kind="dinov3",
                              normalize_coords=normalize)  # fmt: skip
    got = to_numpy(layer(np.zeros((1, *grid, 4), "float32")))
    order = np.arange(head_dim).reshape(2, -1).T.reshape(-1)  # (0, d/2, 1, d/2 + 1, ...)
    half = np.concatenate([order, order + head_dim])
    np.testing.assert_allclose(got, expected[:, half], atol=2e-6)
    # The rotation: timm's half-split pairs on x, ours on x's reordered channels.
    x = np.random.default_rng(0).normal(size=(2, 2, 15, head_dim)).astype("float32")
    want = apply_rot_embed_cat(torch.from_numpy(x), torch.from_numpy(expected), half=True)
    ours = to_numpy(apply_rotary_embedding(x[..., order], got))
    np.testing.assert_allclose(ours, want.numpy()[..., order], atol=1e-5)


def _dinov3_names():
    return [name for name in timm.list_models("*dinov3*") if _parses(name)]


def _parses(name):
    try:
        return N.parse_timm_name(name).family.name == "dinov3"
    except ValueError:
        return False


def test_every_dinov3_name_is_timms_rotary_and_blocks():
    """Each name's RoPE, biases, SwiGLU and input size against timm's model (meta device)."""
    names = _dinov3_names()
    for name in names:
        spec = N.parse_timm_name(name)
        with torch.device("meta"):
            model = timm.create_model(name, depth=1)
        config = T.timm_config(spec, num_layers=1)
        rope, attention = model.rope, model.blocks[0].attn
        got = dict(
            kind=type(rope).__name__,
            temperature=rope.temperature,
            normalize_coords=rope.normalize_coords,
            grid_offset=rope.grid_offset,
            rotate_half=attention.rotate_half,
            augmentations=rope.aug_active,
            qkv_bias=attention.q_bias is not None,
            swiglu=type(model.blocks[0].mlp).__name__ == "SwiGLU",
            heads=attention.num_heads,
            pooling=model.global_pool,
            input_size=tuple(model.pretrained_cfg["input_size"][1:]),
        )
        ours = dict(
            kind="RotaryEmbeddingDinoV3" if config.rotary_embedding == "dinov3" else None,
            temperature=config.rotary_temperature,
            normalize_coords=config.rotary_normalize_coords,
            grid_offset=config.rotary_grid_offset,
            rotate_half=True,  # the loader reorders the query / key channels
            augmentations=False,
            qkv_bias=spec.qkv_bias,
            swiglu=config.mlp == "swiglu",
            heads=config.num_heads,
            pooling={"gap": "avg", "token": "token"}[config.pooling],
            input_size=config.image_size,
        )
        assert ours == got, f"{name}: ours {ours}, timm's {got}"
    # timm 1.0.31: vit_{tiny,small,small_plus,base,large,huge_plus,7b}_patch16_dinov3[_qkvb]
    assert len(names) == 12, names


def test_builder_overrides_and_no_export():
    config = T.timm_config("vit_7b_patch16_dinov3", num_layers=1, hidden_dim=128, num_heads=2)
    assert (config.num_classes, config.include_top, config.pooling) == (1000, False, "gap")
    assert (config.mlp, config.mlp_dim) == ("swiglu", 256)  # timm: mlp_ratio=2, align 64
    assert (config.rotary_embedding, config.rotary_temperature) == ("dinov3", 100.0)
    narrow = T.timm_config("vit_7b_patch16_dinov3", hidden_dim=36, num_heads=1, num_layers=1)
    assert narrow.mlp_dim == 128  # int(36 * 2) = 72, rounded up to a multiple of 64
    assert T.timm_config("vit_large_patch16_dinov3_qkvb").mlp_dim == 4096  # GELU MLP
    model = from_timm("vit_small_patch16_dinov3", num_layers=1, hidden_dim=32, num_heads=2,
                      image_size=32)  # fmt: skip
    with pytest.raises(ValueError, match="which keras_vit reads .* but does not write yet"):
        export_timm(model, "unused.safetensors")
