"""`ClippedDense`: a dense projection whose input and output may be clamped to stored bounds.

Gemma 4's E2B/E4B vision tower clamps the input and the output of every projection to bounds
its checkpoint stores (timm's `Gemma4ClippableLinear`: four scalar buffers, -inf / +inf until
loaded). With `clip=False` it is a plain dense layer.
"""

import keras
from keras import ops

from keras_vit.layers._checks import check_bool, check_positive_int

__all__ = ["ClippedDense"]

BOUNDS = ("input_min", "input_max", "output_min", "output_max")


@keras.saving.register_keras_serializable(package="keras_vit")
class ClippedDense(keras.layers.Layer):
    """`clamp(clamp(x, input_min, input_max) @ kernel [+ bias], output_min, output_max)`.

    Args:
        units: int. Output width.
        use_bias: bool. Defaults to False.
        clip: bool. Whether the four non-trainable scalar bounds `input_min`, `input_max`,
            `output_min`, `output_max` (initialised to -inf, +inf: no clamp) exist and apply.
            Defaults to False.

    Call arguments:
        inputs: `(..., D)`.

    Returns:
        `(..., units)`.

    Example:

    >>> import numpy as np
    >>> tuple(ClippedDense(4, clip=True)(np.ones((2, 3), "float32")).shape)
    (2, 4)
    """

    def __init__(self, units, use_bias=False, clip=False, **kwargs):
        super().__init__(**kwargs)
        self.units = check_positive_int(units, "units")
        self.use_bias = check_bool(use_bias, "use_bias")
        self.clip = check_bool(clip, "clip")

    def build(self, input_shape):
        width = input_shape[-1]
        if width is None:
            raise ValueError(f"{self.name} needs a known last dimension. Received: {input_shape}")
        self.kernel = self.add_weight(
            shape=(width, self.units),
            initializer=keras.initializers.TruncatedNormal(stddev=0.02),
            name="kernel",
        )
        if self.use_bias:
            self.bias = self.add_weight(shape=(self.units,), initializer="zeros", name="bias")
        if self.clip:
            for bound in BOUNDS:
                value = float("-inf") if bound.endswith("min") else float("inf")
                weight = self.add_weight(
                    shape=(),
                    initializer=keras.initializers.Constant(value),
                    trainable=False,
                    name=bound,
                )
                setattr(self, bound, weight)
        self.built = True

    def _clamp(self, x, low, high):
        return ops.minimum(ops.maximum(x, ops.cast(low, x.dtype)), ops.cast(high, x.dtype))

    def call(self, inputs):
        x = inputs
        if self.clip:
            x = self._clamp(x, self.input_min, self.input_max)
        x = ops.matmul(x, ops.cast(self.kernel, x.dtype))
        if self.use_bias:
            x = x + ops.cast(self.bias, x.dtype)
        if self.clip:
            x = self._clamp(x, self.output_min, self.output_max)
        return x

    def compute_output_shape(self, input_shape):
        return (*tuple(input_shape)[:-1], self.units)

    def get_config(self):
        config = super().get_config()
        config.update({"units": self.units, "use_bias": self.use_bias, "clip": self.clip})
        return config
