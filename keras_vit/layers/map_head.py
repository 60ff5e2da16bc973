"""`MAPHead`: multihead attention pooling with a learned query (SigLIP, big_vision MAP)."""

import math

import keras
from keras import ops

from keras_vit.layers._checks import check_non_negative_int, check_positive_int, check_token_shape
from keras_vit.layers._quantization import RecordsQuantizedSublayers, sublayer_dtype
from keras_vit.layers.activations import check_activation, mlp_activation
from keras_vit.layers.attention import check_epsilon
from keras_vit.layers.norms import check_norm, make_norm
from keras_vit.layers.sharding import COLUMN, ROW


@keras.saving.register_keras_serializable(package="keras_vit")
class MAPHead(RecordsQuantizedSublayers):
    """Pools `(B, T, D)` tokens to `(B, D)` by attention from one learned query.

    timm's `AttentionPoolLatent` (latent length 1), big_vision's `MAPHead`: a learned latent
    `(1, 1, D)` is projected to the query (`q`, Dense D -> D), the patch tokens to keys and
    values (`kv`, Dense D -> 2D: keys in the first D outputs, values in the last D, each
    head-major), multi-head attention is projected back (`proj`, Dense D -> D), and an MLP
    residual follows: `out = out + mlp_fc2(act(mlp_fc1(norm(out))))`. The pooled vector is the
    single output token.

    Weight names map one to one to timm's `attn_pool.*`: `latent` (`latent`), `q`, `kv`,
    `proj`, `norm`, `mlp_fc1` (`mlp.fc1`), `mlp_fc2` (`mlp.fc2`); Dense kernels are the
    transposes of the PyTorch `Linear` weights.

    Args:
        num_heads: int. Attention heads; must divide the input width.
        mlp_dim: int. Hidden width of the MLP.
        layer_norm_epsilon: float. Epsilon of `norm`. Defaults to 1e-6.
        activation: `"gelu"` or `"quick_gelu"`. Defaults to `"gelu"`.
        approximate_gelu: bool. tanh GELU when True, exact erf GELU when False.
            Defaults to True.
        num_prefix_tokens: int. Leading tokens (class, distillation, register)
            left out of the pooling, as timm does. Defaults to 0.
        norm: `"layernorm"` or `"rmsnorm"`: the kind of `norm`. Defaults to `"layernorm"`.

    Call arguments:
        inputs: `(B, T, D)` tokens.
        patch_valid: optional boolean `(B, T - num_prefix_tokens)`: the tokens the query
            may attend to (NaFlex padding left out, as timm's key-only mask). Defaults to
            None (all).

    Returns:
        `(B, D)`.

    Example:

    >>> import numpy as np
    >>> head = MAPHead(num_heads=2, mlp_dim=16)
    >>> tuple(head(np.zeros((2, 5, 8), "float32")).shape)
    (2, 8)

    Reference:
        Lee et al., 2019, "Set Transformer" (PMA); Zhai et al., 2023, "Sigmoid Loss for
        Language Image Pre-Training" (SigLIP), the MAP head of big_vision's ViT.
    """

    # Tensor-parallel roles of the projections (keras_vit.layers.sharding).
    sharding_roles = {"q|kv|mlp_fc1": COLUMN, "proj|mlp_fc2": ROW}

    def __init__(
        self,
        num_heads,
        mlp_dim,
        layer_norm_epsilon=1e-6,
        activation="gelu",
        approximate_gelu=True,
        num_prefix_tokens=0,
        norm="layernorm",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.norm_kind = check_norm(norm)  # `norm` is the norm layer (saved files)
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.mlp_dim = check_positive_int(mlp_dim, "mlp_dim")
        self.layer_norm_epsilon = check_epsilon(layer_norm_epsilon)
        self.activation = check_activation(activation)
        self.approximate_gelu = bool(approximate_gelu)
        num_prefix_tokens = check_non_negative_int(num_prefix_tokens, "num_prefix_tokens")
        self.num_prefix_tokens = num_prefix_tokens

    def build(self, input_shape):
        hidden_dim = check_token_shape(input_shape, self.num_heads, self.name)
        self.hidden_dim = hidden_dim
        dtype = self.dtype_policy
        self.latent = self.add_weight(
            name="latent",
            shape=(1, 1, hidden_dim),
            initializer=keras.initializers.TruncatedNormal(stddev=hidden_dim**-0.5),
        )

        def dense(units, name):
            return keras.layers.Dense(
                units,
                kernel_initializer="glorot_uniform",
                dtype=sublayer_dtype(self, name),  # quantized in a reloaded quantized model
                name=name,
            )

        self.q = dense(hidden_dim, "q")
        self.kv = dense(2 * hidden_dim, "kv")
        self.proj = dense(hidden_dim, "proj")
        self.norm = make_norm(self.norm_kind, self.layer_norm_epsilon, "norm", dtype)
        self.mlp_fc1 = dense(self.mlp_dim, "mlp_fc1")
        self.mlp_fc2 = dense(hidden_dim, "mlp_fc2")
        token = (None, 1, hidden_dim)
        self.q.build(token)
        self.kv.build((None, None, hidden_dim))
        self.proj.build(token)
        self.norm.build(token)
        self.mlp_fc1.build(token)
        self.mlp_fc2.build((None, 1, self.mlp_dim))
        self.built = True

    def call(self, inputs, patch_valid=None):
        x = inputs[:, self.num_prefix_tokens :]
        heads, head_dim = self.num_heads, self.hidden_dim // self.num_heads
        batch = ops.shape(x)[0]
        query = self.q(ops.cast(self.latent, self.compute_dtype))  # (1, 1, D)
        query = ops.broadcast_to(
            ops.reshape(query, (1, 1, heads, head_dim)), (batch, 1, heads, head_dim)
        )
        kv = ops.reshape(self.kv(x), (batch, -1, 2, heads, head_dim))
        key, value = kv[:, :, 0], kv[:, :, 1]
        mask = None
        if patch_valid is not None:
            mask = ops.cast(patch_valid, "bool")[:, None, None, :]
        out = ops.dot_product_attention(
            query, key, value, mask=mask, scale=1.0 / math.sqrt(head_dim)
        )
        out = self.proj(ops.reshape(out, (batch, 1, self.hidden_dim)))
        y = mlp_activation(self.mlp_fc1(self.norm(out)), self.activation, self.approximate_gelu)
        out = out + self.mlp_fc2(y)
        return out[:, 0]

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def get_config(self):
        config = super().get_config()  # "dtype" with the quantized sublayers' policies
        config.update(
            {
                "num_heads": self.num_heads,
                "mlp_dim": self.mlp_dim,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "activation": self.activation,
                "approximate_gelu": self.approximate_gelu,
                "num_prefix_tokens": self.num_prefix_tokens,
                "norm": self.norm_kind,
            }
        )
        return config
