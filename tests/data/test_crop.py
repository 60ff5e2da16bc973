"""keras_vit/data/crop.py: the tf.data random resized crop."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
pytest.importorskip("tensorflow_datasets")

from keras_vit import data  # noqa: E402


def test_tf_random_resized_crop_sizes_and_ranges():
    scale, ratio = (0.25, 0.9), (0.75, 1.25)
    keys = [tf.constant([1, i], "int64") for i in range(300)]
    boxes = np.array(
        [[float(v) for v in data.sample_crop_box(30, 30, key, scale, ratio)] for key in keys]
    )
    y0, x0, h, w = boxes.T
    area = h * w / 900
    assert area.min() >= scale[0] - 1e-5 and area.max() <= scale[1] + 1e-5
    assert (w / h).min() >= ratio[0] - 1e-4 and (w / h).max() <= ratio[1] + 1e-4
    assert (y0 + h <= 30 + 1e-3).all() and (x0 + w <= 30 + 1e-3).all()
    image = tf.zeros((30, 20, 3), "uint8")
    out = data.random_resized_crop(image, (16, 8), tf.constant([0, 1], "int64"))
    assert tuple(out.shape) == (16, 8, 3)


def test_tf_random_resized_crop_resamples_like_the_eval_resize():
    # A box covering the whole image gives exactly the evaluation pipeline's resize (same pixel
    # centres): a model trained on crops is not evaluated on a shifted resampling grid.
    image = np.random.default_rng(0).integers(0, 256, (8, 8, 1), dtype="uint8")
    key = tf.constant([0, 1], "int64")
    full = data.random_resized_crop(image, (24, 24), key, scale=(1.0, 1.0), ratio=(1.0, 1.0))
    resized = tf.image.resize(tf.cast(image, "float32"), (24, 24), method="bilinear")
    np.testing.assert_allclose(full.numpy(), resized.numpy(), atol=1e-3)
    # A smaller box samples inside it: on a horizontal ramp the output spans the box's columns.
    ramp = np.tile(np.arange(32, dtype="uint8")[None, :, None], (32, 1, 1))
    y0, x0, h, w = (float(v) for v in data.sample_crop_box(32, 32, key, (0.25, 0.25), (1, 1)))
    row = data.random_resized_crop(ramp, (16, 16), key, (0.25, 0.25), (1, 1)).numpy()[0, :, 0]
    step = w / 16
    np.testing.assert_allclose(row, x0 + step * (np.arange(16) + 0.5) - 0.5, atol=1e-3)


def test_tf_random_resized_crop_rotation():
    # A horizontal ramp rotated by theta about the centre has gradient (cos theta, sin theta).
    ramp = np.tile(np.arange(32, dtype="uint8")[None, :, None], (32, 1, 1))
    angles = []
    for i in range(4):
        key = tf.constant([2, i], "int64")
        out = data.random_resized_crop(ramp, (32, 32), key, (1, 1), (1, 1), rotation=30).numpy()
        centre = out[12:20, 12:20, 0]  # away from the repeated borders
        along_x = np.diff(centre, axis=1).mean()
        along_y = np.diff(centre, axis=0).mean()
        np.testing.assert_allclose(along_x**2 + along_y**2, 1.0, atol=1e-3)
        angles.append(np.degrees(np.arctan2(along_y, along_x)))
    assert max(abs(a) for a in angles) <= 30 + 1e-3
    assert np.ptp(angles) > 1  # a new angle per key
    with pytest.raises(ValueError, match="rotation"):
        data.train_pipeline(data.load_source("digits"), image_size=8, batch_size=8, epochs=1,
                            rotation=-5)
