"""timm's AIMv2 (`aimv2_*`) through `keras_vit.from_timm` (keras_vit/families/aimv2/).

One tiny perturbed timm model (RMSNorm everywhere, the RMSNorm on the patch embeddings, unpacked
SwiGLU, no q/k/v, projection or MLP biases, average pooling without class token) against timm's
forward pass at its size and another one, with `dynamic_image_size`, and `feature_extractor`
against `forward_intermediates` on a non-square image; every `aimv2_*` name against timm's state
dict on the meta device.
"""

import dataclasses

import pytest

from keras_vit import feature_extractor, from_timm
from tests.helpers import to_numpy
from tests.weights.references import import_timm, import_torch
from tests.weights.timm_cases import (
    DYNAMIC_RTOL,
    assert_close,
    meta_models,
    name_fields,
    perturb,
    random_images,
    timm_reference,
    timm_run,
)

torch = import_torch()  # before timm, whatever the backend
timm = import_timm()

NAME = "aimv2_large_patch14_224.apple_pt"
SMALL = dict(depth=2, embed_dim=32, num_heads=2, num_classes=3, img_size=28)
OURS = dict(num_layers=2, hidden_dim=32, num_heads=2, image_size=28)


def _timm_model(**overrides):
    kwargs = {**SMALL, **overrides}
    return timm.create_model(NAME.partition(".")[0], pretrained=False, **kwargs).eval()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    model = perturb(torch, _timm_model(), seed=3)
    path = tmp_path_factory.mktemp("timm_aimv2") / "aimv2.safetensors"
    return timm_reference(torch, model, random_images(28), path)


@pytest.fixture(scope="module")
def model(reference):
    return from_timm(NAME, reference["path"], **OURS)


def test_matches_timm(reference, model):
    assert model.config.norm == "rmsnorm" and model.config.patch_norm
    assert model.blocks[0].mlp_dim == int(32 * 2.75)  # timm's mlp_ratio
    assert_close(to_numpy(model(reference["images"], training=False)), reference["expected"])


def test_other_image_size_resamples_like_timm(reference):
    """42 px (3 x 3): timm's checkpoint filter resamples pos_embed (bicubic, antialiased)."""
    bigger = _timm_model(img_size=42)
    filter_fn = timm.models.vision_transformer.checkpoint_filter_fn
    bigger.load_state_dict(filter_fn(reference["model"].state_dict(), bigger))
    ours = from_timm(NAME, reference["state"], **{**OURS, "image_size": 42})
    images = random_images(42, seed=1)
    assert_close(to_numpy(ours(images, training=False)), timm_run(torch, bigger, images))


@pytest.mark.slow  # 15-20 s on JAX (one compile per grid), about 1 s elsewhere
def test_dynamic_image_size_and_features_match_timm(reference):
    """timm's dynamic_img_size=True at 3 x 4; its intermediates on a 3 x 2 grid."""
    theirs_model = _timm_model(dynamic_img_size=True)
    theirs_model.load_state_dict(reference["model"].state_dict())
    ours = from_timm(NAME, reference["path"], dynamic_image_size=True, **OURS)
    images = random_images((3 * 14, 4 * 14), seed=2)
    assert_close(to_numpy(ours(images, training=False)),
                 timm_run(torch, theirs_model, images), DYNAMIC_RTOL)  # fmt: skip
    images = random_images((3 * 14, 2 * 14), seed=3)
    features = feature_extractor(ours, [0, 1])(images, training=False)
    theirs = timm_run(torch, theirs_model, images, theirs_model.forward_intermediates,
                      indices=[0, 1], norm=False, output_fmt="NCHW",
                      intermediates_only=True)  # fmt: skip
    assert [tuple(f.shape) for f in features] == [(2, 3, 2, 32)] * 2
    for a, b in zip(features, theirs, strict=True):
        assert_close(to_numpy(a), b, DYNAMIC_RTOL)


def test_export_timm_refuses_rmsnorm_and_patch_norm(model):
    from keras_vit.weights.timm.export import check_timm_expressible

    plain_mlp = dataclasses.replace(model.config, mlp="mlp")
    with pytest.raises(ValueError, match="export_timm cannot write norm='rmsnorm': .*RmsNorm"):
        check_timm_expressible(plain_mlp)
    with pytest.raises(ValueError, match="export_timm cannot write patch_norm=True"):
        check_timm_expressible(dataclasses.replace(plain_mlp, norm="layernorm"))


def test_every_aimv2_name_is_timms_architecture():
    """Every `aimv2_*` name, against timm's model on the meta device (one block)."""
    names = timm.list_models("aimv2_*")
    for name, spec, model, config in meta_models(torch, timm, names):
        block = model.blocks[0]
        ours, got = name_fields(
            model, config, spec, "hidden_dim", "num_heads", "mlp_dim", "num_classes",
            "image_size", "patch_size", "class_token", "layer_norm_epsilon",
        )  # fmt: skip
        got.update(pooling=model.global_pool)
        ours.update(pooling={"gap": "avg"}[config.pooling])
        assert ours == got, f"{name}: ours {ours}, timm's {got}"
        assert type(block.norm1).__name__ == type(model.patch_embed.norm).__name__ == "RmsNorm"
    assert len(names) == 12, names  # timm 1.0.31: 4 sizes x 3 resolutions
