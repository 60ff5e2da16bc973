"""Tests for keras_vit/weights/huggingface/export.py: keras_vit models -> transformers' ViT.

Both directions, with real transformers (`tests.weights.references`, torch first) and tiny
perturbed models: transformers -> keras_vit -> transformers (the written folder has the
original's weight names, tensors and architecture settings, and loads with the same outputs),
and keras_vit -> transformers -> keras_vit for keras_vit's own options (transformers' outputs,
then `from_huggingface` of the folder), plus what transformers' ViT cannot express.
"""

import json
import os
import re

import numpy as np
import pytest

from keras_vit import ViT, from_huggingface
from keras_vit.weights.huggingface.export import export_huggingface
from keras_vit.weights.state_dict import read_safetensors
from tests.helpers import to_numpy
from tests.weights.huggingface.test_reader import (
    SIZES,
    _assert_close,
    _images,
    _perturb,
    _reference,
)
from tests.weights.keras_models import images_for, perturbed
from tests.weights.references import import_torch, import_transformers

torch = import_torch()  # imported before transformers, whatever the backend
transformers = import_transformers()

# Settings of config.json an export must keep.
ARCHITECTURE_KEYS = (
    "architectures", "model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "intermediate_size", "hidden_act", "layer_norm_eps", "image_size", "patch_size",
    "num_channels", "qkv_bias",
)  # fmt: skip


def _load(folder, headless):
    """transformers' model of a folder, checking that nothing is missing or unexpected."""
    if headless:
        model, info = transformers.ViTModel.from_pretrained(
            folder, add_pooling_layer=False, output_loading_info=True
        )
    else:
        model, info = transformers.AutoModelForImageClassification.from_pretrained(
            folder, output_loading_info=True
        )
    problems = {k: v for k, v in info.items() if v and k != "error_msgs"}
    assert not problems, problems
    return model.eval()


def _outputs(model, images):
    out = _reference(model, images)
    logits = getattr(out, "logits", None)
    return (logits if logits is not None else out.last_hidden_state).numpy()


ORIGINALS = {
    "classifier": (dict(num_labels=5), False),
    "base_no_qkv_bias_tanh_eps": (
        dict(hidden_act="gelu_pytorch_tanh", qkv_bias=False, layer_norm_eps=1e-6), True),
}  # fmt: skip


@pytest.mark.parametrize("case", list(ORIGINALS))
def test_transformers_to_keras_vit_to_transformers(case, tmp_path):
    settings, headless = ORIGINALS[case]
    config = transformers.ViTConfig(image_size=32, patch_size=8, **SIZES, **settings)
    if headless:
        original = transformers.ViTModel(config, add_pooling_layer=False)
    else:
        original = transformers.ViTForImageClassification(config)
    original = _perturb(original, seed=len(case))
    original.save_pretrained(tmp_path / "original")
    ours = from_huggingface(tmp_path / "original", **({"pooling": None} if headless else {}))
    folder = export_huggingface(ours, tmp_path / "exported")
    written = read_safetensors(os.path.join(folder, "model.safetensors"))
    expected = read_safetensors(str(tmp_path / "original" / "model.safetensors"))
    assert sorted(written) == sorted(expected)
    for key, value in expected.items():
        np.testing.assert_array_equal(written[key], value, err_msg=key)
    hf = json.loads((tmp_path / "original" / "config.json").read_text())
    exported = json.loads(open(os.path.join(folder, "config.json")).read())
    assert {k: exported[k] for k in ARCHITECTURE_KEYS} == {k: hf[k] for k in ARCHITECTURE_KEYS}
    images = _images(32, seed=3)
    _assert_close(_outputs(_load(folder, headless), images), _outputs(original, images))


# keras_vit's own models: ViT("mu/8", ...) options transformers' ViT has.
OPTIONS = {
    "exact_gelu_head": dict(num_classes=3, approximate_gelu=False),
    "non_square_no_class_row_eps": dict(
        image_size=(32, 48), num_classes=4, prefix_position_embedding=False,
        layer_norm_epsilon=1e-12),
    "quick_gelu_sincos_tokens": dict(
        include_top=False, pooling=None, activation="quick_gelu",
        position_embedding="sincos2d"),
}  # fmt: skip


@pytest.mark.parametrize("option", list(OPTIONS))
def test_keras_vit_to_transformers_to_keras_vit(option, tmp_path):
    kwargs = {"image_size": 32, **OPTIONS[option]}
    model = perturbed(ViT("mu/8", **kwargs), seed=len(option))
    folder = export_huggingface(model, tmp_path / "vit")
    images = images_for(model)
    ours = to_numpy(model(images))
    headless = not kwargs.get("include_top", True)
    _assert_close(_outputs(_load(folder, headless), images), ours)
    back = from_huggingface(folder, **({"pooling": None} if headless else {}))
    _assert_close(to_numpy(back(images)), ours)


def test_existing_folder_needs_overwrite(tmp_path):
    model = ViT("mu/8", image_size=32, num_classes=3)
    folder = export_huggingface(model, tmp_path / "vit")
    with pytest.raises(FileExistsError, match=r"config.json, model.safetensors.*overwrite=True"):
        export_huggingface(model, folder)
    export_huggingface(model, folder, overwrite=True)
    assert sorted(os.listdir(folder)) == ["config.json", "model.safetensors"]


REFUSED = {
    "registers": (dict(num_register_tokens=2), "num_register_tokens=2"),
    "layer_scale": (dict(layer_scale_init_value=0.1), "layer_scale_init_value=0.1"),
    "gap_head": (dict(pooling="gap", class_token=True), "pooling='gap'"),
    "map_features": (dict(pooling="map", include_top=False, class_token=True), "pooling='map'"),
    "distilled": (dict(distillation_token=True), "distillation_token=True"),
    "hybrid": (dict(resnet_units=(), patch_size=1), "resnet_units=()"),
    "dynamic": (dict(dynamic_image_size=True), "dynamic_image_size=True"),
    "pre_logits": (dict(representation_size=16), "representation_size=16"),
    "qk_norm": (dict(qk_norm=True), "qk_norm=True"),
    "no_class_token": (dict(pooling="gap", include_top=False), "class_token=False"),
    # Options transformers' ViT has no form for (were written as a plain ViT, or a KeyError).
    "rotary": (dict(rotary_embedding="eva02"), "rotary_embedding='eva02'"),
    "post_norm": (dict(block_kind="post"), "block_kind='post'"),
    "key_bias": (dict(key_bias=False), "key_bias=False"),
    "swiglu": (dict(mlp="swiglu"), "mlp='swiglu'"),
    "parallel": (dict(num_parallel=2), "block_kind='parallel'"),  # num_parallel > 1 alone
    "naflex": (dict(naflex=True), "naflex=True"),
    # Refused by the allow-list, not a table entry (were a raw KeyError: the deny-list drifted).
    "parallel_scaling": (dict(block_kind="parallel_scaling"),
                         "block_kind='parallel_scaling'"),
    "differential": (dict(attention_type="differential"), "attention_type='differential'"),
    "position_resize": (dict(position_embedding_antialias=False, dynamic_image_size=True),
                        "dynamic_image_size=True"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(REFUSED))
def test_what_transformers_cannot_express_is_refused_before_writing(case, tmp_path):
    kwargs, message = REFUSED[case]
    model = ViT("mu/8", **{"image_size": 32, **kwargs})
    with pytest.raises(ValueError, match=re.escape(message)):
        export_huggingface(model, tmp_path / "vit")
    assert not (tmp_path / "vit").exists()


def test_every_option_is_written_or_refused():
    """The allow-list: an option export_huggingface does not write must be at its default."""
    import dataclasses

    from keras_vit.models.config import ViTConfig
    from keras_vit.weights.export_options import unwritten_options
    from keras_vit.weights.huggingface import export as E

    known = set(E._WRITTEN) | {field for field, _, _ in E._PLAIN}
    assert known <= {f.name for f in dataclasses.fields(ViTConfig)}  # no stale names
    assert "attention_type" in unwritten_options(known)
    config = ViTConfig.from_variant("mu/8", image_size=32)
    E.check_huggingface_expressible(config)
    with pytest.raises(ValueError, match="attention_type='differential'.*no form for it"):
        E.check_huggingface_expressible(dataclasses.replace(config, attention_type="differential"))
