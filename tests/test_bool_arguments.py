"""Every bool-like argument of every public function and class is checked by one helper
(`keras_vit.layers._checks.check_bool`): a string is refused, never read (`"False"` and `"no"`
are truthy: `from_timm(name, pretrained="no")` downloaded weights), nor a number; NumPy's
`np.bool_` is a bool.

The table below holds one cheap call per public callable. The test finds the bool-like
parameters by signature (a `True`/`False` default, or a name in `BOOL_LIKE` with a `None`
default), so a public callable that gains one, or a new public callable with one, fails here
until the table calls it.
"""

import inspect

import keras
import numpy as np
import pytest

import keras_vit
import keras_vit._api as api
import keras_vit.inspection as inspection
import keras_vit.layers as layers
from keras_vit.layers._checks import check_bool
from keras_vit.models.config import BOOLS, ViTConfig
from keras_vit.models.mae import MaskedAutoencoder, build_mae_model
from tests.helpers import backend_independent

# Bool-like parameters whose default is None (None: decided from the other arguments).
BOOL_LIKE = ("class_token",)
TINY = dict(image_size=16, num_layers=1, hidden_dim=16, mlp_dim=32, num_heads=2)
PRESET = dict(variant="B/16", name="bool_test", path="mine/x.npz", image_size=224,
              num_classes=10, pre_logits=False, trained_on="a test")  # fmt: skip


@pytest.fixture(scope="module")
def model():
    return keras_vit.ViT("mu/8", num_classes=3, **TINY)


def calls(model, tmp):
    """One call per public callable that has bool-like parameters: `name -> f(**bool_kwargs)`."""
    grid = np.zeros((1, 5, 16), "float32")
    return {
        "ClippedDense": lambda **kw: layers.ClippedDense(4, **kw),
        "DifferentialAttention": lambda **kw: layers.DifferentialAttention(2, **kw),
        "FeatureStandardization": lambda **kw: layers.FeatureStandardization(**kw),
        "GatedMLP": lambda **kw: layers.GatedMLP(8, **kw),
        "GridCellPooling": lambda **kw: layers.GridCellPooling(2, **kw),
        "MAPHead": lambda **kw: layers.MAPHead(2, 8, **kw),
        "MaskedAutoencoder": lambda **kw: MaskedAutoencoder(
            ViTConfig.from_variant("mu/8", include_top=False, pooling=None, **TINY),
            decoder_hidden_dim=8,
            decoder_num_layers=0,
            decoder_num_heads=2,
            decoder_mlp_dim=8,
            **kw,
        ),  # fmt: skip
        "MultiHeadSelfAttention": lambda **kw: layers.MultiHeadSelfAttention(2, **kw),
        "NaFlexPatchEncoder": lambda **kw: layers.NaFlexPatchEncoder(8, 4, (2, 2), **kw),
        "NormedSelfAttention": lambda **kw: layers.NormedSelfAttention(2, 4, **kw),
        "ParallelScalingBlock": lambda **kw: layers.ParallelScalingBlock(2, 8, **kw),
        "PatchEncoder": lambda **kw: layers.PatchEncoder(8, 4, **kw),
        "PatchMerger": lambda **kw: layers.PatchMerger(2, 8, 4, **kw),
        "PostNormBlock": lambda **kw: layers.PostNormBlock(2, 8, **kw),
        "RMSNorm": lambda **kw: layers.RMSNorm(**kw),
        "RelativePositionBias": lambda **kw: layers.RelativePositionBias(2, (2, 2), **kw),
        "SandwichNormBlock": lambda **kw: layers.SandwichNormBlock(2, 4, 8, **kw),
        "StdConv2D": lambda **kw: layers.StdConv2D(4, 3, **kw),
        "SwiGLU": lambda **kw: layers.SwiGLU(8, **kw),
        "TokenDropping": lambda **kw: layers.TokenDropping(0.5, **kw),
        "TransformerBlock": lambda **kw: layers.TransformerBlock(2, 8, **kw),
        "ViT": lambda **kw: keras_vit.ViT("mu/8", **TINY, **kw),
        "WindowedAttentionBlock": lambda **kw: layers.WindowedAttentionBlock(2, 8, 2, **kw),
        "WindowedSelfAttention": lambda **kw: layers.WindowedSelfAttention(2, 2, **kw),
        "ViTConfig": lambda **kw: ViTConfig.from_variant("mu/8", **TINY, **kw),
        "ViTTi16": lambda **kw: keras_vit.ViTTi16(**TINY, **kw),
        "build_mae_model": lambda **kw: build_mae_model(
            "mu/8",
            **TINY,
            decoder_hidden_dim=8,
            decoder_num_layers=0,
            decoder_num_heads=2,
            decoder_mlp_dim=8,
            **kw,
        ),  # fmt: skip
        "decode_predictions": lambda **kw: keras_vit.decode_predictions(
            np.zeros((1, 1000), "float32"), top=1, model=None, **kw
        ),
        "export_huggingface": lambda **kw: keras_vit.export_huggingface(model, tmp / "hf", **kw),
        "export_litert": lambda **kw: keras_vit.export_litert(model, tmp / "m.tflite", **kw),
        "export_onnx": lambda **kw: keras_vit.export_onnx(model, tmp / "m.onnx", **kw),
        "export_saved_model": lambda **kw: keras_vit.export_saved_model(model, tmp / "sm", **kw),
        "export_timm": lambda **kw: keras_vit.export_timm(model, tmp / "m.safetensors", **kw),
        "from_huggingface": lambda **kw: keras_vit.from_huggingface(tmp / "none", **kw),
        "from_timm": lambda **kw: keras_vit.from_timm("vit_tiny_patch16_224", **TINY, **kw),
        "get_preset_file": lambda **kw: keras_vit.get_preset_file("imagenet21k", "B/16", **kw),
        "inspection.compute_rollout": lambda **kw: inspection.compute_rollout(
            [np.full((1, 2, 5, 5), 0.2, "float32")], **kw
        ),
        "inspection.rollout_to_grid": lambda **kw: inspection.rollout_to_grid(
            np.full((1, 5, 5), 0.2, "float32"), (2, 2), **kw
        ),
        "load_npz": lambda **kw: keras_vit.load_npz(model, tmp / "none.npz", **kw),
        "Preset": lambda **kw: keras_vit.Preset(**{**PRESET, **kw}),
        "register_preset": lambda **kw: keras_vit.register_preset(keras_vit.Preset(**PRESET), **kw),
        "relative_position_index": lambda **kw: layers.relative_position_index((2, 2), **kw),
        "resample_patch_embedding": lambda **kw: layers.resample_patch_embedding(
            np.zeros((4, 4, 3, 8), "float32"), (2, 2), **kw
        ),
        "resample_position_embedding": lambda **kw: layers.resample_position_embedding(
            grid, (3, 3), **kw
        ),
        "resize_relative_position_table": lambda **kw: layers.resize_relative_position_table(
            np.zeros((12, 2), "float32"), (3, 3), **kw
        ),
        "save_npz": lambda **kw: keras_vit.save_npz(model, tmp / "m.npz", **kw),
        "with_patch_size": lambda **kw: keras_vit.with_patch_size(model, 4, **kw),
    }


def public_callables():
    found = {}
    for module, prefix in ((api, ""), (layers, ""), (inspection, "inspection.")):
        for name in module.__all__:
            value = getattr(module, name)
            if callable(value):
                found[prefix + name] = value
    found["MaskedAutoencoder"] = MaskedAutoencoder
    found["build_mae_model"] = build_mae_model
    return found


def bool_parameters(function):
    try:
        signature = inspect.signature(function.__init__ if inspect.isclass(function) else function)
    except (TypeError, ValueError):
        return []
    return [
        p.name
        for p in signature.parameters.values()
        if isinstance(p.default, bool)
        or p.annotation in (bool, "bool")
        or (p.name in BOOL_LIKE and p.default is None)
        if p.name not in ("trainable", "autocast")  # keras.layers.Layer's own, checked by Keras
    ]


def cases():
    out = []
    for name, function in sorted(public_callables().items()):
        params = bool_parameters(function)
        if name.startswith("ViT") and name not in ("ViT", "ViTConfig", "ViTTi16"):
            continue  # the named builders pass their options through ViT (ViTTi16 checks one)
        out += [(name, p) for p in params]
    return out


@backend_independent  # signatures only
def test_the_table_calls_every_public_callable_with_a_bool_argument(tmp_path):
    missing = sorted({name for name, _ in cases()} - set(calls(None, tmp_path)))
    assert not missing, f"add a call for these public callables: {missing}"
    assert set(BOOLS) <= {p for name, p in cases() if name == "ViTConfig"}


@pytest.mark.parametrize("name, parameter", cases())
@pytest.mark.parametrize("value", ["False", 0])
def test_a_bool_argument_refuses_strings_and_numbers(model, tmp_path, name, parameter, value):
    call = calls(model, tmp_path)[name]
    with pytest.raises(ValueError, match=f"{parameter} must be a bool") as info:
        call(**{parameter: value})
    assert f"{parameter}={value!r}" in str(info.value)
    assert not any(tmp_path.iterdir()), "nothing is written before the arguments are checked"


CHEAP = (
    "ClippedDense", "DifferentialAttention", "GatedMLP", "GridCellPooling", "MAPHead",
    "MultiHeadSelfAttention", "NaFlexPatchEncoder", "NormedSelfAttention",
    "ParallelScalingBlock", "PatchEncoder", "PatchMerger", "PostNormBlock", "RMSNorm",
    "RelativePositionBias", "SandwichNormBlock", "StdConv2D", "SwiGLU", "TokenDropping",
    "TransformerBlock", "ViTConfig", "WindowedAttentionBlock", "WindowedSelfAttention",
    "relative_position_index", "resample_patch_embedding",
    "resample_position_embedding", "resize_relative_position_table",
    "inspection.rollout_to_grid", "inspection.compute_rollout", "decode_predictions",
)  # fmt: skip


@pytest.mark.parametrize(
    "name, parameter", [(n, p) for n, p in cases() if n in CHEAP], ids=lambda v: str(v)
)
def test_a_numpy_bool_is_a_bool(model, tmp_path, name, parameter):
    function = public_callables()[name]
    default = (
        inspect.signature(function.__init__ if inspect.isclass(function) else function)
        .parameters[parameter]
        .default
    )
    value = np.bool_(True if default is None else default)
    result = calls(model, tmp_path)[name](**{parameter: value})
    if isinstance(result, keras.layers.Layer):
        stored = result.get_config().get(parameter, getattr(result, parameter, value))
        assert type(stored) is bool  # a Python bool in the config (JSON), not np.bool_
    elif isinstance(result, ViTConfig):
        assert type(getattr(result, parameter)) is bool


@backend_independent
def test_check_bool_names_the_argument_and_the_type():
    assert check_bool(np.bool_(False), "strict") is False
    assert check_bool(None, "class_token", allow_none=True) is None
    with pytest.raises(ValueError, match=r"pretrained must be a bool\. Received: pretrained='no'"):
        check_bool("no", "pretrained")
    with pytest.raises(ValueError, match=r"or None\. Received: class_token=1 \(type int\)"):
        check_bool(1, "class_token", allow_none=True)
