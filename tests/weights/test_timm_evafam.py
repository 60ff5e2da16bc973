"""BEiT-3, LingBot and Sapiens2 through `keras_vit.from_timm`.

BEiT-3 (`beit3_*`: timm's `VisionTransformer` with `scale_attn_norm` / `scale_mlp_norm`), LingBot
(`vit_*_lingbot`: DINOv3-style `Eva` with a class-token head) and Sapiens2 (`vit_*_sapiens2`:
grouped-query attention, RMSNorm, attention-only LayerScale). One tiny perturbed timm model per
code path against timm's forward pass, another image size and `dynamic_image_size` against
timm's `dynamic_img_size`, `feature_extractor` against `forward_intermediates`, and every name
of the families against timm's state dict on the meta device.
"""

import pytest

from keras_vit import feature_extractor, from_timm
from keras_vit.weights import timm_names as N
from tests.helpers import to_numpy
from tests.weights.references import import_timm, import_torch
from tests.weights.timm_cases import (
    assert_close,
    meta_models,
    random_images,
    timm_run,
    tiny_references,
    tiny_timm_model,
)

torch = import_torch()  # before timm, whatever the backend
timm = import_timm()

DYNAMIC_RTOL = 1e-4  # the position embedding resampled at every call
SMALL = dict(depth=2, embed_dim=32, num_heads=2, num_classes=3)
OURS = dict(num_layers=2, hidden_dim=32, num_heads=2)

# id: (timm name, image size: a 2 x 2 grid of its patches).
CASES = {
    "beit3": ("beit3_base_patch16_224.in22k_ft_in1k", 32),  # attention + MLP inner norms
    # DINOv3's RoPE and blocks with q/v biases, registers, the class token after the final norm.
    "lingbot": ("vit_small_patch16_lingbot.robbyant", 32),
}


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    return tiny_references(torch, timm, CASES, SMALL, tmp_path_factory.mktemp("timm_evafam"))


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


@pytest.mark.parametrize("case", ["beit3", "lingbot"])
def test_dynamic_image_size_and_features_match_timm(case, references):
    """timm's dynamic_img_size=True and its intermediates at another, non-square size (one
    grid: JAX compiles once per grid)."""
    ref = references[case]
    name, size = CASES[case]
    reference = tiny_timm_model(timm, name, size, SMALL, dynamic_img_size=True)
    reference.load_state_dict(ref["model"].state_dict())
    model = from_timm(name, ref["path"], image_size=size, dynamic_image_size=True, **OURS)
    images = random_images((3 * 16, 2 * 16), seed=2)
    expected = timm_run(torch, reference, images)
    assert_close(to_numpy(model(images, training=False)), expected, DYNAMIC_RTOL)
    ours = feature_extractor(model, [0, 1])(images, training=False)
    theirs = timm_run(torch, reference, images, reference.forward_intermediates, indices=[0, 1],
                      norm=False, output_fmt="NCHW", intermediates_only=True)  # fmt: skip
    assert [tuple(o.shape) for o in ours] == [(2, 3, 2, 32)] * 2
    for a, b in zip(ours, theirs, strict=True):
        assert_close(to_numpy(a), b, DYNAMIC_RTOL)


def test_other_image_size_resamples_like_timm(references):
    """BEiT-3 at 48 px (3 x 3): the position embedding resampled as timm's filter does."""
    ref = references["beit3"]
    name = CASES["beit3"][0]
    bigger = tiny_timm_model(timm, name, 48, SMALL)
    filter_fn = timm.models.vision_transformer.checkpoint_filter_fn
    bigger.load_state_dict(filter_fn(ref["model"].state_dict(), bigger))
    model = from_timm(name, ref["state"], image_size=48, **OURS)
    images = random_images(48, seed=1)
    assert_close(to_numpy(model(images, training=False)), timm_run(torch, bigger, images))


def _names(family):
    return [name for name in timm.list_models() if _family(name) == family]


def _family(name):
    try:
        return N.parse_timm_name(name).family.name
    except ValueError:
        return None


def _rotary(model):
    """timm's Eva rotary settings (the loader reorders q/k channels for rotate-half)."""
    rope = getattr(model, "rope", None)
    if rope is None:
        return None
    attention = model.blocks[0].attn
    assert attention.rotate_half and not rope.aug_active
    return dict(
        kind={"RotaryEmbeddingDinoV3": "dinov3"}[type(rope).__name__],
        temperature=rope.temperature,
        qkv_bias=getattr(attention, "q_bias", None) is not None
        or getattr(getattr(attention, "q_proj", None), "bias", None) is not None,
        registers=model.num_prefix_tokens - 1,
        swiglu=type(model.blocks[0].mlp).__name__ == "SwiGLU",
    )


def _our_rotary(config, spec):
    if config.rotary_embedding is None:
        return None
    return dict(
        kind=config.rotary_embedding,
        temperature=config.rotary_temperature,
        qkv_bias=spec.qkv_bias,
        registers=config.num_register_tokens,
        swiglu=config.mlp == "swiglu",
    )


@pytest.mark.parametrize("family, count", [("beit3", 4), ("lingbot", 4)])
def test_every_name_is_timms_architecture(family, count):
    """Widths, norms and pooling against timm's model (meta device, one block); the name
    tables equal its state-dict keys (checked by `meta_models`)."""
    names = _names(family)
    for name, spec, model, config in meta_models(torch, timm, names):
        block = model.blocks[0]
        got = dict(
            hidden_dim=model.embed_dim,
            mlp_dim=block.mlp.fc2.in_features,
            heads=block.attn.num_heads,
            num_classes=model.num_classes,
            image_size=tuple(model.patch_embed.img_size),
            epsilon=block.norm1.eps,
            pooling=model.global_pool,
            rotary=_rotary(model),
        )
        ours = dict(
            hidden_dim=config.hidden_dim,
            mlp_dim=config.mlp_dim,
            heads=config.num_heads,
            num_classes=spec.num_classes,
            image_size=config.image_size,
            epsilon=config.layer_norm_epsilon,
            pooling={"gap": "avg", "token": "token"}[config.pooling],
            rotary=_our_rotary(config, spec),
        )
        assert ours == got, f"{name}: ours {ours}, timm's {got}"
    assert len(names) == count, names
