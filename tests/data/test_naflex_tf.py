"""keras_vit/data/naflex_tf.py: NaFlex batching in tf.data against the NumPy `naflex_batch`.

The NumPy path is itself tested against timm's NaFlex pipeline (tests/data/test_naflex.py);
here the graph path must give the same sizes (400 random image sizes over four patch sizes and
budgets), the same resize matrices, and the same batches (float32 rounding of the resize), and
feed `model.fit` on the active backend.
"""

import keras
import numpy as np
import pytest

from keras_vit import ViT
from keras_vit.data import naflex_batch, naflex_image_size
from keras_vit.data._imports import import_tf
from keras_vit.data.naflex_tf import (
    _binary_search_target,
    _closed_form_target,
    naflex_dataset,
    naflex_example,
    naflex_size,
    resize_matrix,
)
from keras_vit.layers.patch_resize import linear_resize_matrix
from keras_vit.preprocessing import scale_pixels
from tests.helpers import backend_independent

tf = import_tf()
RNG = np.random.default_rng(0)
IMAGES = [RNG.integers(0, 256, size + (3,)).astype("uint8") for size in
          [(30, 61), (64, 32), (7, 90), (100, 100), (8, 8)]]  # fmt: skip


def _dataset(images, labels=None):
    ds = tf.data.Dataset.from_generator(
        lambda: iter(images), output_signature=tf.TensorSpec((None, None, 3), tf.uint8)
    )
    if labels is None:
        return ds
    return tf.data.Dataset.zip((ds, tf.data.Dataset.from_tensor_slices(labels)))


@backend_independent  # TensorFlow ops only, whatever the Keras backend
@pytest.mark.parametrize("patch, budget", [(4, 1), (14, 37), (16, 256), ((8, 16), 600)])
def test_sizes_equal_numpy_on_random_images(patch, budget):
    sizes = RNG.integers(1, 1500, (100, 2)).astype("int32")
    ds = tf.data.Dataset.from_tensor_slices(sizes).map(lambda hw: naflex_size(hw, patch, budget))
    got = np.stack([size.numpy() for size in ds])
    expected = np.array([naflex_image_size(hw, patch, budget) for hw in sizes])
    mismatch = np.flatnonzero((got != expected).any(axis=1))
    assert not len(mismatch), (
        f"image {sizes[mismatch[0]]}: {got[mismatch[0]]} != {expected[mismatch[0]]}"
    )


@backend_independent
def test_closed_form_size_equals_the_search_away_from_edges():
    # naflex_size takes the closed form unless it flags the image near an edge (then the
    # unrolled search): both branches run on these sizes, and agree wherever the closed form
    # is taken
    sizes = np.concatenate([RNG.integers(1, 1500, (300, 2)), [[16, 16], [1, 1], [5000, 3]]])

    def both(hw):
        target, near_edge = _closed_form_target(hw, (16, 16), 64)
        searched = _binary_search_target(*tf.unstack(tf.cast(hw, "float64")), (16.0, 16.0), 64)
        return tf.stack(target), tf.stack(searched), near_edge

    ds = tf.data.Dataset.from_tensor_slices(sizes.astype("int32")).map(both)
    rows = [[t.numpy() for t in element] for element in ds]
    closed, searched, edge = (np.stack([row[i] for row in rows]) for i in range(3))
    assert 0 < edge.sum() < len(sizes) // 4, edge.sum()
    np.testing.assert_array_equal(closed[~edge], searched[~edge])


@backend_independent
@pytest.mark.parametrize("sizes", [(5, 17), (100, 24), (24, 24), (3, 1), (1, 7)])
def test_resize_matrix_equals_numpy(sizes):
    expected = linear_resize_matrix(*sizes)
    np.testing.assert_allclose(resize_matrix(*sizes).numpy(), expected, atol=1e-6)


@backend_independent
@pytest.mark.parametrize("patch_size, budget", [(8, 24), ((4, 8), 30)])
def test_batches_equal_numpy(patch_size, budget):
    ds = naflex_dataset(_dataset(IMAGES), patch_size, budget, len(IMAGES), preprocess=scale_pixels)
    got = next(iter(ds))
    expected = naflex_batch([scale_pixels(i.astype("float32")) for i in IMAGES], patch_size,
                            budget)  # fmt: skip
    assert set(got) == set(expected)
    np.testing.assert_array_equal(got["patch_valid"].numpy(), expected["patch_valid"])
    np.testing.assert_array_equal(got["patch_coord"].numpy(), expected["patch_coord"])
    assert got["patch_coord"].dtype == tf.int32
    # tf.image.resize's float32 antialiased bilinear: within 1.5e-5 of the float64 matrices on
    # these images, as PyTorch's own float32 F.interpolate (1e-5 off them here)
    np.testing.assert_allclose(got["patches"].numpy(), expected["patches"], atol=2e-5)


@backend_independent
def test_unpreprocessed_and_float_images():
    image = IMAGES[0].astype("float32") / 255.0
    got = naflex_example(image, 8, 24)
    expected = naflex_batch([image], 8, 24)
    np.testing.assert_allclose(got["patches"].numpy(), expected["patches"][0], atol=2e-5)


@backend_independent
def test_bad_input():
    with pytest.raises(ValueError, match="known channel count"):
        naflex_dataset(tf.data.Dataset.from_tensors(np.zeros((4, 4), "uint8")), 4, 8, 2)
    with pytest.raises(ValueError, match="max_patches"):
        naflex_example(IMAGES[0], 4, 0)


@pytest.mark.slow  # 7-47 s on a loaded 2-core machine (JAX's first compile of a NaFlex step)
def test_fit_on_the_active_backend():
    ds = naflex_dataset(_dataset(IMAGES[:2], [0, 1]), 8, 16, 2, preprocess=scale_pixels)
    model = ViT("mu/8", image_size=16, num_layers=1, num_classes=2, naflex=True, pooling="gap",
                class_token=False)  # fmt: skip
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(ds, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
