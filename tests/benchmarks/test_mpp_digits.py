"""benchmarks/mpp_digits.py's own data helpers (its NumPy/SciPy digits path, moved there from
keras_vit.quickstart when the quickstart moved to the recipe runner)."""

import importlib.util
import os

import numpy as np
import pytest

pytest.importorskip("sklearn")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def bench():
    path = os.path.join(ROOT, "benchmarks", "mpp_digits.py")
    spec = importlib.util.spec_from_file_location("mpp_digits", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_digits_split_is_fixed_and_scaled(bench):
    x_train, x_test, y_train, y_test = bench.load_digits(image_size=16)
    assert x_train.shape == (1257, 16, 16, 1) and x_test.shape == (540, 16, 16, 1)
    assert 0 <= x_train.min() and x_train.max() <= 255
    np.testing.assert_array_equal(bench.load_digits(image_size=16)[3], y_test)


def test_random_affine_identity_and_shape(bench):
    rng = np.random.default_rng(0)
    images = np.random.rand(4, 16, 16, 1).astype("float32")
    same = bench.random_affine(images, rng, max_shift=0, max_rotation=0, scale=(1, 1))
    np.testing.assert_allclose(same, images, atol=1e-6)
    moved = bench.random_affine(images, rng)
    assert moved.shape == images.shape and not np.allclose(moved, images)
