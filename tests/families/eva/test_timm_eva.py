"""timm's `eva.py` families through `keras_vit.from_timm` (keras_vit/weights/timm_eva*.py).

One tiny perturbed timm model per code path (fused qkv + packed SwiGLU, separate q/k/v + SwiGLU
sub-LN, EVA-CLIP's attention inner norm and class-token head, EVA's GELU MLP, the rotary
register ViTs without q/v biases or absolute position embedding), compared with timm's own
forward pass; other sizes, `dynamic_image_size` and `feature_extractor` against timm's
`dynamic_img_size` and `forward_intermediates`; every name of the families against timm's
state dict on the meta device.
"""

import numpy as np
import pytest

from keras_vit import feature_extractor, from_timm
from keras_vit.inspection import attention_maps
from keras_vit.weights.timm import names as N
from keras_vit.weights.timm import reader as T
from tests.helpers import to_numpy
from tests.weights.references import import_timm, import_torch
from tests.weights.timm_cases import (
    DYNAMIC_RTOL,
    assert_close,
    assert_intermediates_match,
    name_fields,
    perturb,
    random_images,
    timm_reference,
    timm_run,
)

torch = import_torch()  # before timm, whatever the backend
timm = import_timm()

SMALL = dict(depth=2, embed_dim=32, num_heads=2, num_classes=3)  # head width 16: RoPE needs 4 | 16
OURS = dict(num_layers=2, hidden_dim=32, num_heads=2)

# id: (timm name, image size: a 2 x 2 grid of its patches).
CASES = {
    "eva02": ("eva02_tiny_patch14_336.mim_in22k_ft_in1k", 28),  # fused qkv, packed SwiGLU
    "eva02_sub_ln": ("eva02_base_patch14_448.mim_in22k_ft_in22k_in1k", 28),  # q/k/v, sub-LN
    "eva02_clip": ("eva02_base_patch16_clip_224.merged2b", 32),  # + attention inner norm
    "eva": ("eva_giant_patch14_224.clip_ft_in1k", 28),  # no RoPE, GELU MLP
    "vit_rope_registers": ("vit_mediumd_patch16_rope_reg1_gap_256", 32),  # no q/v biases
    # RoPE-ViT: AttentionRope (full qkv bias), axial 'xy' RoPE at temperature 100 ...
    "rope_vit": ("vit_small_patch16_rope_224.naver_in1k", 32),
    # ... and mixed RoPE (learned rope.freqs) with a patches-only absolute position embedding.
    "rope_vit_mixed_ape": ("vit_base_patch16_rope_mixed_ape_224.naver_in1k", 32),
    "eva02_enormous": ("eva02_enormous_patch14_clip_224.laion2b", 28),  # EvaBlockPostNorm
    # DINOv3: its RoPE, 4 registers, fused qkv + q/v biases, GELU MLP (the loader reorders each
    # head's q/k channels for DINOv3's half-split rotation) ...
    "dinov3_qkvb": ("vit_small_patch16_dinov3_qkvb.lvd1689m", 32),
    # ... and no biases, SwiGLU (timm's swiglu_align_to); non-square grids: the dynamic test.
    "dinov3_swiglu": ("vit_huge_plus_patch16_dinov3.lvd1689m", 32),
}



def _timm_model(case, **overrides):
    name, size = CASES[case]
    kwargs = {**SMALL, "img_size": size, **overrides}
    return timm.create_model(name.partition(".")[0], pretrained=False, **kwargs).eval()




@pytest.fixture(scope="module")
def references(tmp_path_factory):
    folder = tmp_path_factory.mktemp("timm_eva")
    found = {}
    for case, (_, size) in CASES.items():
        model = perturb(torch, _timm_model(case), seed=len(case))
        images = random_images(size)
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


def test_other_image_size_resamples_and_rescales_like_timm(references):
    """EVA-02 at 42 px (3 x 3): timm's filter resamples pos_embed; RoPE spans 16 x 16 again."""
    ref = references["eva02"]
    bigger = _timm_model("eva02", img_size=42)
    filter_fn = timm.models.eva.checkpoint_filter_fn
    bigger.load_state_dict(filter_fn(ref["model"].state_dict(), bigger))
    model = from_timm(CASES["eva02"][0], ref["state"], image_size=42, **OURS)
    images = random_images(42, seed=1)
    assert_close(to_numpy(model(images, training=False)), timm_run(torch, bigger, images))


@pytest.mark.parametrize(
    "case", ["eva02", "vit_rope_registers", "rope_vit_mixed_ape", "dinov3_qkvb"]
)
def test_dynamic_image_size_and_features_match_timm(case, references):
    """timm's dynamic_img_size=True at two sizes; its intermediates at a third (non-square)."""
    ref = references[case]
    patch = 14 if "eva02" in case else 16
    reference = _timm_model(case, dynamic_img_size=True)
    reference.load_state_dict(ref["model"].state_dict())
    model = from_timm(CASES[case][0], ref["path"], image_size=CASES[case][1],
                      dynamic_image_size=True, **OURS)  # fmt: skip
    for grid in ((3, 4), (2, 2)):
        images = random_images((grid[0] * patch, grid[1] * patch), seed=2)
        assert_close(to_numpy(model(images, training=False)), timm_run(torch, reference, images),
                      DYNAMIC_RTOL)  # fmt: skip
    images = random_images((3 * patch, 2 * patch), seed=3)
    assert_intermediates_match(torch, model, reference, images, (2, 3, 2, 32))


def test_feature_extractor_matches_forward_intermediates(references, models):
    ref = references["eva02_sub_ln"]
    reference = ref["model"]
    theirs = timm_run(torch,
        reference,
        ref["images"],
        reference.forward_intermediates,
        indices=[0, -1],
        norm=False,
        output_fmt="NCHW",
        intermediates_only=True,
    )
    ours = feature_extractor(models["eva02_sub_ln"], [0, -1])(ref["images"], training=False)
    for a, b in zip(ours, theirs, strict=True):
        assert_close(to_numpy(a), b)


def test_rope_vit_depth_override_and_attention_maps(references, models):
    """A RoPE-ViT of another depth (timm's `depth=1`), and mixed RoPE's per-block tables in
    the attention maps: block l's scores are timm's `attn` softmax with rope[l]."""
    model = from_timm("vit_large_patch16_rope_mixed_224", num_layers=1, hidden_dim=32,
                      num_heads=2, image_size=32)  # fmt: skip
    assert tuple(model.rotary_embedding.frequencies.shape) == (2, 1, 2, 8)
    ref = references["rope_vit_mixed_ape"]
    maps = attention_maps(models["rope_vit_mixed_ape"], ref["images"])
    reference = ref["model"]
    captured = []
    hook = timm.models.eva.AttentionRope.forward

    def forward(self, x, rope=None, **kwargs):
        b, n, _ = x.shape
        q, k, _ = self.qkv(x).reshape(b, n, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        rotate = timm.layers.apply_rot_embed_cat
        q = torch.cat([q[:, :, :1], rotate(q[:, :, 1:], rope)], 2)
        k = torch.cat([k[:, :, :1], rotate(k[:, :, 1:], rope)], 2)
        captured.append((q * self.scale @ k.transpose(-2, -1)).softmax(-1).numpy())
        return hook(self, x, rope=rope, **kwargs)

    timm.models.eva.AttentionRope.forward = forward
    try:
        timm_run(torch, reference, ref["images"])
    finally:
        timm.models.eva.AttentionRope.forward = hook
    assert maps.shape == (2, 2, 2, 5, 5)
    assert_close(maps, np.stack(captured, axis=1))


def test_without_checkpoint_the_architecture_at_random():
    model = from_timm("eva02_large_patch14_224.mim_in22k", num_layers=1)
    assert model.output_shape == (None, 1024)  # a MIM checkpoint: no head
    block = model.blocks[0]
    assert block.mlp == "swiglu" and block.mlp_dim == 2730 and block.mlp_inner_norm
    assert model.rotary_embedding.reference_grid_size == (16, 16)
    narrow = from_timm("eva02_small_patch14_336", hidden_dim=64, num_heads=4, num_layers=1)
    assert narrow.blocks[0].mlp_dim == int(64 * 4 * 2 / 3)  # timm's mlp_ratio, not the table's


def _eva_names():
    names = timm.list_models(module="eva")
    return [name for name in names if _parses(name) and "sapiens2" not in name]


def _parses(name):
    try:
        return N.parse_timm_name(name).extras.get("layout") == "eva"
    except ValueError:
        return False


def test_every_eva_name_we_read_is_timms_architecture():
    """Every eva.py name we parse, against timm's model on the meta device (one block)."""
    checked = []
    for name in _eva_names():
        spec = N.parse_timm_name(name)
        with torch.device("meta"):
            model = timm.create_model(name, depth=1)
        config = T.timm_config(spec, num_layers=1)
        block = model.blocks[0]
        ours, got = name_fields(
            model, config, spec, "hidden_dim", "mlp_dim", "num_classes", "image_size",
            "class_token", "layer_norm_epsilon",
        )  # fmt: skip
        got.update(
            num_register_tokens=model.num_prefix_tokens - int(model.cls_token is not None),
            rotary=model.rope is not None,
            position_embedding=model.pos_embed is not None,
            block_kind="post" if type(block).__name__ == "EvaBlockPostNorm" else "pre",
        )
        ours.update(
            num_register_tokens=config.num_register_tokens,
            rotary=config.rotary_embedding is not None,
            position_embedding=config.position_embedding == "learned",
            block_kind=config.block_kind,
        )
        assert ours == got, f"{name}: ours {ours}, timm's {got}"
        table = T.timm_name_table(config, spec=spec)
        state = set(model.state_dict())
        assert set(table) == state, f"{name}: {sorted(set(table) ^ state)}"
        checked.append(name)
    # timm 1.0.31: 60 of eva.py's 65 names (EVA-02 8, EVA-02 CLIP 4 with the post-norm
    # enormous, EVA 4, rope registers 4, RoPE-ViT 12: axial and mixed, with and without the
    # absolute position embedding; DINOv3 12; Perception Encoder 12:
    # tests/families/pe/test_timm_pe.py;
    # LingBot 4: tests/families/eva/test_timm_evafam.py; Sapiens2's 5 there too, at their own depth:
    # timm's per-block num_kv_heads refuses depth=1)
    assert len(checked) == 60, checked
