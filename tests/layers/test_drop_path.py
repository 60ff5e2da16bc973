import numpy as np
import pytest

from keras_vit.layers import DropPath
from tests.helpers import to_numpy
from tests.layer_harness import run_layer_test


@pytest.mark.parametrize("rate,seed", [(0.25, 1), (0.0, None)])
def test_layer(rate, seed):
    run_layer_test(
        DropPath,
        {"rate": rate, "seed": seed},
        input_shape=(2, 5, 16),
        expected_output_shape=(2, 5, 16),
        expected_num_trainable_weights=0,
    )


def test_statistics():
    layer = DropPath(0.25, seed=3)
    x = np.ones((4000, 2), "float32")
    out = to_numpy(layer(x, training=True))
    kept = out[:, 0] > 0
    assert abs(kept.mean() - 0.75) < 0.03
    np.testing.assert_allclose(out[kept], 1 / 0.75, rtol=1e-6)
    assert (out[:, 0] == out[:, 1]).all()  # one decision per sample
    np.testing.assert_array_equal(to_numpy(layer(x)), x)


@pytest.mark.parametrize("rate", [-0.1, 1.0, "0.1", True])
def test_bad_rate(rate):
    with pytest.raises(ValueError, match="rate must be a number in"):
        DropPath(rate)
