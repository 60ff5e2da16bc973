"""`TokenMixer`: the call protocol shared by the attention layers and the encoder blocks.

`MultiHeadSelfAttention`, `DifferentialAttention`, `TransformerBlock` and
`ParallelScalingBlock` are called the same way (a block passes its arguments on to any
attention kind, the encoder to any block kind): `(B, T, D)` tokens in, `(B, T, D)` tokens out,
optionally with the attention weights. The signature and the attention mask's normalisation
live here once; each layer implements `mix`.
"""

from keras import ops

from keras_vit.layers._quantization import RecordsQuantizedSublayers


def attention_mask_4d(attention_mask, inputs):
    """A boolean `(B, 1 or heads, T, T)`-broadcastable mask from an `attention_mask` argument.

    `(B, S)`: key validity of the last S of the T tokens (the first T - S always valid), as
    `(B, 1, 1, T)`; 4-D masks are returned as booleans. None stays None.
    """
    if attention_mask is None:
        return None
    mask = ops.cast(attention_mask, "bool")
    if len(mask.shape) == 4:
        return mask
    if len(mask.shape) != 2:
        raise ValueError(
            "attention_mask must be (batch, tokens) key validity or a (batch, 1 or heads, "
            f"tokens, tokens) mask. Received: shape={tuple(attention_mask.shape)}"
        )
    tokens, keys = inputs.shape[1], mask.shape[1]
    if tokens is not None and keys is not None and keys > tokens:
        raise ValueError(
            f"attention_mask covers {keys} tokens but the input has {tokens}. "
            f"Received: attention_mask.shape={tuple(attention_mask.shape)}"
        )
    prefix = ops.shape(inputs)[1] - ops.shape(mask)[1]
    ones = ops.ones((ops.shape(mask)[0], prefix), "bool")
    mask = ops.concatenate([ones, mask], axis=1)
    return mask[:, None, None, :]


# The constructor arguments every attention kind shares, and every block kind: in
# `get_config` order (the order of the keys in saved `.keras` configs).
ATTENTION_CONFIG = ("num_heads", "attention_dropout_rate", "qk_norm", "layer_norm_epsilon")
BLOCK_CONFIG = (
    "num_heads",
    "mlp_dim",
    "dropout_rate",
    "attention_dropout_rate",
    "drop_path_rate",
    "layer_norm_epsilon",
    "approximate_gelu",
    "layer_scale_init_value",
)


def config_values(layer, names):
    """`{name: layer.<name>}` for each of `names`, in that order (a `get_config` update)."""
    return {name: getattr(layer, name) for name in names}


class TokenMixer(RecordsQuantizedSublayers):
    """Base of the layers that mix `(B, T, D)` tokens: one call signature for all of them.

    Call arguments (the subclasses document what they accept):
        inputs: `(B, T, D)` tokens.
        training: bool, whether dropout is active.
        return_attention_scores: bool. Also return the attention weights. Defaults to False.
        rotary_embedding: optional sines and cosines rotating queries and keys.
        attention_bias: optional additive bias of the attention logits.
        attention_mask: optional boolean mask, `(B, S)` key validity or 4-D
            (`attention_mask_4d`).

    A subclass implements `mix(inputs, training, return_scores, rotary, bias, mask)`: the same
    arguments in order, `mask` already a boolean 4-D mask or None.
    """

    def call(
        self,
        inputs,
        training=None,
        return_attention_scores=False,
        rotary_embedding=None,
        attention_bias=None,
        attention_mask=None,
    ):
        mask = attention_mask_4d(attention_mask, inputs)
        return self.mix(
            inputs, training, return_attention_scores, rotary_embedding, attention_bias, mask
        )

    def mix(self, inputs, training, return_scores, rotary, bias, mask):
        """`call` with the arguments in order, `mask` a boolean 4-D mask or None."""
        raise NotImplementedError

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)
