"""timm's Gemma 4 vision towers (`gemma4_vit_*`) through `keras_vit.from_timm`.

Tiny perturbed timm models (`Gemma4VitEncoder` with the soft pooler and clamped projections on
a non-square grid; with grouped key / value heads and the output standardisation; with the
token mean; `Gemma4VitClassifier` with its scale-less norm and a head) against timm's forward
pass within 1e-5; the strict loader's refusal; a `.keras` round trip; argument errors; every
`gemma4_vit_*` name parses to the family; the exporters refuse the tower before writing.
"""

import os

import numpy as np
import pytest

import keras_vit
from keras_vit.families.gemma4.config import Gemma4Config
from keras_vit.families.gemma4.model import Gemma4VisionTower
from keras_vit.families.gemma4.timm import from_timm_gemma4
from keras_vit.weights.timm import names as N
from keras_vit.weights.timm import reader as T
from tests.helpers import roundtrip_model, to_numpy
from tests.weights.references import import_timm, import_torch
from tests.weights.timm_cases import assert_close

torch = import_torch()  # before timm, whatever the backend
timm = import_timm()
from timm.models import gemma4_vit as G  # noqa: E402

SIZE = (24, 36)  # 6 x 9 patches of 4: 2 x 3 soft-pooler cells of 3 x 3
TIMM = dict(
    patch_size=4,
    embed_dim=32,
    depth=2,
    num_heads=2,
    head_dim=16,
    intermediate_size=64,
    position_embedding_size=12,
    pooling_kernel_size=3,
)
OURS = dict(
    patch_size=4,
    hidden_dim=32,
    num_layers=2,
    num_heads=2,
    head_dim=16,
    mlp_dim=64,
    position_table_size=12,
    pooling_kernel_size=3,
)
# id: (timm name, timm class, its arguments, our overrides)
CASES = {
    "encoder_clipped": (
        "gemma4_vit_167m_enc",
        G.Gemma4VitEncoder,
        dict(global_pool="soft", use_clipped_linears=True),
        {},
    ),
    "encoder_standardized_gqa": (
        "gemma4_vit_570m_enc",
        G.Gemma4VitEncoder,
        dict(global_pool="soft", standardize=True, num_kv_heads=1),
        dict(num_key_value_heads=1),
    ),
    "encoder_avg": (
        "gemma4_vit_570m_enc",
        G.Gemma4VitEncoder,
        dict(global_pool="avg"),
        dict(pooling="avg", standardize=False),
    ),
    "classifier_clipped": (
        "gemma4_vit_167m",
        G.Gemma4VitClassifier,
        dict(num_classes=5, use_clipped_linears=True),
        {},
    ),
}


def _timm_model(case, seed=0):
    _, cls, arguments, _ = CASES[case]
    torch.manual_seed(seed)
    model = cls(img_size=SIZE, **TIMM, **arguments).eval()
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            noise = torch.randn(tensor.shape, generator=generator, dtype=tensor.dtype)
            if name.endswith(("_min", "_max")):  # clamp bounds that bite
                sign = -1.0 if name.endswith("_min") else 1.0
                tensor.copy_(sign * (0.6 + 0.2 * noise.abs()))
            elif name.endswith(
                (
                    "norm1.weight",
                    "norm2.weight",
                    "norm3.weight",
                    "norm4.weight",
                    "q_norm.weight",
                    "k_norm.weight",
                    "std_scale",
                )
            ):
                tensor.copy_(1.0 + 0.2 * noise)
            else:
                tensor.add_(0.2 * noise)
    return model


def _images(seed=0):
    return np.random.default_rng(seed).uniform(0, 1, (2, *SIZE, 3)).astype("float32")


def _reference(case):
    model = _timm_model(case)
    images = _images()
    with torch.no_grad():
        expected = model(torch.from_numpy(images).permute(0, 3, 1, 2)).numpy()
    state = {k: v.numpy() for k, v in model.state_dict().items()}
    return state, images, expected


def _ours(case, state):
    name, _, _, overrides = CASES[case]
    return keras_vit.from_timm(name, checkpoint=state, image_size=SIZE, **OURS, **overrides)


@pytest.mark.parametrize("case", sorted(CASES))
def test_outputs_equal_timm(case):
    state, images, expected = _reference(case)
    model = _ours(case, state)
    assert isinstance(model, Gemma4VisionTower)
    actual = to_numpy(model(images))
    assert actual.shape == expected.shape
    assert_close(actual, expected)


def test_clamps_bite_and_the_loader_assigns_them():
    state, images, expected = _reference("encoder_clipped")
    model = _ours("encoder_clipped", state)
    query = model.blocks[0].attention.query
    assert float(to_numpy(query.output_max)) == pytest.approx(
        state["blocks.0.attn.q_proj.output_max"]
    )
    unclamped = {
        k: (
            np.full_like(v, np.inf if k.endswith("_max") else -np.inf)
            if k.endswith(("_min", "_max"))
            else v
        )
        for k, v in state.items()
    }
    other = to_numpy(_ours("encoder_clipped", unclamped)(images))
    assert np.abs(other - expected).max() > 1e-3  # the bounds matter in this case


def test_strict_loader_refuses_a_checkpoint_that_does_not_fit():
    state, _, _ = _reference("encoder_clipped")
    broken = dict(state)
    del broken["blocks.1.mlp.up_proj.linear.weight"]
    broken["blocks.0.extra"] = np.zeros(3, "float32")
    with pytest.raises(ValueError, match=r"nothing was assigned.*up_proj.*blocks\.0\.extra"):
        _ours("encoder_clipped", broken)
    with pytest.raises(ValueError, match="misshapen"):
        keras_vit.from_timm(
            "gemma4_vit_167m_enc", checkpoint=state, image_size=SIZE, **{**OURS, "mlp_dim": 48}
        )


def test_keras_round_trip(tmp_path):
    state, images, _ = _reference("classifier_clipped")
    model = _ours("classifier_clipped", state)
    loaded = roundtrip_model(model, images, tmp_path)
    assert isinstance(loaded, Gemma4VisionTower) and loaded.config == model.config


def test_config_refuses_bad_values():
    tiny = dict(image_size=24, **OURS)
    with pytest.raises(ValueError, match="head_dim must be a multiple of 4.*head_dim=6"):
        Gemma4Config(**{**tiny, "head_dim": 6})
    with pytest.raises(ValueError, match="pooling must be one of.*Received: pooling='max'"):
        Gemma4Config(**{**tiny, "pooling": "max"})
    with pytest.raises(ValueError, match="num_key_value_heads must divide num_heads"):
        Gemma4Config(**{**tiny, "num_key_value_heads": 3})
    with pytest.raises(ValueError, match=r"multiple of patch_size \* pooling_kernel_size.*= 12"):
        Gemma4Config(**{**tiny, "image_size": 16})
    with pytest.raises(ValueError, match="standardize applies after the soft pooler"):
        Gemma4Config(**{**tiny, "pooling": "avg", "standardize": True})
    with pytest.raises(ValueError, match="num_layers must be a positive integer"):
        Gemma4Config(**{**tiny, "num_layers": 0})
    with pytest.raises(ValueError, match=r"Unknown Gemma4Config argument\(s\) \['depth'\]"):
        from_timm_gemma4("gemma4_vit_167m", depth=2)
    with pytest.raises(ValueError, match="dynamic_image_size is not needed"):
        keras_vit.from_timm("gemma4_vit_167m", dynamic_image_size=True)


def test_every_timm_name_parses_to_the_family():
    names = timm.list_models("gemma4_vit*")
    assert len(names) == 4 and names == timm.list_models(module="gemma4_vit")
    for name in names + timm.list_pretrained("gemma4_vit*"):
        spec = N.parse_timm_name(name)
        assert spec.family.name == "gemma4" and spec.num_classes == 0, name
        assert T.reads_timm_name(name), name
    model = timm.create_model(
        "gemma4_vit_570m",
        pretrained=False,
        depth=1,
        embed_dim=32,
        num_heads=2,
        head_dim=16,
        intermediate_size=64,
    )
    ours = from_timm_gemma4(
        "gemma4_vit_570m", hidden_dim=32, num_layers=1, num_heads=2, head_dim=16, mlp_dim=64
    )
    assert ours.config.hidden_dim == model.embed_dim and ours.config.final_norm


@pytest.mark.parametrize("exporter", ["export_timm", "export_huggingface"])
def test_exporters_refuse_the_tower_before_writing(exporter, tmp_path):
    model = Gemma4VisionTower(Gemma4Config(image_size=24, **OURS))
    target = tmp_path / "out"
    with pytest.raises(ValueError, match="models only; Gemma4VisionTower .*Nothing was written"):
        getattr(keras_vit, exporter)(model, str(target))
    assert not os.path.exists(target) or not os.listdir(target)


@pytest.mark.parametrize(
    "name", ["gemma4_vit_167m", "gemma4_vit_167m_enc", "gemma4_vit_570m", "gemma4_vit_570m_enc"]
)
def test_every_name_loads_timms_own_model_of_that_name(name):
    """timm.create_model(name) at tiny sizes (its checkpoint layout: clamps, std buffers, the
    classifier's `encoder.` prefix) loads strictly and gives timm's output."""
    tiny = dict(
        depth=1,
        embed_dim=32,
        num_heads=2,
        head_dim=16,
        intermediate_size=64,
        position_embedding_size=4,
        img_size=48,
    )
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, **tiny).eval()
    images = np.random.default_rng(0).uniform(0, 1, (1, 48, 48, 3)).astype("float32")
    with torch.no_grad():
        for tensor in model.state_dict().values():
            if tensor.is_floating_point() and torch.isfinite(tensor).all():
                tensor.add_(0.1 * torch.randn(tensor.shape))
        expected = model(torch.from_numpy(images).permute(0, 3, 1, 2)).numpy()
    state = {k: v.numpy() for k, v in model.state_dict().items()}
    ours = keras_vit.from_timm(
        name,
        checkpoint=state,
        image_size=48,
        hidden_dim=32,
        num_layers=1,
        num_heads=2,
        head_dim=16,
        mlp_dim=64,
        position_table_size=4,
    )
    assert_close(to_numpy(ours(images)), expected)


def test_load_timm_weights_points_to_the_family_reader():
    model = Gemma4VisionTower(Gemma4Config(image_size=24, **OURS))
    with pytest.raises(ValueError, match="read by the 'gemma4' family's own reader"):
        T.load_timm_weights(model, "gemma4_vit_167m_enc", {"x": np.zeros(1)})
