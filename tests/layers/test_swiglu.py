"""Tests for keras_vit/layers/swiglu.py."""

import numpy as np
import pytest

from keras_vit.layers import SwiGLU
from tests.helpers import np_layer_norm, to_numpy
from tests.layer_harness import run_layer_test
from tests.weights.references import import_timm, import_torch

D, H = 16, 24


def _randomized(layer, shape, seed=0):
    layer.build(shape)
    rng = np.random.default_rng(seed)
    for w in layer.weights:
        offset = 1.0 if w.path.endswith("gamma") else 0.0
        w.assign(rng.normal(0, 0.3, size=tuple(w.shape)).astype("float32") + offset)
    return layer


def _np_swiglu(layer, x):
    n = lambda v: to_numpy(v).astype("float64")  # noqa: E731
    gate = x @ n(layer.gate_dense.kernel) + n(layer.gate_dense.bias)
    up = x @ n(layer.up_dense.kernel) + n(layer.up_dense.bias)
    h = gate / (1 + np.exp(-gate)) * up
    if layer.inner_norm:
        h = np_layer_norm(h, n(layer.norm.gamma), n(layer.norm.beta), layer.layer_norm_epsilon)
    return h @ n(layer.down_dense.kernel) + n(layer.down_dense.bias)


@pytest.mark.parametrize(
    "kwargs,num_weights",
    [({}, 6), (dict(inner_norm=True, layer_norm_epsilon=1e-5, dropout_rate=0.1), 8)],
)
def test_layer(kwargs, num_weights):
    params = 2 * (D * H + H) + H * D + D + (2 * H if kwargs.get("inner_norm") else 0)
    run_layer_test(
        SwiGLU,
        {"hidden_units": H, **kwargs},
        input_shape=(2, 5, D),
        expected_output_shape=(2, 5, D),
        expected_num_trainable_weights=num_weights,
        expected_num_params=params,
    )


@pytest.mark.parametrize("inner_norm", [False, True])
def test_matches_numpy(inner_norm):
    layer = _randomized(SwiGLU(H, inner_norm=inner_norm), (None, 5, D))
    x = np.random.default_rng(1).normal(size=(2, 5, D))
    np.testing.assert_allclose(
        to_numpy(layer(x.astype("float32"))), _np_swiglu(layer, x), atol=1e-4
    )


def _load_linear(dense, linear):
    dense.kernel.assign(linear.weight.detach().numpy().T)
    dense.bias.assign(linear.bias.detach().numpy())


@pytest.mark.parametrize("packed", [False, True])
def test_matches_timm(packed):
    torch = import_torch()
    import_timm()
    from timm.layers import SwiGLU as TimmSwiGLU
    from timm.layers import SwiGLUPacked

    if packed:  # one fc1 of width 2H: the first half is the gate (GluMlp(gate_last=False))
        ref = SwiGLUPacked(D, 2 * H).eval()
    else:  # EVA-02's sub-LN variant
        ref = TimmSwiGLU(D, H, norm_layer=torch.nn.LayerNorm).eval()
    rng = np.random.default_rng(2)
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.from_numpy(rng.normal(0.5 if p.ndim == 1 else 0, 0.3, size=p.shape)))
    layer = SwiGLU(H, inner_norm=not packed, layer_norm_epsilon=1e-5)
    layer.build((None, 5, D))
    if packed:
        weight, bias = ref.fc1.weight.detach().numpy(), ref.fc1.bias.detach().numpy()
        layer.gate_dense.kernel.assign(weight[:H].T)
        layer.gate_dense.bias.assign(bias[:H])
        layer.up_dense.kernel.assign(weight[H:].T)
        layer.up_dense.bias.assign(bias[H:])
    else:
        _load_linear(layer.gate_dense, ref.fc1_g)
        _load_linear(layer.up_dense, ref.fc1_x)
        layer.norm.gamma.assign(ref.norm.weight.detach().numpy())
        layer.norm.beta.assign(ref.norm.bias.detach().numpy())
    _load_linear(layer.down_dense, ref.fc2)
    x = np.random.default_rng(3).normal(size=(2, 5, D)).astype("float32")
    with torch.no_grad():
        want = ref(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(to_numpy(layer(x)), want, atol=1e-5)


def test_bad_arguments():
    with pytest.raises(ValueError, match="hidden_units"):
        SwiGLU(0)
    with pytest.raises(ValueError, match="inner_norm"):
        SwiGLU(8, inner_norm="yes")

