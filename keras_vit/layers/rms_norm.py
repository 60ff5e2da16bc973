"""`RMSNorm`: root-mean-square normalisation whose learned scale is optional.

`keras.layers.RMSNormalization` always has a scale; a value norm (Gemma 4's attention
normalises its values with no gain) has none. `x * rsqrt(mean(x^2) + epsilon) [* scale]` over
the last axis, computed in at least float32 (timm's `RmsNorm` with `affine=True` or False).
"""

import keras
from keras import ops

from keras_vit.layers._checks import check_bool
from keras_vit.layers.attention import check_epsilon

__all__ = ["RMSNorm"]


def rms_normalize(x, epsilon):
    """`x * rsqrt(mean(x^2, -1) + epsilon)`, in at least float32, cast back to `x`'s dtype."""
    dtype = x.dtype
    y = ops.cast(x, "float32") if dtype in ("float16", "bfloat16") else x
    y = y * ops.rsqrt(ops.mean(ops.square(y), axis=-1, keepdims=True) + epsilon)
    return ops.cast(y, dtype)


@keras.saving.register_keras_serializable(package="keras_vit")
class RMSNorm(keras.layers.Layer):
    """RMS normalisation over the last axis, with or without a learned scale.

    Args:
        epsilon: float > 0. Added to the mean square. Defaults to 1e-6.
        scale: bool. Whether a learned per-channel scale (`scale`, ones) multiplies the result.
            Defaults to True.

    Call arguments:
        inputs: `(..., D)`.

    Returns:
        `(..., D)`.

    Example:

    >>> import numpy as np
    >>> tuple(RMSNorm(scale=False)(np.ones((2, 3, 4), "float32")).shape)
    (2, 3, 4)

    Reference:
        Zhang and Sennrich, 2019 (Root Mean Square Layer Normalization), Eq. 4.
    """

    def __init__(self, epsilon=1e-6, scale=True, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = check_epsilon(epsilon, "epsilon")
        self.scale = check_bool(scale, "scale")

    def build(self, input_shape):
        width = input_shape[-1]
        if width is None:
            raise ValueError(f"{self.name} needs a known last dimension. Received: {input_shape}")
        if self.scale:
            self.gain = self.add_weight(shape=(width,), initializer="ones", name="scale")
        self.built = True

    def call(self, inputs):
        x = rms_normalize(inputs, self.epsilon)
        return x * ops.cast(self.gain, x.dtype) if self.scale else x

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update({"epsilon": self.epsilon, "scale": self.scale})
        return config
