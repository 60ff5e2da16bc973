"""The pixels `model.preprocessor` and `keras_vit.preprocess_input` take: one rule for both
(`keras_vit/layers/_pixel_checks.py`), each misuse a ValueError saying what to do (issue 56);
`preprocess_input` returns what it was given (NumPy for NumPy); `tf.data` maps work on every
backend, equal to the backend's own path."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.layers import ImagePreprocessor
from keras_vit.models.config import ViTConfig
from tests.helpers import to_numpy

SPEC = dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))  # per-channel (ImageNet)


@pytest.fixture(scope="module")
def preprocessor():
    return ImagePreprocessor(8, num_channels=3, **SPEC)


def rgb(dtype="uint8", value=100, shape=(1, 12, 10, 3)):
    return np.full(shape, value, dtype)


REFUSED = [
    ("uint16 above 255", rgb("uint16", 1000), "values from 1000 to 1000"),
    ("int32 above 255", rgb("int32", 300), "values from 300 to 300"),
    ("int8 negative", rgb("int8", -50), "values from -50 to -50"),
    ("bool", rgb(bool, True), "dtype=bool"),
    ("strings", np.full((1, 4, 4, 3), "a"), "dtype=str"),
    ("floats in [0, 1]", np.linspace(0, 1, 48, dtype="float32").reshape(1, 4, 4, 3), r"\[0, 1\]"),
    ("normalised floats", rgb("float32", -0.5), "already normalised"),
    ("NaN", rgb("float32", np.nan), "NaN"),
]  # fmt: skip


@pytest.mark.parametrize("case, images, message", REFUSED, ids=[c[0] for c in REFUSED])
def test_bad_pixels_are_refused_alike_by_both(preprocessor, case, images, message):
    with pytest.raises(ValueError, match=message):
        preprocessor(images)
    with pytest.raises(ValueError, match=message):
        keras_vit.preprocess_input(images)


SHAPES = [
    ("grey", (1, 12, 10, 1), "repeat it to three channels"),
    ("RGBA", (1, 12, 10, 4), "drop the alpha channel"),
    ("two channels", (1, 12, 10, 2), r"Received: shape=\(1, 12, 10, 2\) \(2 channels\)"),
    ("channels first", (1, 3, 12, 10), "channels-first"),
    ("rank 2", (12, 10), "add one, x\\[..., None\\]"),
    ("empty side", (1, 0, 10, 3), "an empty side"),
]


@pytest.mark.parametrize("case, shape, message", SHAPES, ids=[c[0] for c in SHAPES])
def test_shapes_that_are_not_the_models_images(preprocessor, case, shape, message):
    with pytest.raises(ValueError, match=message):
        preprocessor(np.zeros(shape, "uint8"))
    if case not in ("rank 2", "empty side"):  # preprocess_input takes any shape without a model
        config = ViTConfig.from_variant("mu/8", image_size=16)  # a model's config: 3 channels
        with pytest.raises(ValueError, match=message):
            keras_vit.preprocess_input(np.zeros(shape, "uint8"), model=config)


def test_integers_and_lists_holding_pixels_equal_uint8(preprocessor):
    image = np.random.default_rng(0).integers(0, 256, (2, 12, 10, 3)).astype("uint8")
    expected = to_numpy(preprocessor(image))
    for same in (image.astype("int32"), image.astype("int64"), image.tolist()):
        np.testing.assert_array_equal(to_numpy(preprocessor(same)), expected)
    np.testing.assert_array_equal(
        keras_vit.preprocess_input(image.tolist()), keras_vit.preprocess_input(image)
    )


def test_preprocess_input_returns_numpy_for_numpy():
    image = np.arange(12, dtype="uint8").reshape(1, 2, 2, 3)
    out = keras_vit.preprocess_input(image)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    np.testing.assert_array_equal(out, image / np.float32(127.5) - 1)
    tensor = keras_vit.preprocess_input(keras.ops.convert_to_tensor(image))
    assert not isinstance(tensor, np.ndarray)  # a backend tensor for a backend tensor
    np.testing.assert_array_equal(to_numpy(tensor), out)


def test_tf_data_map_works_on_every_backend_and_equals_the_backend_path(preprocessor):
    """The TensorFlow-ops adapter (a tf.Tensor on the JAX or PyTorch backend) gives the
    keras.ops path's numbers; on TensorFlow the layer runs as usual inside the graph."""
    tf = pytest.importorskip("tensorflow")
    images = np.random.default_rng(1).integers(0, 256, (3, 20, 14, 3)).astype("uint8")
    dataset = tf.data.Dataset.from_tensor_slices(images).batch(3)
    mapped = np.asarray(next(iter(dataset.map(preprocessor))))
    # uint8 images are rounded to pixel levels after each resize pass (PIL's arithmetic): a
    # float32 tie can round one level apart between TensorFlow's and another backend's einsum.
    level = 1.001 / 255 / min(SPEC["std"])
    diff = np.abs(mapped - to_numpy(preprocessor(images)))
    assert diff.max() <= level and diff.mean() < level / 50, (diff.max(), diff.mean())
    scaled = next(iter(dataset.map(keras_vit.preprocess_input)))
    np.testing.assert_allclose(np.asarray(scaled), images / 127.5 - 1, atol=1e-6)
    with pytest.raises(ValueError, match="inside a traced"):
        next(iter(dataset.map(lambda x: preprocessor(tf.cast(x, "int32")))))
