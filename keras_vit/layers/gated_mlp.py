"""`GatedMLP`: `down(act(gate(x)) * up(x))` with a chosen activation and clippable projections.

`SwiGLU` is the SiLU-gated MLP of EVA-02 (with biases, an optional inner norm); this one has
no biases and takes its activation by name: Gemma 4's vision tower gates with the tanh GELU
(timm's `Gemma4GatedMlp`), its projections `ClippedDense`.
"""

import keras
from keras import ops

from keras_vit.layers._checks import check_bool, check_positive_int, check_rate
from keras_vit.layers._same_shape import SameShape
from keras_vit.layers.clipped_dense import ClippedDense
from keras_vit.layers.sharding import COLUMN, ROW

__all__ = ["GatedMLP"]

ACTIVATIONS = {
    "gelu_tanh": lambda x: ops.gelu(x, approximate=True),
    "gelu": lambda x: ops.gelu(x, approximate=False),
    "silu": ops.silu,
}


@keras.saving.register_keras_serializable(package="keras_vit")
class GatedMLP(SameShape, keras.layers.Layer):
    """Gated MLP without biases: `down_dense(act(gate_dense(x)) * up_dense(x))`.

    Args:
        hidden_units: int. Width of `gate_dense` and `up_dense`.
        activation: one of `"gelu_tanh"`, `"gelu"`, `"silu"`. Defaults to `"gelu_tanh"`.
        clip: bool. Whether the projections clamp their inputs and outputs (`ClippedDense`).
            Defaults to False.
        dropout_rate: float in [0, 1). Dropout on the output. Defaults to 0.

    Call arguments:
        inputs: tokens `(..., D)`.
        training: bool, whether dropout is active.

    Returns:
        The MLP's output, `(..., D)` as the inputs.

    Example:

    >>> import numpy as np
    >>> tuple(GatedMLP(16)(np.zeros((2, 5, 8), "float32")).shape)
    (2, 5, 8)

    Reference:
        Shazeer, 2020 (GLU Variants Improve Transformer), Eq. 5 (GEGLU).
    """

    # Tensor-parallel roles of the projections (keras_vit.layers.sharding).
    sharding_roles = {"gate_dense|up_dense": COLUMN, "down_dense": ROW}

    CONFIG_KEYS = (
        "hidden_units",
        "activation",
        "clip",
        "dropout_rate",
    )

    def __init__(
        self, hidden_units, activation="gelu_tanh", clip=False, dropout_rate=0.0, **kwargs
    ):
        super().__init__(**kwargs)
        self.hidden_units = check_positive_int(hidden_units, "hidden_units")
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {tuple(ACTIVATIONS)}. Received: "
                f"activation={activation!r}"
            )
        self.activation = activation
        self.clip = check_bool(clip, "clip")
        self.dropout_rate = check_rate(dropout_rate, "dropout_rate")

    def build(self, input_shape):
        shape = tuple(input_shape)
        if shape[-1] is None:
            raise ValueError(f"{self.name} needs a known last dimension. Received: {shape}")

        def dense(units, name):
            return ClippedDense(units, clip=self.clip, dtype=self.dtype_policy, name=name)

        self.gate_dense = dense(self.hidden_units, "gate_dense")
        self.up_dense = dense(self.hidden_units, "up_dense")
        self.down_dense = dense(shape[-1], "down_dense")
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=self.dtype_policy)
        self.gate_dense.build(shape)
        self.up_dense.build(shape)
        self.down_dense.build((*shape[:-1], self.hidden_units))
        self.built = True

    def call(self, inputs, training=None):
        x = ACTIVATIONS[self.activation](self.gate_dense(inputs)) * self.up_dense(inputs)
        return self.dropout(self.down_dense(x), training=training)
