import math

import keras
import numpy as np
import pytest

from keras_vit.training import augment
from keras_vit.training.augment import RandomResizedCrop
from tests.helpers import check_config_complete, roundtrip_layer, to_numpy


def test_output_shapes_train_and_inference():
    layer = RandomResizedCrop(16, 12, seed=1)
    x = np.random.default_rng(0).uniform(0, 255, (3, 32, 24, 3)).astype("float32")
    assert tuple(layer(x, training=True).shape) == (3, 16, 12, 3)
    assert tuple(layer(x, training=False).shape) == (3, 16, 12, 3)
    assert layer.compute_output_shape((None, 32, 24, 3)) == (None, 16, 12, 3)
    # Inference is a plain resize.
    np.testing.assert_allclose(
        to_numpy(layer(x, training=False)),
        to_numpy(keras.ops.image.resize(x, (16, 12))),
        atol=1e-4,
    )


@pytest.mark.parametrize("scale,ratio", [((0.08, 1.0), (3 / 4, 4 / 3)), ((0.5, 0.7), (0.9, 1.5))])
def test_sampled_boxes_stay_in_ranges(scale, ratio):
    layer = RandomResizedCrop(8, 8, scale=scale, ratio=ratio, seed=3)
    y0, x0, h, w = (to_numpy(t) for t in layer.sample_boxes(2000, 40, 40))
    area = h * w / (40 * 40)
    aspect = w / h
    assert area.min() >= scale[0] - 1e-5 and area.max() <= scale[1] + 1e-5
    assert aspect.min() >= ratio[0] - 1e-4 and aspect.max() <= ratio[1] + 1e-4
    assert (y0 >= 0).all() and (x0 >= 0).all()
    assert (y0 + h <= 40 + 1e-4).all() and (x0 + w <= 40 + 1e-4).all()
    # The samples cover the ranges (not a constant box).
    assert area.max() - area.min() > 0.5 * (scale[1] - scale[0])
    assert math.log(aspect.max() / aspect.min()) > 0.5 * math.log(ratio[1] / ratio[0])


def test_crop_of_a_ramp_is_the_expected_window():
    # A horizontal ramp: the crop's values must lie inside the sampled box's columns.
    ramp = np.tile(np.arange(32, dtype="float32")[None, :, None], (32, 1, 1))[None]
    layer = RandomResizedCrop(32, 32, scale=(0.2, 0.3), ratio=(1.0, 1.0), seed=5)
    out = to_numpy(layer(ramp, training=True))[0, ..., 0]
    assert out.max() - out.min() < 20  # width of a <=30% square is <= ~17.5 px (+ interpolation)
    assert out.max() - out.min() > 8


def test_serialization(tmp_path):
    layer = RandomResizedCrop(8, 8, scale=(0.3, 1.0), seed=2)
    check_config_complete(layer)
    roundtrip_layer(layer, np.ones((2, 16, 16, 3), "float32"), tmp_path)


def test_errors():
    with pytest.raises(ValueError, match="scale"):
        RandomResizedCrop(8, 8, scale=(0.5, 0.2))
    with pytest.raises(ValueError, match="ratio"):
        RandomResizedCrop(8, 8, ratio=(0.0, 1.0))
    with pytest.raises(ValueError, match="height"):
        RandomResizedCrop(0, 8)


def test_build_augmenters_by_name_and_instance():
    custom = keras.layers.RandomFlip("horizontal")
    built = augment.build_augmenters(
        ["randaugment", ("mixup", {"alpha": 0.4}), "cutmix", "random_erasing", custom], seed=0
    )
    names = [type(layer).__name__ for layer, _ in built]
    assert names == ["RandAugment", "MixUp", "CutMix", "RandomErasing", "RandomFlip"]
    assert [mixes for _, mixes in built] == [False, True, True, False, False]
    assert built[1][0].alpha == 0.4
    geometric = augment.build_augmenters(
        ["random_rotation", "random_translation", ("random_zoom", {"fill_mode": "reflect"})]
    )
    assert [type(layer).__name__ for layer, _ in geometric] == [
        "RandomRotation", "RandomTranslation", "RandomZoom"
    ]
    assert geometric[0][0].fill_mode == "constant" and geometric[2][0].fill_mode == "reflect"
    with pytest.raises(ValueError, match="Unknown augmentation"):
        augment.build_augmenters(["autoaugment"])


def test_keras_augmenters_run_in_the_pipeline():
    pytest.importorskip("tensorflow")
    from keras_vit import data

    source = data.load_source("digits")
    ds = data.train_pipeline(
        source,
        image_size=16,
        batch_size=8,
        epochs=1,
        steps_per_epoch=1,
        augmenters=augment.build_augmenters(["randaugment", "mixup"], seed=0),
    )
    x, y = next(iter(ds))
    x, y = np.asarray(x), np.asarray(y)
    assert x.shape == (8, 16, 16, 3) and y.shape == (8, 10)
    assert x.min() >= -1.0001 and x.max() <= 1.0001
    np.testing.assert_allclose(y.sum(-1), 1.0, atol=1e-5)  # mixed one-hot labels
