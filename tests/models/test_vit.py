import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.distribution.abstract import abstract
from keras_vit.layers import TransformerBlock
from tests.helpers import (
    block_params,
    np_block,
    np_layer_norm,
    np_patches,
    randomize_weights,
    roundtrip_model,
    to_numpy,
)

TINY = dict(image_size=32, num_classes=5)
# The tiny hybrid of test_hybrid.py: stem stride 8, so 32 px -> the same 4x4 grid as "mu/8".
HYBRID_STEM = dict(resnet_units=(1, 1), resnet_width=8, resnet_groups=4)


def _images(b=2, h=32, w=32, c=3, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (b, h, w, c)).astype("float32")


@pytest.mark.parametrize(
    "include_top,pooling,representation_size,expected",
    [
        (True, "token", None, (None, 5)),
        (True, "gap", None, (None, 5)),
        (True, "token", 12, (None, 5)),
        (False, "token", None, (None, 32)),
        (False, "gap", None, (None, 32)),
        (False, None, None, (None, 17, 32)),
    ],
)
@pytest.mark.parametrize(
    "variant,stem", [("mu/8", {}), ("mu/1", HYBRID_STEM)], ids=["plain", "hybrid"]
)
def test_head_combinations(variant, stem, include_top, pooling, representation_size, expected):
    model = keras_vit.ViT(
        variant,
        include_top=include_top,
        pooling=pooling,
        representation_size=representation_size,
        **stem,
        **TINY,
    )
    assert model.output_shape == expected
    assert tuple(model(_images()).shape)[1:] == expected[1:]
    if include_top:
        head = model.get_layer("head")
        assert not np.any(to_numpy(head.kernel)) and not np.any(to_numpy(head.bias))
    if pooling == "gap":
        assert not model.get_layer("patch_encoder").class_token
    assert ("pre_logits" in [layer.name for layer in model.layers]) == bool(representation_size)


def test_gap_with_class_token_and_no_token_tokens():
    model = keras_vit.ViT("mu/8", pooling="gap", class_token=True, **TINY)
    assert model.get_layer("patch_encoder").class_token
    tokens = keras_vit.ViT("mu/8", include_top=False, pooling=None, class_token=False, **TINY)
    assert tokens.output_shape == (None, 16, 32)


def test_overrides_win_and_non_square():
    model = keras_vit.ViT(
        "B/16",
        image_size=(32, 48),
        num_layers=1,
        hidden_dim=16,
        mlp_dim=8,
        num_heads=2,
        patch_size=8,
    )
    assert len([layer for layer in model.layers if isinstance(layer, TransformerBlock)]) == 1
    encoder = model.get_layer("patch_encoder")
    assert encoder.grid_size == (4, 6) and encoder.hidden_dim == 16
    assert model.name == "vit_b16"
    assert tuple(model(_images(h=32, w=48)).shape) == (2, 1000)


def test_drop_path_increases_linearly():
    model = keras_vit.ViT("mu/8", num_layers=3, drop_path_rate=0.2, **TINY)
    rates = [model.get_layer(f"encoderblock_{i}").drop_path_rate for i in range(3)]
    np.testing.assert_allclose(rates, [0.0, 0.1, 0.2])


def test_matches_numpy_forward_pass():
    """A whole tiny ViT against the paper's Eq. 1-4 written in NumPy."""
    model = keras_vit.ViT("mu/8", representation_size=12, **TINY)
    randomize_weights(model)
    x = _images()
    n = to_numpy
    enc = model.get_layer("patch_encoder")
    # Eq. 1: z0 = [x_class; x_p E] + E_pos
    z = np_patches(x, 8) @ n(enc.kernel).reshape(-1, 32) + n(enc.bias)
    z = np.concatenate([np.broadcast_to(n(enc.class_embedding), (2, 1, 32)), z], 1)
    z = z + n(enc.position_embeddings)
    # Eq. 2-3, per layer
    for i in range(2):
        z, _ = np_block(z, block_params(model.get_layer(f"encoderblock_{i}")))
    # Eq. 4: y = LN(z_L^0)
    norm = model.get_layer("encoder_norm")
    y = np_layer_norm(z, n(norm.gamma), n(norm.beta))[:, 0]
    pre = model.get_layer("pre_logits")
    y = np.tanh(y @ n(pre.kernel) + n(pre.bias))
    head = model.get_layer("head")
    logits = y @ n(head.kernel) + n(head.bias)
    out = n(model(x))
    np.testing.assert_allclose(out, logits, rtol=1e-4, atol=1e-5)
    assert np.abs(logits).max() > 0.1  # the comparison is not between zeros


def test_fit_step_and_keras_roundtrip(tmp_path):
    model = keras_vit.ViT("mu/8", dropout_rate=0.1, drop_path_rate=0.1, **TINY)
    model.compile(
        keras.optimizers.Adam(1e-3),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    x, y = _images(b=8), np.arange(8) % 5
    history = model.fit(x, y, batch_size=4, epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert np.any(to_numpy(model.get_layer("head").kernel))
    loaded = roundtrip_model(model, x, tmp_path)
    assert [layer.name for layer in loaded.layers] == [layer.name for layer in model.layers]


def test_weights_h5_argument(tmp_path):
    model = keras_vit.ViT("mu/8", **TINY)
    randomize_weights(model)
    path = str(tmp_path / "w.weights.h5")
    model.save_weights(path)
    again = keras_vit.ViT("mu/8", weights=path, **TINY)
    np.testing.assert_array_equal(to_numpy(model(_images())), to_numpy(again(_images())))
    with pytest.raises(FileNotFoundError, match="missing.weights.h5"):
        keras_vit.ViT("mu/8", weights=str(tmp_path / "missing.weights.h5"), **TINY)
    with pytest.raises(ValueError, match="weights must be None or a path"):
        keras_vit.ViT("mu/8", weights="imagenet-best", **TINY)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(image_size=30), r"divisible by the patch size.*\(30, 30\)"),
        (dict(image_size=(32, 36)), r"width must be divisible.*\(32, 36\)"),
        (dict(num_heads=3), "hidden_dim=32, num_heads=3"),
        (dict(pooling=None), "pooling=None.*include_top=True"),
        (dict(pooling="max"), "pooling must be one of"),
        (dict(pooling="token", class_token=False), "class token"),
        (dict(num_classes=0), "num_classes"),
        (dict(image_size=0), "image_size must be positive"),
        (dict(num_layers=0), "num_layers"),
        (dict(hidden_dim=-8), "hidden_dim"),
        (dict(dropout_rate=1.0), r"dropout_rate must be a number in \[0, 1\)"),
        (dict(drop_path_rate=-0.5), "drop_path_rate"),
        (dict(attention_dropout_rate=2), "attention_dropout_rate"),
        (dict(num_channels=0), "num_channels"),
    ],
)
def test_bad_arguments(kwargs, match):
    args = dict(TINY, **kwargs)
    with pytest.raises(ValueError, match=match):
        keras_vit.ViT("mu/8", **args)


def test_unknown_variant():
    with pytest.raises(ValueError, match="Unknown model size 'Q'"):
        keras_vit.ViT("Q/16")


def test_call_time_input_errors():
    model = keras_vit.ViT("mu/8", **TINY)
    with pytest.raises(ValueError, match="3"):
        model(_images(c=1))
    with pytest.raises(ValueError):
        model(np.zeros((2, 32, 32), "float32"))


def test_preprocess_input():
    x = np.array([[0, 127.5, 255]], "float32")
    np.testing.assert_allclose(to_numpy(keras_vit.preprocess_input(x)), [[-1, 0, 1]])
    assert to_numpy(keras_vit.preprocess_input(np.array([255], "uint8"))).dtype == np.float32


def test_named_builders_share_the_generic_builder():
    named = [(keras_vit.ViTTi16, "Ti/16"), (keras_vit.ViTB16, "B/16"), (keras_vit.ViTH14, "H/14")]
    for fn, code in named:
        assert code in fn.__doc__
        assert fn.__name__ == "ViT" + code.replace("/", "")
        assert fn.__module__ == "keras_vit.models.vit"
    assert keras_vit.ViTR50B16.__name__ == "ViTR50B16"
    assert keras_vit.ViTR50B16.__module__ == "keras_vit.models.hybrid"
    model = keras_vit.ViTS32(image_size=64, num_layers=1, num_classes=3)
    assert model.name == "vit_s32"
    assert model.get_layer("patch_encoder").grid_size == (2, 2)
    assert model.get_layer("encoderblock_0").num_heads == 6


_LOAD_SCRIPT = """
import json, sys, numpy as np, keras
import keras_vit  # registers the layers
model = keras.saving.load_model(sys.argv[1])
x = np.load(sys.argv[2])
np.save(sys.argv[3], keras.ops.convert_to_numpy(model(x)))
print(json.dumps(keras.backend.backend()))
"""


@pytest.mark.slow
def test_keras_file_loads_under_other_backends(tmp_path):
    model = keras_vit.ViT("mu/8", representation_size=8, **TINY)
    randomize_weights(model)
    x = _images()
    path, xpath = str(tmp_path / "m.keras"), str(tmp_path / "x.npy")
    model.save(path)
    np.save(xpath, x)
    expected = to_numpy(model(x))
    here = keras.backend.backend()
    for other in {"tensorflow", "jax", "torch"} - {here}:
        out = str(tmp_path / f"{other}.npy")
        env = dict(os.environ, KERAS_BACKEND=other, TF_CPP_MIN_LOG_LEVEL="3")
        proc = subprocess.run(
            [sys.executable, "-c", _LOAD_SCRIPT, path, xpath, out],
            env=env,
            capture_output=True,
            text=True,
            cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert json.loads(proc.stdout.strip().splitlines()[-1]) == other
        np.testing.assert_allclose(np.load(out), expected, rtol=1e-5, atol=1e-5)


OFFICIAL_COUNTS = {
    "Ti/16": 5_717_416,
    "S/16": 22_050_664,
    "B/16": 86_567_656,
    "B/32": 88_224_232,
    "L/16": 304_326_632,
    "H/14": 632_045_800,
}


@pytest.mark.parametrize("code", sorted(OFFICIAL_COUNTS))
def test_full_size_parameter_counts(code):
    """The paper's models, built by the same code with variables of shapes and no values
    (`keras_vit.distribution.abstract`: ViT-H/14's 632M parameters take no memory or time);
    `test_abstract_model_has_the_built_models_variables` shows such a model has exactly the
    variables of one built with values."""
    model = abstract(lambda: keras_vit.ViT(code, num_classes=1000, image_size=224))
    assert model.count_params() == OFFICIAL_COUNTS[code]


def test_abstract_model_has_the_built_models_variables():
    build = lambda: keras_vit.ViT("Ti/16", num_classes=1000, image_size=224)  # noqa: E731
    built, shaped = build(), abstract(build)
    assert [(v.path, tuple(v.shape), v.dtype) for v in shaped.weights] == [
        (v.path, tuple(v.shape), v.dtype) for v in built.weights
    ]
    assert built.count_params() == shaped.count_params() == OFFICIAL_COUNTS["Ti/16"]


def test_remat_model_same_outputs_fits_and_roundtrips(tmp_path):
    plain = keras_vit.ViT("mu/8", **TINY)
    remat = keras_vit.ViT("mu/8", remat=True, **TINY)
    remat.set_weights(plain.get_weights())
    blocks = [layer for layer in remat.layers if isinstance(layer, TransformerBlock)]
    assert blocks and all(b.remat for b in blocks)
    x, y = _images(b=8), np.arange(8) % 5
    np.testing.assert_allclose(to_numpy(remat(x)), to_numpy(plain(x)), rtol=1e-5, atol=1e-6)
    # model.fit (compiled on JAX and TensorFlow) with dropout and drop path under remat.
    model = keras_vit.ViT("mu/8", remat=True, dropout_rate=0.1, drop_path_rate=0.1, **TINY)
    model.compile(
        keras.optimizers.Adam(1e-3),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    history = model.fit(x, y, batch_size=4, epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    loaded = roundtrip_model(model, x, tmp_path)
    assert all(layer.remat for layer in loaded.layers if isinstance(layer, TransformerBlock))


def test_an_empty_batch_gives_an_empty_output():
    """0 images: (0, classes), on every backend (PyTorch's reshape could not infer a -1 from
    0 elements; Keras' predict had no batch to run; issue 56)."""
    images = np.zeros((0, 32, 32, 3), "float32")
    for options in (dict(), dict(pooling="map"), dict(rotary_embedding="eva02")):
        model = keras_vit.ViT("mu/8", image_size=32, num_classes=10, num_layers=1, **options)
        assert tuple(to_numpy(model(images)).shape) == (0, 10)
    assert model.predict(images, verbose=0).shape == (0, 10)


def test_predict_of_a_list_of_images_says_to_stack_them():
    model = keras_vit.ViT("mu/8", image_size=32, num_classes=10, num_layers=1)
    images = [np.zeros((32, 32, 3), "float32")] * 2
    with pytest.raises(ValueError, match=r"a list of 2 arrays.*np.stack\(images\)"):
        model.predict(images, verbose=0)
    np.testing.assert_allclose(  # a list of one batch is that batch, as Keras reads it
        model.predict([np.stack(images)], verbose=0), model.predict(np.stack(images), verbose=0)
    )
