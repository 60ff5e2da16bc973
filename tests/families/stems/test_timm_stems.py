"""timm's ResNet-D and MobileCLIP-stem hybrids through `keras_vit.from_timm`, against timm.

One tiny timm model per stem (timm's own `resnet26d` backbone / `ConvStem` behind its
`VisionTransformer`, as `vision_transformer_hybrid.py` builds them, at width 8-32 and one
block), every parameter perturbed and every BatchNorm's running mean and variance random: the
outputs at the checkpoint's image size, at another, non-square one (position embedding resampled
as timm's checkpoint filter does), `feature_extractor` against
`forward_intermediates`; the weight-name tables of every name on the meta device.
"""

import functools
import logging

import pytest

from keras_vit import feature_extractor, from_timm
from keras_vit.weights.timm import names as N
from keras_vit.weights.timm import reader as T
from keras_vit.weights.timm.stems import batch_norm_counters
from tests.helpers import backend_independent, to_numpy
from tests.weights.references import import_timm, import_torch
from tests.weights.timm_cases import (
    assert_close,
    perturb,
    random_images,
    randomize_batchnorm_statistics,
    timm_reference,
    timm_run,
)

torch = import_torch()  # before timm, whatever the backend
timm = import_timm()

SIZE = 32
# id: (timm name, from_timm overrides). ResNet-D: 2 stages of one unit, width 8 (stride 8:
# a 4x4 grid); conv stem: widths 8, 8 then the 2x2/2 patch embedding (stride 16: 2x2).
OURS = dict(image_size=SIZE, num_layers=1, hidden_dim=32, num_heads=2, num_classes=3)
CASES = {
    "resnet_d": ("vit_small_resnet26d_224", dict(resnet_units=(1, 1), resnet_width=8)),
    "mci": ("vit_base_mci_224.apple_mclip", dict(stem_widths=(8, 8))),
}


def _timm_model(case, size=SIZE, **kwargs):
    """timm's hybrid of `case` at our tiny sizes (eval mode)."""
    from timm.layers import HybridEmbed
    from timm.models.vision_transformer import VisionTransformer

    common = dict(img_size=size, patch_size=1, depth=1, embed_dim=32, num_heads=2, num_classes=3)
    if case == "resnet_d":  # timm's resnet26d as vit_small_resnet26d_224 takes it
        backbone = timm.create_model("resnet26d", features_only=True, out_indices=[2],
                                     layers=(1, 1), channels=(8, 16), stem_width=4)  # fmt: skip
        embed = functools.partial(HybridEmbed, backbone=backbone)
        return VisionTransformer(embed_layer=embed, mlp_ratio=3, **common, **kwargs).eval()
    from timm.models.vision_transformer_hybrid import ConvStem

    backbone = ConvStem(channels=(8, 8, 32), stride=(4, 2, 2), kernel_size=(4, 2, 2), padding=0,
                        act_layer=torch.nn.GELU)  # fmt: skip
    embed = functools.partial(HybridEmbed, backbone=backbone, proj=False)
    return VisionTransformer(embed_layer=embed, no_embed_class=True, **common, **kwargs).eval()


def _perturb(model, seed):
    """Every parameter (`perturb`) and every BatchNorm's running statistics random."""
    perturb(torch, model, seed=seed)
    return randomize_batchnorm_statistics(torch, model, seed)


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    folder = tmp_path_factory.mktemp("timm_stems")
    return {
        case: timm_reference(torch, _perturb(_timm_model(case), len(case)), random_images(SIZE),
                             folder / f"{case}.safetensors")  # fmt: skip
        for case in CASES
    }


@pytest.fixture(scope="module")
def models(references):
    return {case: from_timm(name, references[case]["path"], **OURS, **ours)
            for case, (name, ours) in CASES.items()}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_matches_timm(case, references, models):
    ref = references[case]
    assert_close(to_numpy(models[case](ref["images"], training=False)), ref["expected"])


@pytest.mark.parametrize("case", list(CASES))
def test_other_image_size_and_feature_extractor_match_timm(case, references, models):
    """timm at 64 x 32 px (its checkpoint filter resamples the position embedding to the
    non-square grid) and its `forward_intermediates`, against ours."""
    from timm.models.vision_transformer_hybrid import checkpoint_filter_fn

    ref = references[case]
    size = (2 * SIZE, SIZE)
    bigger = _timm_model(case, size=size)
    bigger.load_state_dict(checkpoint_filter_fn(ref["model"].state_dict(), bigger))
    name, ours = CASES[case]
    model = from_timm(name, ref["state"], **{**OURS, "image_size": size}, **ours)
    images = random_images(size, seed=1)
    assert_close(to_numpy(model(images, training=False)), timm_run(torch, bigger, images))
    reference = ref["model"]
    theirs = timm_run(torch, reference, ref["images"], reference.forward_intermediates,
                      indices=1, norm=False, intermediates_only=True)  # fmt: skip
    got = to_numpy(feature_extractor(models[case], 1)(ref["images"]))
    assert got.shape == theirs[0].shape
    assert_close(got, theirs[0])


def test_batch_norm_counters_are_left_out_with_a_note(references, caplog):
    name, ours = CASES["mci"]
    with caplog.at_level(logging.INFO, logger="keras_vit.weights.timm.reader"):
        from_timm(name, references["mci"]["state"], **OURS, **ours)
    assert "left out patch_embed.backbone.0.bn.num_batches_tracked" in caplog.text
    state = dict(references["mci"]["state"])
    del state["patch_embed.backbone.1.bn.running_var"]
    with pytest.raises(ValueError, match=r"backbone\.1\.bn\.running_var.*not in the checkpoint"):
        from_timm(name, state, **OURS, **ours)


def _stem_names():
    names = []
    for name in timm.list_models("vit_*"):
        try:
            spec = N.parse_timm_name(name)
        except ValueError:
            continue
        if spec.family.name in ("resnet_d", "mci"):
            names.append(name)
    return names


@backend_independent  # our name tables and timm's meta-device models: no Keras call
def test_every_name_is_timms_architecture_and_name_table():
    """Sizes, stem and our weight-name table (with the BatchNorm counters) against timm's."""
    names = _stem_names()
    assert sorted(names) == sorted([
        "vit_base_mci_224", "vit_base_resnet26d_224", "vit_base_resnet50d_224",
        "vit_small_resnet26d_224", "vit_small_resnet50d_s16_224",
    ])  # fmt: skip
    for name in names:
        spec = N.parse_timm_name(name)
        with torch.device("meta"):
            model = timm.create_model(name, depth=1)
        config = T.timm_config(spec, num_layers=1)
        block, backbone = model.blocks[0], model.patch_embed.backbone
        got = dict(hidden=model.embed_dim, heads=block.attn.num_heads,
                   mlp=block.mlp.fc1.out_features, classes=model.num_classes,
                   class_embedding=not model.no_embed_class,
                   grid=model.patch_embed.grid_size)  # fmt: skip
        ours = dict(hidden=config.hidden_dim, heads=config.num_heads, mlp=config.mlp_dim,
                    classes=config.num_classes, class_embedding=config.prefix_position_embedding,
                    grid=config.grid_size)  # fmt: skip
        assert got == ours, name
        if config.stem == "resnet_d":
            stages = [len(getattr(backbone, f"layer{s}")) for s in range(1, 5)
                      if hasattr(backbone, f"layer{s}")]  # fmt: skip
            assert tuple(stages) == config.resnet_units, name
        else:
            widths = tuple(backbone[i].conv.out_channels for i in range(len(backbone) - 1))
            assert widths == config.stem_widths, name
        table = T.timm_name_table(config, spec=spec)
        state = set(model.state_dict())
        counters = set(batch_norm_counters(config))
        assert counters <= state and not counters & set(table)
        assert set(table) | counters == state, f"{name}: {sorted((set(table) | counters) ^ state)}"


@backend_independent  # config checks only
def test_exports_refuse_the_batch_norm_stems():
    from keras_vit.weights.huggingface.export import check_huggingface_expressible
    from keras_vit.weights.timm.export import check_timm_expressible

    for name, ours in CASES.values():
        config = T.timm_config(name, **OURS, **ours)
        with pytest.raises(ValueError, match="stem="):
            check_timm_expressible(config)
        with pytest.raises(ValueError, match="stem"):
            check_huggingface_expressible(config)
