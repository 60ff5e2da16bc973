"""Fake quantization for quantization-aware training (QAT), on every backend.

A quantization-aware `Dense` / `EinsumDense` computes its product as the integer model will:

- its input through `fake_quant` (per tensor, asymmetric, `activation_bits`: 8 by default),
  whose range `[activation_min, activation_max]` is tracked (`activation_range="ema"`: an
  exponential moving average of each training batch's min and max, non-trainable) or learned
  (`"learned"`: trainable, with the gradients of TensorFlow's `FakeQuantWithMinMaxVars`);
- its kernel through `fake_quant_weights` (symmetric, one scale `max|w| / (2^(b-1) - 1)` per
  output channel, integers in `[-(2^(b-1) - 1), 2^(b-1) - 1]`: the scheme of onnxruntime's and
  TFLite's per-channel int8 weights, so an export recomputes the same scales). `weight_bits`
  defaults to 7 (int8 storage, values within +-63, onnxruntime's `reduce_range`): CPUs without
  VNNI sum two u8 x s8 products in 16 bits, which overflows with 8-bit weights;

both with the straight-through estimator (the rounding passes gradients through; values clipped
by the range get none). `fake_quant` is TensorFlow's `FakeQuantWithMinMaxVars` to the bit: the
range is nudged so that zero is an integer, then `floor((clip(x) - min) / scale + 0.5)`. Under
the TensorFlow backend the layer calls that op itself (`tf.quantization.
fake_quant_with_min_max_vars`, an adapter tested equal to the portable path), so the traced
graph holds the op that tf2onnx writes as QuantizeLinear / DequantizeLinear: the ONNX int8
export of a QAT model (`keras_vit.export_onnx(model, precision="int8")`) runs the ranges the
model learned.

`make_quantization_aware(layer, settings)` turns a built `Dense` / `EinsumDense` into its
quantization-aware class in place (same object, same kernel and bias, two range variables and a
flag added); `quantization_aware_settings(model)` reads the settings back (a
`VisionTransformer` writes them into its config, so `.keras` files load quantization-aware).
The user-facing function, with range calibration, is `keras_vit.quantization_aware`
(`keras_vit/training/qat.py`).

Reference:
    Jacob et al., 2018, "Quantization and Training of Neural Networks for Efficient
    Integer-Arithmetic-Only Inference", Sec. 3 (fake quantization, EMA ranges); Krishnamoorthi,
    2018, "Quantizing deep convolutional networks for efficient inference", Sec. 3.
"""

import keras
from keras import ops

ACTIVATION_RANGES = ("ema", "learned")
DEFAULTS = dict(weight_bits=7, activation_bits=8, activation_range="ema", ema_decay=0.99)
# The smallest range kept, so that an all-zero input never divides by zero.
_MIN_RANGE = 1e-6
_QAT_VARIABLES = ("activation_min", "activation_max", "range_initialized")


def check_settings(weight_bits, activation_bits, activation_range, ema_decay):
    """Returns the settings as a dict, or raises a ValueError naming the bad one."""
    for name, bits in (("weight_bits", weight_bits), ("activation_bits", activation_bits)):
        if isinstance(bits, bool) or not isinstance(bits, int) or not 2 <= bits <= 8:
            raise ValueError(f"{name} must be an int in [2, 8]. Received: {name}={bits!r}")
    if activation_range not in ACTIVATION_RANGES:
        raise ValueError(
            f"activation_range must be one of {ACTIVATION_RANGES}. Received: "
            f"activation_range={activation_range!r}"
        )
    if isinstance(ema_decay, bool) or not isinstance(ema_decay, (int, float)) or not (
        0.0 <= ema_decay < 1.0
    ):
        raise ValueError(f"ema_decay must be a number in [0, 1). Received: ema_decay={ema_decay!r}")
    return dict(
        weight_bits=weight_bits,
        activation_bits=activation_bits,
        activation_range=activation_range,
        ema_decay=float(ema_decay),
    )


def _range(minimum, maximum):
    """The range fake quantization uses: it holds zero and is at least `_MIN_RANGE` wide."""
    low = ops.minimum(minimum, 0.0)
    return low, ops.maximum(ops.maximum(maximum, 0.0), low + _MIN_RANGE)


def fake_quant(x, minimum, maximum, num_bits=8):
    """TensorFlow's `FakeQuantWithMinMaxVars` in `keras.ops` (values and gradients).

    `x` is quantized to `2^num_bits` levels between `minimum` and `maximum` (nudged so that zero
    is a level), then dequantized. Gradients: 1 for `x` inside the nudged range, 0 outside; the
    clipped values' gradients go to `minimum` (below) and `maximum` (above).

    Args:
        x: float tensor.
        minimum, maximum: float scalars (the range; it is widened to hold zero).
        num_bits: int in [2, 16]. Defaults to 8.

    Returns:
        float32 tensor of `x`'s shape.

    Example:

    >>> import numpy as np
    >>> y = fake_quant(np.array([-1.0, 0.004, 0.3, 2.0]), -1.0, 1.0)
    >>> [round(float(v), 4) for v in y]
    [-0.9961, 0.0078, 0.298, 1.0039]
    """
    x = ops.cast(x, "float32")
    quant_max = float(2**num_bits - 1)
    minimum, maximum = _range(ops.cast(minimum, "float32"), ops.cast(maximum, "float32"))
    scale = (maximum - minimum) / quant_max
    zero_point = ops.clip(ops.floor(-minimum / scale + 0.5), 0.0, quant_max)
    nudged_min = minimum + ops.stop_gradient(-zero_point * scale - minimum)
    nudged_max = maximum + ops.stop_gradient((quant_max - zero_point) * scale - maximum)
    clamped = ops.minimum(ops.maximum(x, nudged_min), nudged_max)
    inverse = 1.0 / scale
    levels = ops.floor((clamped - nudged_min) * inverse + 0.5)
    return clamped + ops.stop_gradient(levels * scale + nudged_min - clamped)


def _tf_fake_quant(x, minimum, maximum, num_bits=8):
    """The TensorFlow adapter of `fake_quant`: the op itself (converters read it)."""
    import tensorflow as tf

    minimum, maximum = _range(tf.cast(minimum, "float32"), tf.cast(maximum, "float32"))
    return tf.quantization.fake_quant_with_min_max_vars(
        tf.cast(x, "float32"), minimum, maximum, num_bits=num_bits, narrow_range=False
    )


def fake_quant_weights(kernel, reduce_axes, num_bits=8):
    """Symmetric per-channel fake quantization of a kernel (straight-through gradient).

    Each output channel (the axes not in `reduce_axes`) gets the scale `max|w| / q`, `q =
    2^(num_bits-1) - 1`, and integers in `[-q, q]`.

    Example:

    >>> import numpy as np
    >>> w = np.array([[0.5, -2.0], [0.26, 1.0]], "float32")
    >>> np.round(np.asarray(fake_quant_weights(w, (0,), num_bits=2)), 3).tolist()
    [[0.5, -2.0], [0.5, 0.0]]
    """
    kernel = ops.cast(kernel, "float32")
    levels = float(2 ** (num_bits - 1) - 1)
    scale = ops.maximum(ops.max(ops.abs(kernel), axis=reduce_axes, keepdims=True), 1e-12) / levels
    quantized = ops.clip(ops.round(kernel / scale), -levels, levels) * scale
    return kernel + ops.stop_gradient(quantized - kernel)


def kernel_reduce_axes(layer):
    """The kernel axes a layer sums over (input axes): `(0,)` for `Dense`, the equation's
    kernel letters missing from its output for `EinsumDense`."""
    if isinstance(layer, keras.layers.EinsumDense):
        inputs, output = layer.equation.split("->")
        kernel = inputs.split(",")[1].strip()
        return tuple(i for i, letter in enumerate(kernel) if letter not in output)
    return (0,)


class QuantizationAware:
    """What the quantization-aware `Dense` and `EinsumDense` share (settings, ranges, calls)."""

    def _set_quantization_aware(self, settings):
        settings = check_settings(**{**DEFAULTS, **settings})
        for key, value in settings.items():
            setattr(self, key, value)
        self._calibrating = False

    def _build_quantization_aware(self):
        learned = self.activation_range == "learned"
        self.activation_min = self.add_weight(
            name="activation_min", shape=(), initializer="zeros", trainable=learned
        )
        self.activation_max = self.add_weight(
            name="activation_max", shape=(), initializer="zeros", trainable=learned
        )
        self.range_initialized = self.add_weight(
            name="range_initialized", shape=(), initializer="zeros", trainable=False
        )

    def quantization_aware_config(self):
        return {key: getattr(self, key) for key in DEFAULTS}

    def quantize(self, mode=None, *args, **kwargs):
        raise ValueError(
            f"Layer {self.name!r} is quantization-aware (fake-quantized int"
            f"{self.weight_bits} weights): quantizing it again would quantize twice. Export it "
            "with keras_vit.export_onnx(model, precision='int8'), or quantize the float model. "
            f"Received: mode={mode!r}"
        )

    def _fake_quant_inputs(self, inputs, training):
        x = ops.cast(inputs, "float32")
        if self._calibrating:  # `keras_vit.quantization_aware`'s calibration pass (eager)
            low, high = ops.min(x), ops.max(x)
            seen = self.range_initialized > 0
            self.activation_min.assign(ops.where(seen, ops.minimum(self.activation_min, low), low))
            self.activation_max.assign(
                ops.where(seen, ops.maximum(self.activation_max, high), high)
            )
            self.range_initialized.assign(1.0)
        elif training and self.activation_range == "ema":
            low, high = ops.stop_gradient(ops.min(x)), ops.stop_gradient(ops.max(x))
            seen = self.range_initialized > 0
            decay = self.ema_decay
            self.activation_min.assign(
                ops.where(seen, decay * self.activation_min + (1 - decay) * low, low)
            )
            self.activation_max.assign(
                ops.where(seen, decay * self.activation_max + (1 - decay) * high, high)
            )
            self.range_initialized.assign(1.0)
        quantize = _tf_fake_quant if keras.backend.backend() == "tensorflow" else fake_quant
        y = quantize(x, self.activation_min, self.activation_max, self.activation_bits)
        return ops.cast(y, self.compute_dtype)

    def _fake_quant_kernel(self):
        kernel = fake_quant_weights(self.kernel, kernel_reduce_axes(self), self.weight_bits)
        return ops.cast(kernel, self.compute_dtype)

    def _finish(self, x):
        if self.bias is not None:
            x = ops.add(x, self.bias)
        if self.activation is not None:
            x = self.activation(x)
        return x

    def _base_count(self):
        return 1 + int(self.bias is not None)

    def save_own_variables(self, store):
        super().save_own_variables(store)
        if self.built:
            for i, name in enumerate(_QAT_VARIABLES):
                store[str(self._base_count() + i)] = getattr(self, name)

    def load_own_variables(self, store):
        super().load_own_variables(store)
        if self.built:
            for i, name in enumerate(_QAT_VARIABLES):
                getattr(self, name).assign(store[str(self._base_count() + i)])

    # (the mixin comes first in the layers' bases: these wrap the Keras layer's own)
    def build(self, input_shape):
        super().build(input_shape)
        self._build_quantization_aware()

    def get_config(self):
        return {**super().get_config(), **self.quantization_aware_config()}


@keras.saving.register_keras_serializable(package="keras_vit")
class QuantizationAwareDense(QuantizationAware, keras.layers.Dense):
    """A `keras.layers.Dense` with fake-quantized input and kernel (see the module docstring).

    Args:
        weight_bits: int in [2, 8]. Defaults to 7 (see the module docstring).
        activation_bits: int in [2, 8]. Defaults to 8.
        activation_range: `"ema"` (tracked) or `"learned"`. Defaults to `"ema"`.
        ema_decay: float in [0, 1). Defaults to 0.99.
        **kwargs: `keras.layers.Dense`'s arguments.
    """

    def __init__(self, units, *, weight_bits=7, activation_bits=8, activation_range="ema",
                 ema_decay=0.99, **kwargs):
        super().__init__(units, **kwargs)
        self._set_quantization_aware(
            dict(weight_bits=weight_bits, activation_bits=activation_bits,
                 activation_range=activation_range, ema_decay=ema_decay)
        )

    def call(self, inputs, training=None):
        x = self._fake_quant_inputs(inputs, training)
        return self._finish(ops.matmul(x, self._fake_quant_kernel()))


@keras.saving.register_keras_serializable(package="keras_vit")
class QuantizationAwareEinsumDense(QuantizationAware, keras.layers.EinsumDense):
    """A `keras.layers.EinsumDense` with fake-quantized input and kernel (per output channel:
    the kernel axes the equation keeps). Arguments as `QuantizationAwareDense`."""

    def __init__(self, equation, output_shape, *, weight_bits=7, activation_bits=8,
                 activation_range="ema", ema_decay=0.99, **kwargs):
        super().__init__(equation, output_shape, **kwargs)
        self._set_quantization_aware(
            dict(weight_bits=weight_bits, activation_bits=activation_bits,
                 activation_range=activation_range, ema_decay=ema_decay)
        )

    def call(self, inputs, training=None):
        x = self._fake_quant_inputs(inputs, training)
        return self._finish(ops.einsum(self.equation, x, self._fake_quant_kernel()))


_CLASSES = {
    keras.layers.Dense: QuantizationAwareDense,
    keras.layers.EinsumDense: QuantizationAwareEinsumDense,
}


def convertible_layers(model):
    """The model's plain (float, no LoRA) `Dense` / `EinsumDense` layers, every depth."""
    return [
        layer
        for layer in model._flatten_layers(include_self=False)
        if type(layer) in _CLASSES
    ]


def quantization_aware_layers(model):
    return [
        layer
        for layer in model._flatten_layers(include_self=False)
        if isinstance(layer, QuantizationAware)
    ]


def is_quantization_aware(model):
    """Whether any layer of `model` is quantization-aware."""
    return bool(quantization_aware_layers(model))


def quantization_aware_settings(model):
    """The QAT settings of a quantization-aware model (a dict), or None."""
    layers = quantization_aware_layers(model)
    return None if not layers else layers[0].quantization_aware_config()


def make_quantization_aware(layer, settings):
    """Turns a built plain `Dense` / `EinsumDense` into its quantization-aware class in place."""
    cls = _CLASSES[type(layer)]
    layer.__class__ = cls
    # Keras binds `quantize` to the instance when a layer is made (`Layer.__new__`): drop that
    # binding of `Dense.quantize`, so that the class's refusal (quantizing twice) answers.
    layer.__dict__.pop("quantize", None)
    layer._set_quantization_aware(settings)
    layer._tracker.unlock()
    try:
        layer._build_quantization_aware()
    finally:
        layer._tracker.lock()
    return layer


def apply_settings(model, settings):
    """Makes every plain `Dense` / `EinsumDense` of `model` quantization-aware (`settings`)."""
    layers = convertible_layers(model)
    for layer in layers:
        make_quantization_aware(layer, settings)
    return layers


def set_calibrating(model, flag):
    for layer in quantization_aware_layers(model):
        layer._calibrating = flag


def uncalibrated_layers(model):
    """Paths of the quantization-aware layers whose range was never set."""
    return [
        layer.path
        for layer in quantization_aware_layers(model)
        if float(ops.convert_to_numpy(layer.range_initialized)) == 0.0
    ]

