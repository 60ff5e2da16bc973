"""`DropPath`: stochastic depth on a residual branch."""

import keras
from keras import ops

from keras_vit.layers._checks import check_rate, check_seed

__all__ = ["DropPath"]


@keras.saving.register_keras_serializable(package="keras_vit")
class DropPath(keras.layers.Layer):
    """Drops a whole residual branch per sample during training (stochastic depth).

    Kept samples are scaled by `1 / (1 - rate)` so the expectation is unchanged.

    Args:
        rate: float in [0, 1). Probability of dropping the branch for a sample.
        seed: optional int seed.

    Call arguments:
        inputs: tensor `(B, ...)`.
        training: bool; identity when False.

    Example:

    >>> import numpy as np
    >>> tuple(DropPath(0.5)(np.ones((2, 3), "float32")).shape)
    (2, 3)

    Reference:
        Huang et al., 2016, "Deep Networks with Stochastic Depth".
    """

    def __init__(self, rate, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.rate = check_rate(rate, "rate")
        self.seed = check_seed(seed)
        self.seed_generator = keras.random.SeedGenerator(seed) if self.rate > 0 else None
        self.supports_masking = True

    def call(self, inputs, training=None):
        if not training or self.rate == 0.0:
            return inputs
        keep = 1.0 - self.rate
        shape = (ops.shape(inputs)[0],) + (1,) * (len(inputs.shape) - 1)
        noise = keras.random.uniform(shape, dtype=inputs.dtype, seed=self.seed_generator)
        return inputs * ops.floor(keep + noise) / keep

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"rate": self.rate, "seed": self.seed})
        return config
