"""`StdConv2D`: the weight-standardised convolution of BiT and the official hybrid ViTs."""

import keras
from keras import ops

__all__ = ["StdConv2D"]
from keras_vit.layers._checks import check_bool

STD_CONV_EPSILON = 1e-5
EPSILON_MODES = ("std", "variance")


@keras.saving.register_keras_serializable(package="keras_vit")
class StdConv2D(keras.layers.Conv2D):
    """2D convolution with weight standardisation (BiT / the official hybrid ViT).

    The stored raw kernel `w` (shape `(kh, kw, C_in, C_out)`, the official
    layout) is standardised at every call, per output channel over
    `(kh, kw, C_in)`:

        w_hat = (w - mean(w)) / (std(w) + epsilon)

    with the population standard deviation, exactly as `weight_standardize` in
    the official `vit_jax/models_resnet.py` (`epsilon=1e-5` added to the
    standard deviation, not to the variance). With `epsilon_mode="variance"`
    the epsilon goes under the square root instead,
    `w_hat = (w - mean(w)) / sqrt(var(w) + epsilon)`: timm's `StdConv2dSame`
    (`epsilon=1e-8` in its hybrid ViTs), which `keras_vit.from_timm` uses. The
    standardisation is computed in float32 and cast to the compute dtype, so
    mixed precision keeps it accurate. Official checkpoints store the raw
    kernel, which loads as is.

    Args:
        filters: int. Output channels.
        kernel_size: int or (height, width).
        strides: int or (height, width). Defaults to 1.
        padding: `"same"` (the official models) or `"valid"`. Defaults to `"same"`.
        data_format, dilation_rate, groups, activation, kernel_initializer,
            bias_initializer, kernel_regularizer, bias_regularizer,
            activity_regularizer, kernel_constraint, bias_constraint: as in
            `keras.layers.Conv2D`.
        use_bias: bool. Defaults to False (the official stem has no conv biases).
        kernel_initializer: Defaults to `"lecun_normal"` (Flax's default).
        epsilon: float. Added to the standard deviation (or the variance).
            Defaults to 1e-5.
        epsilon_mode: `"std"` (official: `std + epsilon`) or `"variance"`
            (timm: `sqrt(var + epsilon)`). Defaults to `"std"`.

    Call arguments:
        inputs: `(B, H, W, C_in)` (channels_last).

    Returns:
        `(B, H', W', filters)`.

    Example:

    >>> import numpy as np
    >>> tuple(StdConv2D(8, 3, strides=2)(np.ones((1, 16, 16, 3), "float32")).shape)
    (1, 8, 8, 8)

    Reference:
        Qiao et al., 2019, "Weight Standardization"; Kolesnikov et al., 2020,
        "Big Transfer (BiT)", Sec. 4.3; Dosovitskiy et al., 2021, Sec. 3.1.
    """

    def __init__(
        self,
        filters,
        kernel_size,
        strides=(1, 1),
        padding="same",
        data_format=None,
        dilation_rate=(1, 1),
        groups=1,
        activation=None,
        use_bias=False,
        kernel_initializer="lecun_normal",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        epsilon=STD_CONV_EPSILON,
        epsilon_mode="std",
        **kwargs,
    ):
        use_bias = check_bool(use_bias, "use_bias")
        super().__init__(
            filters=filters,
            kernel_size=kernel_size,
            strides=strides,
            padding=padding,
            data_format=data_format,
            dilation_rate=dilation_rate,
            groups=groups,
            activation=activation,
            use_bias=use_bias,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
            **kwargs,
        )
        if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or epsilon <= 0:
            raise ValueError(f"epsilon must be a positive number. Received: epsilon={epsilon!r}")
        self.epsilon = float(epsilon)
        if epsilon_mode not in EPSILON_MODES:
            raise ValueError(
                f"epsilon_mode must be one of {EPSILON_MODES}. "
                f"Received: epsilon_mode={epsilon_mode!r}"
            )
        self.epsilon_mode = epsilon_mode

    def standardize(self, kernel):
        """Returns `kernel` standardised per output channel, computed in float32."""
        w = ops.cast(kernel, "float32")
        w = w - ops.mean(w, axis=(0, 1, 2), keepdims=True)
        variance = ops.mean(ops.square(w), axis=(0, 1, 2), keepdims=True)
        if self.epsilon_mode == "variance":
            return w / ops.sqrt(variance + self.epsilon)
        return w / (ops.sqrt(variance) + self.epsilon)

    def standardized_kernel(self):
        """The kernel this layer actually convolves with (float32 tensor)."""
        return self.standardize(self.kernel)

    def convolution_op(self, inputs, kernel):
        kernel = ops.cast(self.standardize(kernel), self.compute_dtype)
        return super().convolution_op(inputs, kernel)

    def get_config(self):
        config = super().get_config()
        config["epsilon"] = self.epsilon
        config["epsilon_mode"] = self.epsilon_mode
        return config
