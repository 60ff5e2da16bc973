"""timm's VLM vision towers (`qwen3_vit_*`, `deepseek_vit_*`) through `keras_vit.from_timm`.

Six tiny perturbed timm models (depth 1, width 32, 2 heads, patch 8), one per code path: Qwen3's
classifier, `_merge` classifier and `_enc` tower (a 4 x 4 position table resized bilinearly with
`align_corners=True` to 6 x 4 and 4 x 8 grids, rotate-half RoPE, the 2 x 2 merger), DeepSeek's
classifier, `_align` classifier and `_enc` tower (RMSNorm, bias-free SwiGLU, a 5 x 3 grid the
3 x 3 aligner pads to 6 x 3, and a 7 x 5 one), against timm at two non-square image sizes;
`feature_extractor` against `forward_intermediates`; a `.keras` round trip; every name (and
every tag's projector width) against timm's model on the meta device.
"""

import keras
import numpy as np
import pytest

from keras_vit import feature_extractor, from_timm
from keras_vit.weights.timm import names as N
from keras_vit.weights.timm import reader as T
from tests.helpers import to_numpy
from tests.weights.references import import_timm, import_torch
from tests.weights.timm_cases import (
    assert_close,
    meta_models,
    random_images,
    timm_run,
    tiny_references,
)

torch = import_torch()  # before timm, whatever the backend
timm = import_timm()

SMALL = dict(depth=1, embed_dim=32, num_heads=2, patch_size=8)
OURS = dict(num_layers=1, hidden_dim=32, num_heads=2, patch_size=8)
_QWEN = dict(pos_embed_grid_size=4)  # a 4 x 4 table (32 px at patch 8)
# id: (timm name, timm.create_model overrides, first image size, second image size).
CASES = {
    "qwen3": ("qwen3_vit_88m", dict(_QWEN, num_classes=3), (48, 32), (32, 64)),
    "qwen3_merge": ("qwen3_vit_88m_merge", dict(_QWEN, num_classes=3, out_features=24),
                    (48, 32), (32, 64)),
    "qwen3_enc": ("qwen3_vit_88m_enc", dict(_QWEN, out_features=24), (48, 32), (32, 64)),
    "deepseek": ("deepseek_vit_412m", dict(num_classes=3), (40, 24), (56, 40)),
    "deepseek_align": ("deepseek_vit_412m_align", dict(num_classes=3, out_features=24),
                       (40, 24), (56, 40)),
    "deepseek_enc": ("deepseek_vit_412m_enc", dict(out_features=24), (40, 24), (56, 40)),
}  # fmt: skip


def _ours(case):
    """`from_timm` overrides of a case: the tiny sizes, the table's grid, the projector width."""
    _, overrides, size, _ = CASES[case]
    ours = dict(OURS, image_size=32 if case.startswith("qwen3") else size)
    if "out_features" in overrides:
        ours["merger_dim"] = overrides["out_features"]
    return ours


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    cases = {case: (name, size) for case, (name, _, size, _) in CASES.items()}
    overrides = {case: overrides for case, (_, overrides, _, _) in CASES.items()}
    folder = tmp_path_factory.mktemp("timm_vlm")
    return tiny_references(torch, timm, cases, SMALL, folder, overrides=overrides)


@pytest.fixture(scope="module")
def models(references):
    return {case: from_timm(CASES[case][0], ref["path"], **_ours(case))
            for case, ref in references.items()}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_matches_timm_at_two_image_sizes(case, references, models):
    ref, model = references[case], models[case]
    assert model.config.dynamic_image_size and (model.merger is None) == (
        case in ("qwen3", "deepseek")
    )
    assert_close(to_numpy(model.predict_on_batch(ref["images"])), ref["expected"])
    images = random_images(CASES[case][3], seed=3)
    expected = timm_run(torch, ref["model"], images)
    assert_close(to_numpy(model.predict_on_batch(images)), expected)


@pytest.mark.parametrize("case", ["qwen3_merge", "deepseek_align"])
def test_feature_extractor_matches_forward_intermediates(case, references, models):
    ref = references[case]
    feature = feature_extractor(models[case], [0]).predict_on_batch(ref["images"])  # one block
    theirs = timm_run(torch, ref["model"], ref["images"], ref["model"].forward_intermediates,
                      indices=[0], norm=False, output_fmt="NCHW",
                      intermediates_only=True)  # fmt: skip
    rows, columns = (size // 8 for size in CASES[case][2])
    assert tuple(feature.shape) == (2, rows, columns, 32)
    assert_close(to_numpy(feature), theirs[0])


def test_keras_round_trip(references, models, tmp_path):
    model, images = models["deepseek_align"], references["deepseek_align"]["images"]
    path = str(tmp_path / "deepseek_align.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.merger.get_config() == model.merger.get_config()
    np.testing.assert_allclose(
        to_numpy(loaded.predict_on_batch(images)), to_numpy(model.predict_on_batch(images)),
        atol=1e-6,
    )  # fmt: skip


def test_odd_grid_and_unknown_tag_are_clear_errors(models):
    tokens = np.zeros((2, 5 * 4, 32), "float32")
    with pytest.raises(ValueError, match=r"divisible by merge_size=2 .*grid of 5 x 4 patches"):
        models["qwen3_enc"].merger(tokens, random_images((40, 32)))
    with pytest.raises(ValueError, match=r"no projector width for the tag 'mine'.*qwen3_5_2b"):
        T.timm_config("qwen3_vit_306m_merge.mine")
    assert T.timm_config("qwen3_vit_306m_merge.mine", merger_dim=7).merger_dim == 7


def test_every_name_and_tag_is_timms_architecture():
    """Every `qwen3_vit_*` / `deepseek_vit_*` name against timm's model on the meta device (one
    block): its weight names (`meta_models`), sizes, head and projector; then every tag's
    projector width."""
    names = timm.list_models("qwen3_vit_*") + timm.list_models("deepseek_vit_*")
    checked = []
    for name, spec, model, config in meta_models(torch, timm, names):
        encoder = getattr(model, "encoder", model)
        merger = getattr(encoder, "merger", None) or getattr(encoder, "aligner", None)
        got = dict(
            hidden_dim=encoder.embed_dim,
            mlp_dim=encoder.blocks[0].mlp.fc2.in_features,
            num_classes=model.num_classes,
            merger_dim=merger.out_features if merger else None,
            pooled=getattr(model, "global_pool", "") == "avg",
        )
        ours = dict(
            hidden_dim=config.hidden_dim,
            mlp_dim=config.mlp_dim,
            num_classes=spec.num_classes,
            merger_dim=config.merger_dim,
            pooled=config.pooling == "gap",
        )
        assert ours == got, f"{name}: ours {ours}, timm's {got}"
        checked.append(name)
    assert len(checked) == 12, checked  # timm 1.0.31: Qwen3 3 sizes x 3, DeepSeek 3
    tagged = [n for n in timm.list_models(names, pretrained=True) if "_vit_" in n]
    for name in tagged:
        with torch.device("meta"):
            model = timm.create_model(name, depth=1)
        merger = getattr(model, "encoder", model)
        merger = getattr(merger, "merger", None) or getattr(merger, "aligner", None)
        config = T.timm_config(N.parse_timm_name(name), num_layers=1)
        assert config.merger_dim == (merger.out_features if merger else None), name
    assert len(tagged) == 45, tagged  # 13 Qwen3 tags and 2 DeepSeek tags, 3 names each


def test_export_timm_refuses_the_projector():
    import dataclasses

    from keras_vit.weights.timm.export import check_timm_expressible

    config = T.timm_config("qwen3_vit_88m_merge", num_layers=1)
    plain = dataclasses.replace(config, rotary_embedding=None, final_norm=True)
    with pytest.raises(ValueError, match="export_timm cannot write merger_size=2"):
        check_timm_expressible(plain)
