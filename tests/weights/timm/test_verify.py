"""keras_vit/weights/timm/verify.py and declared.py: `export_timm` checks, before writing, that
the timm model it names has exactly the keys and shapes of the state dict it writes (timm's model
on the meta device, or keras_vit's declaration of it where timm is missing), and the
declaration is timm's own models' state dicts."""

import itertools
import os

import pytest

import keras_vit
from keras_vit.models.config import ViTConfig
from keras_vit.weights.timm import verify
from keras_vit.weights.timm.declared import NotDeclared, declared_state_shapes
from keras_vit.weights.timm.export import timm_model_for
from tests.helpers import backend_independent, randomize_weights, to_numpy
from tests.weights.references import import_timm, import_torch
from tests.weights.timm_cases import assert_close, random_images, timm_run

torch = import_torch()
timm = import_timm()

# Option combinations of keras_vit ViTs timm's VisionTransformer can express (the candidates
# export_timm picks among: LayerScale, pooling, tokens, QK-norm, fc_norm, CLIP's epsilon).
OPTIONS = dict(
    layer_scale_init_value=(None, 0.1),
    pooling=("token", "gap", "map", None),
    class_token=(True, False),
    num_register_tokens=(0, 2),
    qk_norm=(False, True),
    fc_norm=(False, True),
    layer_norm_epsilon=(1e-6, 1e-5),
)


def _timm_shapes(name, kwargs):
    with torch.device("meta"):
        model = timm.create_model(name, pretrained=False, **kwargs)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def _named_models():
    """`{(name, kwargs)}` export_timm picks for every expressible combination of OPTIONS."""
    found = {}
    for values in itertools.product(*OPTIONS.values()):
        try:
            config = ViTConfig.from_variant(
                "mu/8", image_size=16, num_layers=1, num_classes=3,
                **dict(zip(OPTIONS, values, strict=True)),
            )  # fmt: skip
            named, _ = timm_model_for(config)
        except ValueError:
            continue
        found[(named.name, tuple(sorted(named.kwargs.items())))] = named
    return list(found.values())


@backend_independent
def test_the_declaration_is_timm_s_own_state_dict():
    """For every name and keyword arguments export_timm picks (LayerScale on and off names,
    registers, MAP heads, fc_norm, distilled DeiT, ...): the same keys and shapes as timm's
    model on the meta device."""
    named = _named_models()
    names = {model.name for model in named}
    assert {"vit_base_patch16_clip_224", "vit_so400m_patch14_siglip_384"} <= names, names
    assert any(model.kwargs.get("init_values") for model in named)  # LayerScale named too
    for model in named:
        assert declared_state_shapes(model.name, model.kwargs) == _timm_shapes(*model), model
    distilled = dict(img_size=16, patch_size=8, embed_dim=32, depth=1, num_heads=2, num_classes=3)
    assert declared_state_shapes("deit_base_distilled_patch16_384", distilled) == _timm_shapes(
        "deit_base_distilled_patch16_384", distilled
    )


@backend_independent
def test_a_hybrid_is_declared_with_its_stem():
    kwargs = dict(img_size=32, embed_dim=32, depth=1, num_heads=2, num_classes=3)
    theirs = _timm_shapes("vit_small_r26_s32_224", kwargs)
    backbone = {
        k.removeprefix("patch_embed.backbone."): v
        for k, v in theirs.items()
        if k.startswith("patch_embed.backbone.")
    }
    features = theirs["patch_embed.proj.weight"][1]
    stem = {"backbone": backbone, "features": features, "tokens": 1}
    assert declared_state_shapes("vit_small_r26_s32_224", kwargs, stem=stem) == theirs
    with pytest.raises(NotDeclared, match="hybrid"):
        declared_state_shapes("vit_small_r26_s32_224", kwargs)


@backend_independent
def test_what_is_not_declared_is_said():
    with pytest.raises(NotDeclared, match="aimv2_large_patch14_224.*RmsNorm"):
        declared_state_shapes("aimv2_large_patch14_224", {})
    with pytest.raises(NotDeclared, match="vit_base_patch16_18x2_224.*block_fn"):
        declared_state_shapes("vit_base_patch16_18x2_224", {})
    with pytest.raises(NotDeclared, match="Eva, not a VisionTransformer"):
        declared_state_shapes("eva02_tiny_patch14_224", {})


@pytest.mark.parametrize("timm_installed", [True, False], ids=["timm_meta", "declared"])
def test_export_refuses_a_name_whose_fixed_arguments_the_model_lacks(
    timm_installed, tmp_path, monkeypatch
):
    """A model without LayerScale, named as DeiT III (which fixes init_values) without
    `init_values=None`: timm's model has `ls1` / `ls2` the file would not, so the export is
    refused, nothing written (timm's strict load_state_dict would have refused the file)."""
    from keras_vit.weights.timm import export as E

    if not timm_installed:
        monkeypatch.setattr(verify, "importable_timm", lambda: None)
    model = keras_vit.ViT("mu/8", image_size=16, num_layers=1, num_classes=3,
                          pooling="token", approximate_gelu=False)  # fmt: skip
    named, qkv_bias = E.timm_model_for(model.config)
    wrong = E.TimmModel("deit3_small_patch16_224", dict(named.kwargs))
    monkeypatch.setattr(E, "_named_model", lambda config, zero: (wrong, qkv_bias))
    path = tmp_path / "deit3.safetensors"
    source = "timm" if timm_installed else "keras_vit's declaration"
    with pytest.raises(ValueError, match=rf"does not load \(checked against {source}\); nothing "
                                         r"was written. Missing: \['blocks.0.ls1.gamma', "
                                         r"'blocks.0.ls2.gamma'\]"):  # fmt: skip
        keras_vit.export_timm(model, str(path), config_json=True)
    assert not os.path.exists(path) and not os.path.exists(tmp_path / "config.json")


def test_exports_load_strictly_into_the_named_model(tmp_path):
    """LayerScale, registers without a class token, the MAP head with fc_norm (it used to name
    eva_large_patch14_336 without fc_norm=True: a file with fc_norm for a model with norm):
    the named timm model loads the written file strictly (checked by export_timm, then timm)."""
    from safetensors.torch import load_file

    images = random_images(16)

    for i, options in enumerate((
        dict(pooling="map", fc_norm=True, class_token=True),  # timm's fc_norm follows its pool
        dict(layer_scale_init_value=0.1, pooling="gap", class_token=False),
        dict(num_register_tokens=2, class_token=False, pooling="gap", fc_norm=True),
        dict(pooling="map", class_token=False, layer_norm_epsilon=1e-6),
    )):  # fmt: skip
        model = keras_vit.ViT("mu/8", image_size=16, num_layers=1, num_classes=3,
                              approximate_gelu=False, **options)  # fmt: skip
        randomize_weights(model, seed=i)
        path = str(tmp_path / f"{i}.safetensors")
        name, kwargs = keras_vit.export_timm(model, path)
        theirs = timm.create_model(name, pretrained=False, **kwargs).eval()
        theirs.load_state_dict(load_file(path))
        assert_close(to_numpy(model(images)), timm_run(torch, theirs, images))
