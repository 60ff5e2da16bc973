"""DINOv3 through `keras_vit.from_timm` (timm's `Eva` with `RotaryEmbeddingDinoV3`).

One tiny perturbed timm model per code path (fused qkv with q/v biases and a GELU MLP at
32 x 32; no biases and an aligned SwiGLU at 32 x 48), against timm's forward pass; with
`dynamic_image_size` at another (non-square) size, and `feature_extractor` against
`forward_intermediates`; DINOv3's rotary table against timm's `RotaryEmbeddingDinoV3` (eval
mode) on non-square grids; every `vit_*_dinov3*` name's rotary settings on the meta device (the
weight-name tables of all of them: `test_timm_eva.py::test_every_eva_name_we_read_is_timms_...`).
"""

import numpy as np
import pytest

from keras_vit import export_timm, feature_extractor, from_timm
from keras_vit.layers import RotaryEmbedding2D, apply_rotary_embedding
from keras_vit.weights import timm as T
from keras_vit.weights import timm_names as N
from tests.helpers import to_numpy
from tests.weights.references import import_timm, import_torch
from tests.weights.timm_cases import assert_close, perturb, random_images, timm_reference, timm_run

torch = import_torch()  # before timm, whatever the backend
timm = import_timm()

SMALL = dict(depth=2, embed_dim=32, num_heads=2, num_classes=3)  # head width 16
OURS = dict(num_layers=2, hidden_dim=32, num_heads=2)
# id: (timm name, image size): 2 x 2 patches of 16 px (as the other timm tests), and a fixed
# non-square 2 x 3 grid (the size of the dynamic-size test).
CASES = {
    "qkvb": ("vit_small_patch16_dinov3_qkvb.lvd1689m", 32),  # fused qkv + q/v biases, GELU MLP
    "swiglu": ("vit_huge_plus_patch16_dinov3.lvd1689m", (32, 48)),  # no biases, SwiGLU (align 8)
}


def _timm_model(case):
    name, size = CASES[case]
    return timm.create_model(name.partition(".")[0], pretrained=False, img_size=size,
                             **SMALL).eval()  # fmt: skip


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    folder = tmp_path_factory.mktemp("timm_dinov3")
    found = {}
    for case in CASES:
        model = perturb(torch, _timm_model(case), seed=len(case))
        images = random_images(CASES[case][1])
        found[case] = timm_reference(torch, model, images, folder / f"{case}.safetensors")
    return found


@pytest.fixture(scope="module")
def models(references):
    return {
        case: from_timm(CASES[case][0], ref["path"], image_size=CASES[case][1], **OURS)
        for case, ref in references.items()
    }


@pytest.mark.parametrize("case", list(CASES))
def test_matches_timm(case, references, models):
    ref = references[case]
    assert_close(to_numpy(models[case](ref["images"], training=False)), ref["expected"])


def test_dynamic_image_size_and_features_match_timm(references):
    """A non-square size at call time (timm's DINOv3 is dynamic_img_size=True: its RoPE
    normalises each axis to [-1, 1] again); the intermediates at that size too."""
    ref = references["qkvb"]
    model = from_timm(CASES["qkvb"][0], ref["path"], dynamic_image_size=True, **OURS)
    images = random_images((32, 48), seed=2)
    assert_close(to_numpy(model(images, training=False)), timm_run(torch, ref["model"], images))
    ours = feature_extractor(model, [0, 1])(images, training=False)
    theirs = timm_run(torch, ref["model"], images, ref["model"].forward_intermediates,
                      indices=[0, 1], norm=False, output_fmt="NCHW",
                      intermediates_only=True)  # fmt: skip
    assert [tuple(o.shape) for o in ours] == [(2, 2, 3, 32)] * 2
    for a, b in zip(ours, theirs, strict=True):
        assert_close(to_numpy(a), b)


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


def test_builder_overrides_and_no_export(models):
    config = T.timm_config("vit_7b_patch16_dinov3", num_layers=1, hidden_dim=128, num_heads=2)
    assert (config.num_classes, config.include_top, config.pooling) == (1000, False, "gap")
    assert (config.mlp, config.mlp_dim) == ("swiglu", 256)  # timm: mlp_ratio=2, align 64
    assert (config.rotary_embedding, config.rotary_temperature) == ("dinov3", 100.0)
    narrow = T.timm_config("vit_7b_patch16_dinov3", hidden_dim=36, num_heads=1, num_layers=1)
    assert narrow.mlp_dim == 128  # int(36 * 2) = 72, rounded up to a multiple of 64
    assert T.timm_config("vit_large_patch16_dinov3_qkvb").mlp_dim == 4096  # GELU MLP
    with pytest.raises(ValueError, match="which keras_vit reads .* but does not write yet"):
        export_timm(models["qkvb"], "unused.safetensors")
