"""BEiT-3, LingBot and Sapiens2 through `keras_vit.from_timm`.

BEiT-3 (`beit3_*`: timm's `VisionTransformer` with `scale_attn_norm` / `scale_mlp_norm`), LingBot
(`vit_*_lingbot`: DINOv3-style `Eva` with a class-token head) and Sapiens2 (`vit_*_sapiens2`:
grouped-query attention, RMSNorm, attention-only LayerScale). One tiny perturbed timm model per
code path against timm's forward pass, another image size and `dynamic_image_size` against
timm's `dynamic_img_size`, `feature_extractor` against `forward_intermediates`, and every name
of the families against timm's state dict on the meta device.
"""

import pytest

import keras_vit
from keras_vit import export_timm, from_timm
from keras_vit.weights.timm import names as N
from keras_vit.weights.timm import reader as T
from tests.helpers import roundtrip_model, to_numpy
from tests.weights.references import import_timm, import_torch
from tests.weights.timm_cases import (
    DYNAMIC_RTOL,
    TINY_OURS,
    TINY_TIMM,
    assert_close,
    assert_intermediates_match,
    meta_models,
    name_fields,
    perturb,
    random_images,
    timm_reference,
    timm_run,
    tiny_references,
    tiny_timm_model,
)

torch = import_torch()  # before timm, whatever the backend
timm = import_timm()


# id: (timm name, image size: a 2 x 2 grid of its patches).
CASES = {
    "beit3": ("beit3_base_patch16_224.in22k_ft_in1k", 32),  # attention + MLP inner norms
    # DINOv3's RoPE and blocks with q/v biases, registers, the class token after the final norm.
    "lingbot": ("vit_small_patch16_lingbot.robbyant", 32),
}
# Sapiens2 with grouped-query attention in block 0 (1 key / value head for 2 query heads):
# timm's num_kv_heads, our num_key_value_heads (the names' rule gives none at depth 2).
SAPIENS2 = ("vit_base_patch16_sapiens2.fb", 32)
SAPIENS2_TIMM = dict(num_kv_heads=(1, 2))
SAPIENS2_OURS = dict(num_key_value_heads=(1, None))


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    folder = tmp_path_factory.mktemp("timm_evafam")
    found = tiny_references(torch, timm, CASES, TINY_TIMM, folder)
    name, size = SAPIENS2
    model = perturb(torch, tiny_timm_model(timm, name, size, TINY_TIMM, **SAPIENS2_TIMM), seed=8)
    found["sapiens2"] = timm_reference(
        torch, model, random_images(size), folder / "sapiens2.safetensors"
    )
    return found


def _ours(case, path, **kwargs):
    name, size = SAPIENS2 if case == "sapiens2" else CASES[case]
    extra = SAPIENS2_OURS if case == "sapiens2" else {}
    return from_timm(name, path, image_size=size, **TINY_OURS, **extra, **kwargs)


@pytest.fixture(scope="module")
def models(references):
    return {case: _ours(case, ref["path"]) for case, ref in references.items()}


@pytest.mark.parametrize("case", [*CASES, "sapiens2"])
def test_matches_timm(case, references, models):
    ref = references[case]
    assert_close(to_numpy(models[case](ref["images"], training=False)), ref["expected"])


@pytest.mark.parametrize("case", ["beit3", "lingbot", "sapiens2"])
def test_dynamic_image_size_and_features_match_timm(case, references):
    """timm's dynamic_img_size=True and its intermediates at another, non-square size (one
    grid: JAX compiles once per grid)."""
    ref = references[case]
    name, size = SAPIENS2 if case == "sapiens2" else CASES[case]
    extra = SAPIENS2_TIMM if case == "sapiens2" else {}
    reference = tiny_timm_model(timm, name, size, TINY_TIMM, dynamic_img_size=True, **extra)
    reference.load_state_dict(ref["model"].state_dict())
    model = _ours(case, ref["path"], dynamic_image_size=True)
    images = random_images((3 * 16, 2 * 16), seed=2)
    expected = timm_run(torch, reference, images)
    assert_close(to_numpy(model(images, training=False)), expected, DYNAMIC_RTOL)
    assert_intermediates_match(torch, model, reference, images, (2, 3, 2, 32))


def test_other_image_size_resamples_like_timm(references):
    """BEiT-3 at 48 px (3 x 3): the position embedding resampled as timm's filter does."""
    ref = references["beit3"]
    name = CASES["beit3"][0]
    bigger = tiny_timm_model(timm, name, 48, TINY_TIMM)
    filter_fn = timm.models.vision_transformer.checkpoint_filter_fn
    bigger.load_state_dict(filter_fn(ref["model"].state_dict(), bigger))
    model = from_timm(name, ref["state"], image_size=48, **TINY_OURS)
    images = random_images(48, seed=1)
    assert_close(to_numpy(model(images, training=False)), timm_run(torch, bigger, images))


def test_grouped_query_model_keras_round_trip(references, models, tmp_path):
    """The Sapiens2 model (grouped-query block 0, attention-only LayerScale) saves and loads
    with identical outputs; its blocks hold what timm's do."""
    model = models["sapiens2"]
    first, second = model.blocks
    assert tuple(first.attention.key_dense.kernel.shape) == (32, 1, 16)
    assert tuple(second.attention.key_dense.kernel.shape) == (32, 2, 16)
    assert not hasattr(first, "mlp_scale") and first.attention_only_layer_scale
    roundtrip_model(model, references["sapiens2"]["images"], tmp_path)
    grouped = keras_vit.ViT("mu/8", image_size=16, num_classes=3, num_key_value_heads=1)
    with pytest.raises(ValueError, match="export_timm cannot write num_key_value_heads=1"):
        export_timm(grouped, str(tmp_path / "unused.safetensors"))


def test_sapiens2_depth_rule_and_overrides():
    """timm's _sapiens2_args rule: multi-head attention in the first and last 8 blocks."""
    config = T.timm_config("vit_large_patch16_sapiens2")
    assert config.num_key_value_heads == (None,) * 8 + (8,) * 8 + (None,) * 8
    assert (config.image_size, config.norm, config.include_top) == ((1024, 768), "rmsnorm", False)
    assert T.timm_config("vit_large_patch16_sapiens2", num_layers=16).num_key_value_heads is None
    with pytest.raises(ValueError, match="num_key_value_heads needs one entry per block"):
        T.timm_config("vit_large_patch16_sapiens2", num_key_value_heads=(8, 8))


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
    assert attention.rotate_half  # the loader reorders each head's q / k channels
    return dict(
        kind={"RotaryEmbeddingDinoV3": "dinov3"}[type(rope).__name__],
        # Sapiens2's coordinate rescaling: training only (timm: `self.training and aug_active`).
        rescale=rope.rescale_coords,
        temperature=rope.temperature,
        qkv_bias=getattr(attention, "q_bias", None) is not None
        or getattr(getattr(attention, "q_proj", None), "bias", None) is not None,
        registers=model.num_prefix_tokens - 1,
        swiglu=type(model.blocks[0].mlp).__name__ in ("SwiGLU", "GluMlp"),
    )


def _our_rotary(config, spec):
    if config.rotary_embedding is None:
        return None
    return dict(
        kind=config.rotary_embedding,
        rescale=2.0 if spec.family.name == "sapiens2" else None,  # off at eval: not ours
        temperature=config.rotary_temperature,
        qkv_bias=spec.qkv_bias,
        registers=config.num_register_tokens,
        swiglu=config.mlp == "swiglu",
    )


def _sapiens2_meta(names):
    """Sapiens2 on the meta device at its own depth (timm's per-block num_kv_heads fix it)."""
    for name in names:
        spec = N.parse_timm_name(name)
        with torch.device("meta"):
            model = timm.create_model(name)
        config = T.timm_config(spec)
        table, state = set(T.timm_name_table(config, spec=spec)), set(model.state_dict())
        assert table == state, f"{name}: {sorted(table ^ state)}"
        heads = [b.attn.num_kv_heads for b in model.blocks]
        ours = config.num_key_value_heads or (None,) * config.num_layers
        assert [h or config.num_heads for h in ours] == heads, name
        yield name, spec, model, config


@pytest.mark.parametrize("family, count", [("beit3", 4), ("lingbot", 4), ("sapiens2", 5)])
def test_every_name_is_timms_architecture(family, count):
    """Widths, norms and pooling against timm's model (meta device, one block; Sapiens2 at its
    own depth); the name tables equal its state-dict keys (`meta_models`, `_sapiens2_meta`)."""
    names = _names(family)
    found = _sapiens2_meta(names) if family == "sapiens2" else meta_models(torch, timm, names)
    for name, spec, model, config in found:
        ours, got = name_fields(
            model, config, spec, "hidden_dim", "mlp_dim", "num_heads", "num_classes",
            "image_size", "layer_norm_epsilon",
        )  # fmt: skip
        got.update(pooling=model.global_pool, rotary=_rotary(model))
        ours.update(
            pooling={"gap": "avg", "token": "token"}[config.pooling],
            rotary=_our_rotary(config, spec),
        )
        assert ours == got, f"{name}: ours {ours}, timm's {got}"
    assert len(names) == count, names
