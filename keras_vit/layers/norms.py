"""The norm layers of the ViT: LayerNorm or RMSNorm, chosen by one `norm` option.

`make_norm("layernorm" | "rmsnorm", epsilon, ...)` is how every layer of keras_vit makes a
norm (blocks, attention QK / inner norms, SwiGLU inner norm, MAP head, patch, pre, final and
fc norms), so that a model's `norm` option reaches all of them.

RMSNorm is Keras' own `keras.layers.RMSNormalization`: `x * rsqrt(mean(x^2) + epsilon) *
scale` over the last axis (or axes), epsilon inside the square root, no bias, which is timm's
`RmsNorm` (`timm.layers.fast_norm.rms_norm`) and transformers' `Aimv2RMSNorm`. Keras computes
it in at least float32 and casts back; timm computes in the input dtype: identical in float32,
Keras the more accurate under half precision (tests/layers/test_norms.py checks both against
NumPy and timm).
"""

import keras

NORMS = ("layernorm", "rmsnorm")


def check_norm(norm):
    """`norm` if it is one of `NORMS`, else a ValueError naming them."""
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}. Received: norm={norm!r}")
    return norm


def make_norm(norm, epsilon, name, dtype=None, axis=-1):
    """A `keras.layers.LayerNormalization` or `keras.layers.RMSNormalization` (`norm`).

    Args:
        norm: `"layernorm"` (scale `gamma` and bias `beta`) or `"rmsnorm"` (scale `scale`).
        epsilon: float.
        name: str. The layer name.
        dtype: optional dtype policy. Defaults to None.
        axis: int or tuple of ints: the normalised axes. Defaults to -1.

    Example:

    >>> make_norm("rmsnorm", 1e-5, "norm").__class__.__name__
    'RMSNormalization'
    """
    check_norm(norm)
    if norm == "rmsnorm":
        return keras.layers.RMSNormalization(axis=axis, epsilon=epsilon, dtype=dtype, name=name)
    return keras.layers.LayerNormalization(axis=axis, epsilon=epsilon, dtype=dtype, name=name)
