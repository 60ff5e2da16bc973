import keras
import numpy as np
import pytest

from keras_vit.layers import TokenGrid
from tests.helpers import check_config_complete, roundtrip_model, to_numpy


def test_reshapes_patch_tokens_onto_the_grid():
    tokens = np.random.rand(2, 2 + 2 * 3, 5).astype("float32")
    images = np.zeros((2, 8, 12, 3), "float32")
    layer = TokenGrid((4, 4), num_prefix_tokens=2)
    out = to_numpy(layer(tokens, images))
    np.testing.assert_array_equal(out, tokens[:, 2:].reshape(2, 2, 3, 5))
    assert layer.compute_output_shape((None, 8, 5), (None, 8, 12, 3)) == (None, 2, 3, 5)
    assert layer.compute_output_shape((None, None, 5), (None, None, None, 3)) == (
        None,
        None,
        None,
        5,
    )


def test_config_and_keras_roundtrip_with_a_dynamic_grid(tmp_path):
    layer = TokenGrid(4, num_prefix_tokens=1)
    check_config_complete(layer)
    tokens = keras.Input((None, 5))
    images = keras.Input((None, None, 3))
    model = keras.Model([tokens, images], TokenGrid(4, 1)(tokens, images))
    x = [np.random.rand(2, 1 + 6, 5).astype("float32"), np.zeros((2, 8, 12, 3), "float32")]
    loaded = roundtrip_model(model, x, tmp_path)
    assert tuple(loaded(x).shape) == (2, 2, 3, 5)


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_prefix_tokens"):
        TokenGrid(4, num_prefix_tokens=-1)
    with pytest.raises(ValueError, match="patch_size"):
        TokenGrid(0)
