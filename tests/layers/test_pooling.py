import numpy as np
import pytest

from keras_vit.layers import TokenPooling
from tests.helpers import to_numpy
from tests.layer_harness import run_layer_test


@pytest.mark.parametrize(
    "pooling,num_prefix_tokens", [("token", 1), ("gap", 0), ("token_distillation", 2)]
)
def test_layer(pooling, num_prefix_tokens):
    run_layer_test(
        TokenPooling,
        {"pooling": pooling, "num_prefix_tokens": num_prefix_tokens},
        input_shape=(2, 5, 16),
        expected_output_shape=(2, 16),
        expected_num_trainable_weights=0,
    )


def test_matches_numpy():
    x = np.random.rand(2, 5, 16).astype("float32")
    np.testing.assert_allclose(to_numpy(TokenPooling("token")(x)), x[:, 0])
    np.testing.assert_allclose(to_numpy(TokenPooling("gap", 1)(x)), x[:, 1:].mean(1), rtol=1e-6)
    np.testing.assert_allclose(to_numpy(TokenPooling("gap", 0)(x)), x.mean(1), rtol=1e-6)
    np.testing.assert_allclose(to_numpy(TokenPooling("gap", 3)(x)), x[:, 3:].mean(1), rtol=1e-6)
    np.testing.assert_allclose(to_numpy(TokenPooling("distillation", 2)(x)), x[:, 1])
    np.testing.assert_allclose(
        to_numpy(TokenPooling("token_distillation", 4)(x)), (x[:, 0] + x[:, 1]) / 2, rtol=1e-6
    )
    token_gap = np.concatenate([x[:, 0], x[:, 3:].mean(1)], -1)  # Dinov2ForImageClassification
    np.testing.assert_allclose(to_numpy(TokenPooling("token_gap", 3)(x)), token_gap, rtol=1e-6)
    assert TokenPooling("token_gap").compute_output_shape((2, 5, 16)) == (2, 32)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(pooling="max"), "pooling must be one of"),
        (dict(pooling="token", num_prefix_tokens=0), "num_prefix_tokens"),
        (dict(pooling="token_gap", num_prefix_tokens=0), "num_prefix_tokens"),
        (dict(pooling="gap", num_prefix_tokens=-1), "num_prefix_tokens"),
        (dict(pooling="distillation", num_prefix_tokens=1), "num_prefix_tokens >= 2"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TokenPooling(**kwargs)


def test_gap_ignores_invalid_patches():
    """NaFlex: GAP averages the valid patch tokens only (timm's global_pool_naflex)."""
    x = np.random.default_rng(0).normal(size=(2, 5, 4)).astype("float32")
    valid = np.array([[True, False, True, True], [False] * 4])
    got = to_numpy(TokenPooling("gap", num_prefix_tokens=1)(x, patch_valid=valid))
    np.testing.assert_allclose(got[0], x[0, [1, 3, 4]].mean(0), rtol=1e-6)
    np.testing.assert_array_equal(got[1], np.zeros(4))  # no valid patch: zeros, not NaN
    both = to_numpy(TokenPooling("token_gap")(x, patch_valid=valid))
    np.testing.assert_allclose(both[0], np.concatenate([x[0, 0], got[0]]), rtol=1e-6)
    token = TokenPooling("token")(x, patch_valid=valid)
    np.testing.assert_array_equal(to_numpy(token), x[:, 0])
