"""`SandwichNormBlock`: an encoder block with a norm before and after attention and MLP.

`x + post(attention(pre(x)))`, then `x + post(mlp(pre(x)))`: four RMSNorms (timm's
`Gemma4Block`: `norm1` .. `norm4`, transformers' input / post-attention / pre-feedforward /
post-feedforward layernorms), `NormedSelfAttention` and a `GatedMLP`.
"""

import keras

from keras_vit.layers._checks import check_bool, check_positive_int, check_rate
from keras_vit.layers._same_shape import SameShape
from keras_vit.layers.attention import check_epsilon
from keras_vit.layers.drop_path import DropPath
from keras_vit.layers.gated_mlp import GatedMLP
from keras_vit.layers.normed_attention import NormedSelfAttention
from keras_vit.layers.rms_norm import RMSNorm

__all__ = ["SandwichNormBlock"]


@keras.saving.register_keras_serializable(package="keras_vit")
class SandwichNormBlock(SameShape, keras.layers.Layer):
    """Sandwich-norm encoder block (pre- and post-norms around attention and MLP).

    Args:
        num_heads: int. Query heads.
        head_dim: int. Width of each head.
        mlp_dim: int. Hidden width of the gated MLP.
        num_key_value_heads: int or None. Defaults to None (`num_heads`).
        epsilon: float. Every norm's epsilon. Defaults to 1e-6.
        attention_scale: float. The logits' scale. Defaults to 1.0.
        activation: the gated MLP's activation (`GatedMLP`). Defaults to `"gelu_tanh"`.
        clip: bool. Clamped projections (`ClippedDense`). Defaults to False.
        dropout_rate: float in [0, 1). Defaults to 0.
        drop_path_rate: float in [0, 1). Stochastic depth of both branches. Defaults to 0.

    Call arguments:
        inputs: `(B, N, D)`.
        rotary_cos, rotary_sin: optional `(N, head_dim)` rotary tables.
        training: bool.

    Returns:
        `(B, N, D)`.

    Example:

    >>> import numpy as np
    >>> block = SandwichNormBlock(num_heads=2, head_dim=8, mlp_dim=32)
    >>> tuple(block(np.zeros((1, 4, 16), "float32")).shape)
    (1, 4, 16)
    """

    CONFIG_KEYS = (
        "num_heads",
        "head_dim",
        "mlp_dim",
        "num_key_value_heads",
        "epsilon",
        "attention_scale",
        "activation",
        "clip",
        "dropout_rate",
        "drop_path_rate",
    )

    def __init__(
        self,
        num_heads,
        head_dim,
        mlp_dim,
        num_key_value_heads=None,
        epsilon=1e-6,
        attention_scale=1.0,
        activation="gelu_tanh",
        clip=False,
        dropout_rate=0.0,
        drop_path_rate=0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.mlp_dim = check_positive_int(mlp_dim, "mlp_dim")
        self.num_key_value_heads = num_key_value_heads
        self.epsilon = check_epsilon(epsilon, "epsilon")
        self.attention_scale = attention_scale
        self.activation = activation
        self.clip = check_bool(clip, "clip")
        self.dropout_rate = check_rate(dropout_rate, "dropout_rate")
        self.drop_path_rate = check_rate(drop_path_rate, "drop_path_rate")
        # The sublayers check their own arguments.
        self.attention = NormedSelfAttention(
            num_heads,
            head_dim,
            num_key_value_heads=num_key_value_heads,
            epsilon=epsilon,
            scale=attention_scale,
            clip=clip,
            dropout_rate=dropout_rate,
            dtype=self.dtype_policy,
            name="attention",
        )
        self.mlp = GatedMLP(
            mlp_dim,
            activation=activation,
            clip=clip,
            dropout_rate=dropout_rate,
            dtype=self.dtype_policy,
            name="mlp",
        )
        names = ("attention_pre_norm", "attention_post_norm", "mlp_pre_norm", "mlp_post_norm")
        self.norms = [RMSNorm(epsilon, dtype=self.dtype_policy, name=n) for n in names]
        self.drop_path = DropPath(self.drop_path_rate, dtype=self.dtype_policy, name="drop_path")

    def build(self, input_shape):
        shape = tuple(input_shape)
        for layer in (self.attention, self.mlp, *self.norms):
            layer.build(shape)
        self.built = True

    def call(self, inputs, rotary_cos=None, rotary_sin=None, training=None):
        pre_attention, post_attention, pre_mlp, post_mlp = self.norms
        x = self.attention(
            pre_attention(inputs), rotary_cos=rotary_cos, rotary_sin=rotary_sin, training=training
        )
        x = inputs + self.drop_path(post_attention(x), training=training)
        y = post_mlp(self.mlp(pre_mlp(x), training=training))
        return x + self.drop_path(y, training=training)
