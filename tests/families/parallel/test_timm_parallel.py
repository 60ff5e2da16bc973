"""timm's ParallelScalingBlock and differential-attention ViTs through `keras_vit.from_timm`.

Tiny perturbed timm models, one per code path (`vit_base_patch16_xp_224`: ParallelScalingBlock
with RmsNorm, QK-norm, pre-norm and timm's `mlp_bias`; `vit_pwee_*`: with `in_proj.bias`,
registers and LayerScale; `vit_dwee_*`: timm's Block with DiffAttention; `vit_dpwee_*`:
DiffParallelScalingBlock) against timm's forward pass, `dynamic_image_size` and
`feature_extractor` against `forward_intermediates`, a `.keras` round trip, and every name of the
families against timm's state dict on the meta device.
"""

import pytest

from keras_vit import feature_extractor, from_timm
from keras_vit.layers import ParallelScalingBlock
from tests.helpers import roundtrip_model, to_numpy
from tests.weights.references import import_timm, import_torch
from tests.weights.timm_cases import (
    TINY_OURS,
    TINY_TIMM,
    assert_close,
    meta_models,
    name_fields,
    random_images,
    timm_run,
    tiny_references,
    tiny_timm_model,
)

torch = import_torch()  # before timm, whatever the backend
timm = import_timm()

CASES = {  # id: (timm name, image size)
    "xp": ("vit_base_patch16_xp_224", 32),
    "pwee": ("vit_pwee_patch16_reg1_gap_256.sbb_in1k", 32),
    "dwee": ("vit_dwee_patch16_reg1_gap_256.sbb_in1k", 32),
    "dpwee": ("vit_dpwee_patch16_reg1_gap_256.sbb_in1k", 32),
}
NAMES = ("vit_*_xp_*", "vit_pwee_*", "vit_dwee_*", "vit_dlittle_*", "vit_dpwee_*")


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    return tiny_references(torch, timm, CASES, TINY_TIMM, tmp_path_factory.mktemp("timm_parallel"))


@pytest.mark.parametrize("case", list(CASES))
def test_matches_timm(case, references):
    ref = references[case]
    model = from_timm(CASES[case][0], ref["path"], image_size=32, **TINY_OURS)
    parallel = isinstance(model.blocks[0], ParallelScalingBlock)
    assert parallel == (case in ("xp", "pwee", "dpwee"))
    assert_close(to_numpy(model(ref["images"], training=False)), ref["expected"])


@pytest.mark.slow  # about 15 s on JAX on a loaded CPU (one compile per grid), 2 s elsewhere
def test_dynamic_image_size_features_and_saving_match_timm(references, tmp_path):
    """DiffParallelScalingBlock: timm's dynamic_img_size=True on a 2 x 3 grid, its
    intermediates, and our `.keras` round trip."""
    name, _ = CASES["dpwee"]
    ref = references["dpwee"]
    theirs_model = tiny_timm_model(timm, name, 32, TINY_TIMM, dynamic_img_size=True)
    theirs_model.load_state_dict(ref["model"].state_dict())
    ours = from_timm(name, ref["path"], image_size=32, dynamic_image_size=True, **TINY_OURS)
    images = random_images((32, 48), seed=2)
    assert_close(to_numpy(ours(images, training=False)), timm_run(torch, theirs_model, images))
    features = feature_extractor(ours, [0, 1])(images, training=False)
    theirs = timm_run(torch, theirs_model, images, theirs_model.forward_intermediates,
                      indices=[0, 1], norm=False, output_fmt="NCHW",
                      intermediates_only=True)  # fmt: skip
    assert [tuple(f.shape) for f in features] == [(2, 2, 3, 32)] * 2
    for a, b in zip(features, theirs, strict=True):
        assert_close(to_numpy(a), b)
    roundtrip_model(ours, images, tmp_path)


def test_export_timm_refuses_parallel_scaling_blocks():
    from keras_vit.weights.timm.export import check_timm_expressible
    from keras_vit.weights.timm.reader import timm_config

    for name in ("vit_base_patch16_xp_224", "vit_dwee_patch16_reg1_gap_256"):
        refused = "export_timm cannot write (block_kind|attention_type)"
        with pytest.raises(ValueError, match=refused):
            check_timm_expressible(timm_config(name, num_layers=1))


def test_every_parallel_name_is_timms_architecture():
    """Every name of the families, against timm's model on the meta device (one block)."""
    names = sorted({n for pattern in NAMES for n in timm.list_models(pattern)})
    checked = []
    for name, spec, model, config in meta_models(torch, timm, names):
        block = model.blocks[0]
        kind = type(block).__name__
        attention = getattr(block, "attn", block)
        ours, got = name_fields(model, config, spec, "hidden_dim", "num_classes", "class_token")
        got.update(
            mlp_dim=(block.mlp.fc2.in_features if kind == "Block"
                     else block.in_split[0]),  # fmt: skip
            num_heads=attention.num_heads,
            num_register_tokens=model.num_reg_tokens,
            prefix_position_embedding=not model.no_embed_class,
            layer_scale=not isinstance(getattr(block, "ls", getattr(block, "ls1", None)),
                                       torch.nn.Identity),  # fmt: skip
            qk_norm=not isinstance(attention.q_norm, torch.nn.Identity),
            pre_norm=not isinstance(model.norm_pre, torch.nn.Identity),
            fc_norm=not isinstance(model.fc_norm, torch.nn.Identity),
            norm=type(model.norm if kind != "Block" else block.norm1).__name__,
            block=kind,
            attention=type(attention).__name__,
        )
        differential = config.attention_type == "differential"
        ours.update(
            mlp_dim=config.mlp_dim,
            num_heads=config.num_heads,
            num_register_tokens=config.num_register_tokens,
            prefix_position_embedding=config.prefix_position_embedding,
            layer_scale=config.layer_scale_init_value is not None,
            qk_norm=config.qk_norm,
            pre_norm=config.pre_norm,
            fc_norm=config.fc_norm,
            norm={"rmsnorm": "RmsNorm", "layernorm": "LayerNorm"}[config.norm],
            block={("parallel_scaling", True): "DiffParallelScalingBlock",
                   ("parallel_scaling", False): "ParallelScalingBlock"}.get(
                (config.block_kind, differential), "Block"),  # fmt: skip
            attention={"Block": "DiffAttention" if differential else "Attention"}.get(
                kind, kind
            ),
        )
        if kind != "Block" and ours["norm"] == "LayerNorm" and got["norm"] == "Identity":
            got["norm"] = type(model.fc_norm).__name__  # fc_norm models: no final norm
        assert ours == got, f"{name}: ours {ours}, timm's {got}"
        checked.append(name)
    assert len(checked) == 7, checked  # timm 1.0.31: xp 3, pwee, dwee, dlittle, dpwee
