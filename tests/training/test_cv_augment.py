"""Tests of keras_vit/training/cv_augment.py: keras-cv layers by name, in the recipes' pipeline.

The pipeline tests run on every backend: keras-cv layers run inside `tf.data` (TensorFlow graph
mode) whatever the Keras backend, and the batches feed `model.fit`.
"""

import json
import sys

import keras
import numpy as np
import pytest

from keras_vit.training import augment
from keras_vit.training.cv_augment import build_keras_cv_layer, parse_keras_cv_spec

# --- parsing (keras-cv not needed) ---------------------------------------------------------------


def test_parse_forms():
    assert parse_keras_cv_spec("keras_cv.GridMask") == ("GridMask", (), {})
    assert parse_keras_cv_spec(" keras_cv.layers.GridMask() ") == ("GridMask", (), {})
    assert parse_keras_cv_spec("keras_cv.RandomCutout(0.5, width_factor=(0.1, 0.2))") == (
        "RandomCutout", (0.5,), {"width_factor": (0.1, 0.2)}
    )
    assert parse_keras_cv_spec(
        "keras_cv.RandAugment(value_range=[0, 255], magnitude=0.3, rate=None)"
    ) == ("RandAugment", (), {"value_range": [0, 255], "magnitude": 0.3, "rate": None})


@pytest.mark.parametrize(
    "text, match",
    [
        ("keras_cv", "Malformed"),
        ("keras_cv.layers", "Malformed"),
        ("keras_cv.layers.preprocessing.GridMask", "Malformed"),
        ("keras_cv.GridMask(", "Malformed"),
        ("os.system('true')", "Malformed"),
        ("keras_cv.GridMask()()", "Malformed"),
        ("keras_cv.GridMask(ratio_factor=__import__('os'))", "must be literals.*__import__"),
        ("keras_cv.GridMask(ratio_factor=x)", "must be literals"),
        ("keras_cv.GridMask(*[1])", r"\*args and \*\*kwargs"),
        ("keras_cv.GridMask(**{'seed': 1})", r"\*args and \*\*kwargs"),
    ],
)
def test_parse_errors_never_execute(text, match):
    with pytest.raises(ValueError, match=match):
        parse_keras_cv_spec(text)


def test_cli_splits_at_top_level_commas(capsys):
    from keras_vit.cli import main

    text = "randaugment, keras_cv.RandAugment(value_range=(0, 255), magnitude=0.3),"
    text += "keras_cv.GridMask"
    assert main(["pretrain", "--augment", text, "--print-config"]) == 0
    config = json.loads(capsys.readouterr().out)
    assert config["augment"] == [
        "randaugment", "keras_cv.RandAugment(value_range=(0, 255), magnitude=0.3)",
        "keras_cv.GridMask",
    ]
    for bad, message in (
        ("keras_cv.GridMask(ratio_factor=(0, 1)", "balanced brackets"),
        ("keras_cv.GridMask(seed=open('x'))", "must be literals"),
    ):
        assert main(["pretrain", "--augment", bad, "--print-config"]) == 2
        assert message in capsys.readouterr().err


def test_missing_keras_cv_names_the_extra(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "keras_cv", None)  # `import keras_cv` now fails
    with pytest.raises(ImportError, match=r'pip install "keras-vit\[cv\]"'):
        build_keras_cv_layer("keras_cv.GridMask")
    from keras_vit.cli import main

    argv = ["pretrain", "--smoke", "--augment", "keras_cv.GridMask", "--out", str(tmp_path / "r")]
    assert main(argv) == 2
    assert 'pip install "keras-vit[cv]"' in capsys.readouterr().err
    assert not (tmp_path / "r").exists()  # stopped before any work


# --- building layers and running them in the pipeline (keras-cv installed) ---------------------


@pytest.fixture(scope="module")
def keras_cv():
    return pytest.importorskip("keras_cv", reason="the cv extra (keras-cv) is not installed")


def test_build_by_name_fills_pipeline_defaults(keras_cv):
    built = augment.build_augmenters(
        [
            "keras_cv.RandAugment(magnitude=0.3)",
            ("keras_cv.GridMask", {"ratio_factor": (0, 0.4)}),
            "keras_cv.layers.JitteredResize(scale_factor=(0.8, 1.25))",
            "keras_cv.MixUp",
            "mixup",
        ],
        seed=5,
        image_size=(16, 12),
    )
    names = [type(layer).__name__ for layer, _ in built]
    assert names == ["RandAugment", "GridMask", "JitteredResize", "MixUp", "MixUp"]
    assert [mixes for _, mixes in built] == [False, False, False, True, True]
    rand_augment, grid_mask, jittered = (layer for layer, _ in built[:3])
    assert tuple(rand_augment.value_range) == (0, 255) and rand_augment.magnitude == 0.3
    assert grid_mask.seed == 5
    assert (grid_mask.ratio_factor.lower, grid_mask.ratio_factor.upper) == (0, 0.4)
    assert tuple(jittered.target_size) == (16, 12)
    given = build_keras_cv_layer("keras_cv.RandAugment(value_range=(0, 1))")[0]
    assert tuple(given.value_range) == (0, 1)  # what is given wins


def test_build_errors_name_the_layer(keras_cv):
    with pytest.raises(ValueError, match=r"Unknown keras-cv layer 'GridMsk'.*keras_cv\.GridMask"):
        build_keras_cv_layer("keras_cv.GridMsk")
    with pytest.raises(ValueError, match=r"keras_cv\.layers\.GridMask refused its arguments"):
        build_keras_cv_layer("keras_cv.GridMask(no_such_argument=1)")
    with pytest.raises(ValueError, match="needs a dict of kwargs"):
        augment.build_augmenters([("keras_cv.GridMask", 3)])


@pytest.fixture(scope="module")
def digits():
    pytest.importorskip("tensorflow")
    pytest.importorskip("sklearn")
    from keras_vit import data

    return data, data.load_source("digits")


def batches(digits, augmenters, steps=2):
    data, source = digits
    ds = data.train_pipeline(
        source, image_size=16, batch_size=8, epochs=1, steps_per_epoch=steps, seed=0,
        augmenters=augmenters,
    )
    return ds, [(np.asarray(x), np.asarray(y)) for x, y in ds]


@pytest.mark.slow
def test_keras_cv_layers_run_in_the_pipeline_and_feed_fit(keras_cv, digits):
    specs = [
        "keras_cv.RandAugment(magnitude=0.3)",
        "keras_cv.GridMask(ratio_factor=(0.3, 0.5))",
        "keras_cv.RandomCutout(0.3, 0.3)",
        "keras_cv.JitteredResize(scale_factor=(0.8, 1.25))",
        "keras_cv.MixUp",
    ]
    _, plain = batches(digits, [])
    for spec in specs:  # each layer alone changes the batches it is given, keeping their shape
        _, out = batches(digits, augment.build_augmenters([spec], seed=1, image_size=16))
        (x, y), (x0, y0) = out[0], plain[0]
        assert x.shape == (8, 16, 16, 3) and y.shape == (8, 10), spec
        assert x.min() >= -1.0001 and x.max() <= 1.0001, spec
        assert np.abs(x - x0).max() > 0.1, spec
        if spec == "keras_cv.MixUp":
            assert (y.max(-1) < 1).any() and np.allclose(y.sum(-1), 1, atol=1e-5)
        else:
            np.testing.assert_array_equal(y, y0)
    ds, _ = batches(digits, augment.build_augmenters(specs, seed=1, image_size=16))
    # All of them in a row feed model.fit on this backend (a linear model: fit is the point).
    model = keras.Sequential(
        [keras.Input((16, 16, 3)), keras.layers.Flatten(), keras.layers.Dense(10)]
    )
    model.compile("sgd", keras.losses.CategoricalCrossentropy(from_logits=True))
    history = model.fit(ds, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


class Broken:
    """A callable augmentation that cannot be traced into the pipeline."""

    def __call__(self, images, training=None):
        raise TypeError("this layer cannot run here")


def test_failing_layer_names_itself_and_the_backend(digits):
    with pytest.raises(RuntimeError) as info:
        batches(digits, [(Broken(), False)])
    message = str(info.value)
    assert "augmentation layer Broken failed" in message
    assert f"under the {keras.backend.backend()!r} Keras backend" in message
    assert "this layer cannot run here" in message


def test_resizing_layer_must_keep_the_image_size(keras_cv, digits):
    layer, _ = build_keras_cv_layer(
        "keras_cv.JitteredResize(target_size=(8, 8), scale_factor=(0.8, 1.25))"
    )
    with pytest.raises(ValueError, match=r"keras_cv\.JitteredResize changed the image batch shape"):
        batches(digits, [(layer, False)])


def test_keras_cv_instance_in_the_pipeline(keras_cv, digits):
    _, plain = batches(digits, [], steps=1)
    layer = keras_cv.layers.GridMask(ratio_factor=(0.5, 0.6), seed=0)
    _, out = batches(digits, augment.build_augmenters([layer]), steps=1)
    x, x0 = out[0][0], plain[0][0]
    assert x.shape == (8, 16, 16, 3)
    assert (x == -1.0).mean() > (x0 == -1.0).mean() + 0.05  # grid cells masked to black (0)
