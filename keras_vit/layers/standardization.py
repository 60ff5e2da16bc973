"""`FeatureStandardization`: `(x - bias) * scale` with stored per-channel statistics.

The output standardisation of Gemma 4's 26B/31B vision tower (timm's `std_bias` and
`std_scale` buffers, applied after its pooler): not trained (zeros and ones until loaded).
"""

import keras
from keras import ops

__all__ = ["FeatureStandardization"]


@keras.saving.register_keras_serializable(package="keras_vit")
class FeatureStandardization(keras.layers.Layer):
    """`(x - bias) * scale` over the last axis, with non-trainable `bias` and `scale`.

    Call arguments:
        inputs: features `(..., D)`, `D` the size of `bias` and `scale`.

    Returns:
        The standardized features, `(..., D)`.

    Example:

    >>> import numpy as np
    >>> tuple(FeatureStandardization()(np.ones((2, 4), "float32")).shape)
    (2, 4)
    """

    def build(self, input_shape):
        width = input_shape[-1]
        if width is None:
            raise ValueError(f"{self.name} needs a known last dimension. Received: {input_shape}")
        self.bias = self.add_weight(
            shape=(width,), initializer="zeros", trainable=False, name="bias"
        )
        self.scale = self.add_weight(
            shape=(width,), initializer="ones", trainable=False, name="scale"
        )
        self.built = True

    def call(self, inputs):
        return (inputs - ops.cast(self.bias, inputs.dtype)) * ops.cast(self.scale, inputs.dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)
