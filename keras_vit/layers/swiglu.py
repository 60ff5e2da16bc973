"""`SwiGLU`: the gated MLP of EVA-02, DINOv2-giant and the other SwiGLU ViTs."""

import keras
from keras import ops

from keras_vit.layers._checks import check_bool, check_positive_int, check_rate
from keras_vit.layers._quantization import RecordsQuantizedSublayers, sublayer_dtype
from keras_vit.layers.attention import check_epsilon
from keras_vit.layers.norms import check_norm, make_norm
from keras_vit.layers.sharding import COLUMN, ROW


@keras.saving.register_keras_serializable(package="keras_vit")
class SwiGLU(RecordsQuantizedSublayers):
    """Gated MLP `down(norm(silu(gate(x)) * up(x)))`, timm's `SwiGLU`.

    The unpacked layout (timm's `fc1_g`, `fc1_x`, `fc2` as `gate_dense`, `up_dense`,
    `down_dense`); a packed checkpoint (timm's `SwiGLUPacked` / `GluMlp`, one `fc1` of width
    `2 * hidden_units` whose first half is the gate) loads by splitting its `fc1` in two. With
    `inner_norm=True` a LayerNorm over the hidden width (`inner_norm`, timm's `mlp.norm`:
    EVA-02's sub-LN, `scale_mlp=True`) comes before `down_dense`. The output width is the input
    width.

    Args:
        hidden_units: int. Hidden width (each of `gate_dense` and `up_dense`).
        inner_norm: bool. LayerNorm on the gated hidden activations. Defaults to False.
        layer_norm_epsilon: float. Epsilon of `inner_norm`. Defaults to 1e-6.
        dropout_rate: float in [0, 1). Dropout after the gating and after `down_dense`.
            Defaults to 0.
        norm: `"layernorm"` or `"rmsnorm"`: the kind of `inner_norm`. Defaults to
            `"layernorm"`.

    Call arguments:
        inputs: `(..., D)`.
        training: bool, whether dropout is active.

    Returns:
        `(..., D)`.

    Example:

    >>> import numpy as np
    >>> mlp = SwiGLU(hidden_units=24, inner_norm=True)
    >>> tuple(mlp(np.zeros((2, 5, 16), "float32")).shape)
    (2, 5, 16)

    Reference:
        Shazeer, 2020 (GLU Variants Improve Transformer), Eq. 6; Fang et al., 2023 (EVA-02).
    """

    # Tensor-parallel roles of the projections (keras_vit.layers.sharding).
    sharding_roles = {"gate_dense|up_dense": COLUMN, "down_dense": ROW}

    def __init__(
        self,
        hidden_units,
        inner_norm=False,
        layer_norm_epsilon=1e-6,
        dropout_rate=0.0,
        norm="layernorm",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.norm_kind = check_norm(norm)  # `norm` is the inner norm layer (saved files)
        self.hidden_units = check_positive_int(hidden_units, "hidden_units")
        self.inner_norm = check_bool(inner_norm, "inner_norm")
        self.layer_norm_epsilon = check_epsilon(layer_norm_epsilon)
        self.dropout_rate = check_rate(dropout_rate, "dropout_rate")

    def build(self, input_shape):
        shape = tuple(input_shape)
        width = shape[-1]
        if width is None:
            raise ValueError(f"{self.name} needs a known last dimension. Received: shape={shape}")

        def dense(units, name):
            return keras.layers.Dense(units, dtype=sublayer_dtype(self, name), name=name)

        self.gate_dense = dense(self.hidden_units, "gate_dense")
        self.up_dense = dense(self.hidden_units, "up_dense")
        self.down_dense = dense(width, "down_dense")
        self.dropout_1 = keras.layers.Dropout(
            self.dropout_rate, dtype=self.dtype_policy, name="dropout_1"
        )
        self.dropout_2 = keras.layers.Dropout(
            self.dropout_rate, dtype=self.dtype_policy, name="dropout_2"
        )
        hidden_shape = shape[:-1] + (self.hidden_units,)
        self.gate_dense.build(shape)
        self.up_dense.build(shape)
        if self.inner_norm:
            self.norm = make_norm(
                self.norm_kind, self.layer_norm_epsilon, "inner_norm", self.dtype_policy
            )
            self.norm.build(hidden_shape)
        self.down_dense.build(hidden_shape)
        self.built = True

    def call(self, inputs, training=None):
        x = ops.silu(self.gate_dense(inputs)) * self.up_dense(inputs)
        x = self.dropout_1(x, training=training)
        if self.inner_norm:
            x = self.norm(x)
        return self.dropout_2(self.down_dense(x), training=training)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "hidden_units": self.hidden_units,
                "inner_norm": self.inner_norm,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "dropout_rate": self.dropout_rate,
                "norm": self.norm_kind,
            }
        )
        return config
