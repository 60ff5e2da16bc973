"""`TransformerBlock`: the pre-norm encoder block of ViT (the paper's Eq. 2-3)."""

import keras
from keras import ops

from keras_vit.layers._checks import check_positive_int, check_rate
from keras_vit.layers.drop_path import DropPath


@keras.saving.register_keras_serializable(package="keras_vit")
class TransformerBlock(keras.layers.Layer):
    """Pre-norm Transformer encoder block: `x + MSA(LN(x))`, then `x + MLP(LN(x))`.

    Weights are laid out as in the official checkpoints: the attention is a
    `keras.layers.MultiHeadAttention` whose query/key/value kernels are
    `(D, heads, D / heads)` and output kernel `(heads, D / heads, D)`. Sublayer
    names map one to one to the official ones: `attention_norm` (LayerNorm_0),
    `attention` (MultiHeadDotProductAttention_1), `mlp_norm` (LayerNorm_2),
    `mlp_dense_1` / `mlp_dense_2` (MlpBlock_3/Dense_0, Dense_1).

    The sublayers are created in `build()` rather than `__init__()` because the
    attention's per-head width depends on the input width D.

    Args:
        num_heads: int. Number of attention heads; must divide the input width.
        mlp_dim: int. Hidden width of the MLP.
        dropout_rate: float in [0, 1). Dropout after the attention output and
            after each MLP dense layer. Defaults to 0.
        attention_dropout_rate: float in [0, 1). Dropout on the attention
            weights. Defaults to 0.
        drop_path_rate: float in [0, 1). Stochastic-depth rate of both residual
            branches. Defaults to 0.
        layer_norm_epsilon: float. Defaults to 1e-6 (official).
        approximate_gelu: bool. tanh-approximated GELU (official, Flax default)
            when True, exact erf GELU when False. Defaults to True.
        layer_scale_init_value: optional float. When set, each residual branch
            is multiplied by a learned per-channel scale initialised to it
            (LayerScale, Touvron et al. 2021). Defaults to None (off).

    Call arguments:
        inputs: `(B, T, D)` tokens.
        training: bool, whether dropout and drop path are active.
        return_attention_scores: bool. If True, also returns the attention
            weights `(B, heads, T, T)` computed by the same attention layer.

    Returns:
        `(B, T, D)`, or `((B, T, D), (B, heads, T, T))`.

    Example:

    >>> import numpy as np
    >>> block = TransformerBlock(num_heads=2, mlp_dim=64)
    >>> block(np.zeros((2, 5, 32), "float32")).shape
    (2, 5, 32)

    Reference:
        Dosovitskiy et al., 2021, Sec. 3.1 (Eq. 2-3); Vaswani et al., 2017.
    """

    def __init__(
        self,
        num_heads,
        mlp_dim,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
        drop_path_rate=0.0,
        layer_norm_epsilon=1e-6,
        approximate_gelu=True,
        layer_scale_init_value=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.mlp_dim = check_positive_int(mlp_dim, "mlp_dim")
        self.dropout_rate = check_rate(dropout_rate, "dropout_rate")
        self.attention_dropout_rate = check_rate(attention_dropout_rate, "attention_dropout_rate")
        self.drop_path_rate = check_rate(drop_path_rate, "drop_path_rate")
        if not isinstance(layer_norm_epsilon, (int, float)) or layer_norm_epsilon <= 0:
            raise ValueError(
                f"layer_norm_epsilon must be positive. Received: layer_norm_epsilon={layer_norm_epsilon!r}"
            )
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.approximate_gelu = bool(approximate_gelu)
        if layer_scale_init_value is not None and (
            isinstance(layer_scale_init_value, bool)
            or not isinstance(layer_scale_init_value, (int, float))
        ):
            raise ValueError(
                "layer_scale_init_value must be a float or None. "
                f"Received: layer_scale_init_value={layer_scale_init_value!r}"
            )
        self.layer_scale_init_value = layer_scale_init_value
        self.supports_masking = False

    def build(self, input_shape):
        if len(input_shape) != 3 or input_shape[-1] is None:
            raise ValueError(
                f"Layer '{self.name}' expects tokens of shape (batch, tokens, hidden_dim) "
                f"with a known hidden_dim. Received: input shape={tuple(input_shape)}"
            )
        hidden_dim = input_shape[-1]
        if hidden_dim % self.num_heads:
            raise ValueError(
                "num_heads must divide hidden_dim. "
                f"Received: hidden_dim={hidden_dim}, num_heads={self.num_heads}"
            )
        dtype = self.dtype_policy
        eps = self.layer_norm_epsilon
        self.attention_norm = keras.layers.LayerNormalization(
            epsilon=eps, dtype=dtype, name="attention_norm"
        )
        self.attention = keras.layers.MultiHeadAttention(
            num_heads=self.num_heads,
            key_dim=hidden_dim // self.num_heads,
            dropout=self.attention_dropout_rate,
            kernel_initializer="glorot_uniform",
            dtype=dtype,
            name="attention",
        )
        self.attention_dropout = keras.layers.Dropout(self.dropout_rate, dtype=dtype, name="attention_dropout")
        self.mlp_norm = keras.layers.LayerNormalization(epsilon=eps, dtype=dtype, name="mlp_norm")
        self.mlp_dense_1 = keras.layers.Dense(
            self.mlp_dim,
            kernel_initializer="glorot_uniform",
            bias_initializer=keras.initializers.RandomNormal(stddev=1e-6),
            dtype=dtype,
            name="mlp_dense_1",
        )
        self.mlp_dropout_1 = keras.layers.Dropout(self.dropout_rate, dtype=dtype, name="mlp_dropout_1")
        self.mlp_dense_2 = keras.layers.Dense(
            hidden_dim,
            kernel_initializer="glorot_uniform",
            bias_initializer=keras.initializers.RandomNormal(stddev=1e-6),
            dtype=dtype,
            name="mlp_dense_2",
        )
        self.mlp_dropout_2 = keras.layers.Dropout(self.dropout_rate, dtype=dtype, name="mlp_dropout_2")
        self.drop_path = DropPath(self.drop_path_rate, dtype=dtype, name="drop_path")

        shape = tuple(input_shape)
        self.attention_norm.build(shape)
        self.attention.build(shape, shape)
        self.mlp_norm.build(shape)
        self.mlp_dense_1.build(shape)
        self.mlp_dense_2.build(shape[:-1] + (self.mlp_dim,))
        if self.layer_scale_init_value is not None:
            init = keras.initializers.Constant(self.layer_scale_init_value)
            self.attention_scale = self.add_weight(
                name="attention_scale", shape=(hidden_dim,), initializer=init
            )
            self.mlp_scale = self.add_weight(name="mlp_scale", shape=(hidden_dim,), initializer=init)
        self.built = True

    def call(self, inputs, training=None, return_attention_scores=False):
        # The residual stream runs in the compute dtype on every backend (bfloat16 under
        # mixed precision), whatever dtype the caller passed.
        inputs = ops.cast(inputs, self.compute_dtype)
        x = self.attention_norm(inputs)
        if return_attention_scores:
            x, scores = self.attention(
                x, x, training=training, return_attention_scores=True
            )
        else:
            x = self.attention(x, x, training=training)
        x = self.attention_dropout(x, training=training)
        if self.layer_scale_init_value is not None:
            x = x * self.attention_scale
        x = inputs + self.drop_path(x, training=training)

        y = self.mlp_norm(x)
        y = self.mlp_dense_1(y)
        y = ops.gelu(y, approximate=self.approximate_gelu)
        y = self.mlp_dropout_1(y, training=training)
        y = self.mlp_dense_2(y)
        y = self.mlp_dropout_2(y, training=training)
        if self.layer_scale_init_value is not None:
            y = y * self.mlp_scale
        out = x + self.drop_path(y, training=training)
        if return_attention_scores:
            return out, scores
        return out

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "mlp_dim": self.mlp_dim,
                "dropout_rate": self.dropout_rate,
                "attention_dropout_rate": self.attention_dropout_rate,
                "drop_path_rate": self.drop_path_rate,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "approximate_gelu": self.approximate_gelu,
                "layer_scale_init_value": self.layer_scale_init_value,
            }
        )
        return config
