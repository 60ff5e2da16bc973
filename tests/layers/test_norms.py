"""Tests for keras_vit/layers/norms.py: Keras' RMSNormalization as timm's RmsNorm, `make_norm`."""

import keras
import numpy as np
import pytest

from keras_vit.layers import SwiGLU
from keras_vit.layers.norms import NORMS, check_norm, make_norm
from tests.helpers import to_numpy
from tests.weights.references import import_timm, import_torch

D = 16


def _np_rms(x, scale, eps):
    x = x.astype("float64")
    return x / np.sqrt(np.mean(x**2, -1, keepdims=True) + eps) * scale


def test_rms_normalization_matches_timm_and_numpy():
    """Keras' own RMSNormalization is timm's RmsNorm (epsilon inside the square root)."""
    torch = import_torch()
    import_timm()
    from timm.layers import RmsNorm

    rng = np.random.default_rng(4)
    x = rng.normal(size=(2, 5, D)).astype("float32")
    scale = rng.normal(1, 0.3, size=(D,)).astype("float32")
    layer = make_norm("rmsnorm", 1e-5, "norm")
    layer.build(x.shape)
    layer.scale.assign(scale)
    np.testing.assert_allclose(to_numpy(layer(x)), _np_rms(x, scale, 1e-5), atol=1e-5)
    # A small-magnitude input, where the epsilon's placement shows.
    small = x * 1e-3
    np.testing.assert_allclose(to_numpy(layer(small)), _np_rms(small, scale, 1e-5), atol=1e-6)
    ref = RmsNorm(D, eps=1e-5)
    with torch.no_grad():
        ref.weight.copy_(torch.from_numpy(scale))
        for inputs in (x, small):
            want = ref(torch.from_numpy(inputs)).numpy()
            np.testing.assert_allclose(to_numpy(layer(inputs)), want, atol=1e-6)


def test_rms_normalization_computes_in_float32_under_bfloat16():
    """Keras upcasts (timm's RmsNorm would compute in bfloat16): within bfloat16 rounding."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2, 3, D)).astype("float32")
    layer = make_norm("rmsnorm", 1e-6, "norm", dtype="mixed_bfloat16")
    out = layer(keras.ops.cast(x, "bfloat16"))
    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
    want = _np_rms(to_numpy(keras.ops.cast(keras.ops.cast(x, "bfloat16"), "float32")), 1.0, 1e-6)
    np.testing.assert_allclose(to_numpy(keras.ops.cast(out, "float32")), want, atol=2e-2)


def test_make_norm_kinds_and_bad_value():
    assert NORMS == ("layernorm", "rmsnorm")
    layer_norm = make_norm("layernorm", 1e-5, "a", axis=(-2, -1))
    assert isinstance(layer_norm, keras.layers.LayerNormalization)
    assert layer_norm.epsilon == 1e-5 and tuple(layer_norm.axis) == (-2, -1)
    assert isinstance(make_norm("rmsnorm", 1e-5, "b"), keras.layers.RMSNormalization)
    with pytest.raises(ValueError, match=r"norm must be one of \('layernorm', 'rmsnorm'\)"):
        check_norm("batchnorm")
    with pytest.raises(ValueError, match="Received: norm='rms'"):
        SwiGLU(8, norm="rms")
