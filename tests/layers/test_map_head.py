import numpy as np
import pytest

from keras_vit.layers import MAPHead
from tests.helpers import map_head_params, np_map_head, to_numpy
from tests.layer_harness import run_layer_test

D, M = 16, 24
NUM_PARAMS = D + (D * D + D) + (D * 2 * D + 2 * D) + (D * D + D) + 2 * D + (D * M + M) + (M * D + D)


def test_layer():
    kwargs = dict(activation="quick_gelu", approximate_gelu=False, num_prefix_tokens=2)
    run_layer_test(
        MAPHead,
        {"num_heads": 2, "mlp_dim": M, **kwargs},
        input_shape=(2, 5, D),
        expected_output_shape=(2, D),
        expected_num_trainable_weights=13,
        expected_num_params=NUM_PARAMS,
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(num_prefix_tokens=0),
        dict(num_prefix_tokens=2, activation="quick_gelu", layer_norm_epsilon=1e-5),
        dict(approximate_gelu=False),
    ],
)
def test_matches_numpy(kwargs):
    x = np.random.default_rng(0).normal(size=(3, 6, D)).astype("float32")
    head = MAPHead(num_heads=4, mlp_dim=M, **kwargs)
    head.build(x.shape)
    rng = np.random.default_rng(1)
    for w in head.weights:
        value = rng.normal(0, 0.4, size=tuple(w.shape)).astype("float32")
        w.assign(value + (1.0 if w.path.endswith("gamma") else 0.0))
    params = {k: v.astype("float64") for k, v in map_head_params(head).items()}
    prefix = kwargs.get("num_prefix_tokens", 0)
    expected = np_map_head(
        x[:, prefix:].astype("float64"),
        params,
        num_heads=4,
        eps=kwargs.get("layer_norm_epsilon", 1e-6),
        activation=kwargs.get("activation", "gelu"),
        approximate_gelu=kwargs.get("approximate_gelu", True),
    )
    got = to_numpy(head(x))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
    # Every image pools its own tokens: changing one image changes only its output.
    y = x.copy()
    y[1] += 1.0
    other = to_numpy(head(y))
    np.testing.assert_allclose(other[[0, 2]], got[[0, 2]], rtol=1e-6, atol=1e-6)
    assert np.abs(other[1] - got[1]).max() > 1e-3


def test_weight_names_map_to_timm():
    head = MAPHead(num_heads=2, mlp_dim=M, name="pooling")
    head.build((None, 5, D))
    assert [(w.path, tuple(w.shape)) for w in head.weights] == [
        ("pooling/latent", (1, 1, D)),
        ("pooling/q/kernel", (D, D)),
        ("pooling/q/bias", (D,)),
        ("pooling/kv/kernel", (D, 2 * D)),
        ("pooling/kv/bias", (2 * D,)),
        ("pooling/proj/kernel", (D, D)),
        ("pooling/proj/bias", (D,)),
        ("pooling/norm/gamma", (D,)),
        ("pooling/norm/beta", (D,)),
        ("pooling/mlp_fc1/kernel", (D, M)),
        ("pooling/mlp_fc1/bias", (M,)),
        ("pooling/mlp_fc2/kernel", (M, D)),
        ("pooling/mlp_fc2/bias", (D,)),
    ]


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(num_heads=0, mlp_dim=8), "num_heads"),
        (dict(num_heads=2, mlp_dim=0), "mlp_dim"),
        (dict(num_heads=2, mlp_dim=8, activation="relu"), "activation must be one of"),
        (dict(num_heads=2, mlp_dim=8, num_prefix_tokens=-1), "num_prefix_tokens"),
        (dict(num_heads=2, mlp_dim=8, layer_norm_epsilon=-1.0), "layer_norm_epsilon"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MAPHead(**kwargs)


def test_heads_must_divide_width():
    with pytest.raises(ValueError, match="hidden_dim=16, num_heads=3"):
        MAPHead(num_heads=3, mlp_dim=8).build((None, 5, 16))


def test_patch_valid_leaves_padding_out():
    """NaFlex: the query attends to the valid tokens only (timm's key-only pooling mask)."""
    x = np.random.default_rng(2).normal(size=(2, 6, D)).astype("float32")
    head = MAPHead(num_heads=2, mlp_dim=M, num_prefix_tokens=1)
    valid = np.array([[True, False, True, True, False], [True] * 5])
    got = to_numpy(head(x, patch_valid=valid))
    kept = np.concatenate([x[:1, :1], x[:1, 1:][:, valid[0]]], axis=1)
    np.testing.assert_allclose(got[0], to_numpy(head(kept))[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], to_numpy(head(x))[1], rtol=1e-5, atol=1e-6)
