"""The top of a `VisionTransformer`: pooling, `fc_norm`, pre-logits and the classifier heads.

`build_top` puts them on the blocks' tokens (`keras_vit.models.encoder.encode_tokens`); the
layer names below are the roles `VisionTransformer` finds them by and the checkpoint name
tables map.
"""

import keras

from keras_vit.layers import MAPHead, TokenPooling
from keras_vit.layers.norms import make_norm

POOLING = "pooling"
POOLING_DIST = "pooling_dist"
FC_NORM = "fc_norm"
PRE_LOGITS = "pre_logits"
HEAD = "head"
HEAD_DIST = "head_dist"
HEAD_AVERAGE = "head_average"
CLASSIFIER_ACTIVATION = "classifier_activation"


def _pool(x, config, prefix, dtype_of, patch_valid=None):
    """The pooled `(B, D)` vector (`pooling`, then `fc_norm` if set); NaFlex padding left out
    of GAP and MAP by `patch_valid`."""
    valid = {} if patch_valid is None else {"patch_valid": patch_valid}
    if config.pooling == "map":
        x = MAPHead(
            num_heads=config.map_num_heads or config.num_heads,
            mlp_dim=config.map_mlp_dim or config.mlp_dim,
            layer_norm_epsilon=config.layer_norm_epsilon,
            activation=config.activation,
            approximate_gelu=config.approximate_gelu,
            num_prefix_tokens=0 if config.map_prefix_tokens else prefix,
            **({} if config.norm == "layernorm" else {"norm": config.norm}),
            name=POOLING,
            dtype=dtype_of(POOLING),
        )(x, **valid)
    else:
        kind = "token_distillation" if config.distillation_token else config.pooling
        pool = TokenPooling(kind, num_prefix_tokens=prefix, name=POOLING, dtype=dtype_of(POOLING))
        x = pool(x, **valid)
    if config.fc_norm:
        x = make_norm(config.norm, config.layer_norm_epsilon, FC_NORM, dtype_of(FC_NORM))(x)
    return x


def head_dtype(policy):
    """float32 under a mixed-precision policy: float32 logits (and softmax), as Keras advises."""
    policy = keras.dtype_policies.get(policy)
    if policy.compute_dtype != policy.variable_dtype:
        return "float32"
    return policy


def _classifier(config, dtype_of, name=HEAD, activation=None):
    return keras.layers.Dense(
        config.num_classes,
        activation=activation,
        kernel_initializer="zeros",
        bias_initializer="zeros",
        dtype=dtype_of(name),
        name=name,
    )


def _distilled_head(x, config, prefix, dtype_of):
    """DeiT: `(head(class token) + head_dist(distillation token)) / 2` (timm's eval output)."""
    pool = TokenPooling("token", prefix, name=POOLING, dtype=dtype_of(POOLING))
    pool_dist = TokenPooling("distillation", prefix, name=POOLING_DIST, dtype=dtype_of(POOLING))
    logits = _classifier(config, dtype_of)(pool(x))
    logits_dist = _classifier(config, dtype_of, HEAD_DIST)(pool_dist(x))
    out = keras.layers.Average(dtype=dtype_of(HEAD_AVERAGE), name=HEAD_AVERAGE)(
        [logits, logits_dist]
    )
    if config.classifier_activation is not None:
        out = keras.layers.Activation(
            config.classifier_activation,
            dtype=dtype_of(CLASSIFIER_ACTIVATION),
            name=CLASSIFIER_ACTIVATION,
        )(out)
    return out


def build_top(x, config, prefix, dtype_of, patch_valid=None):
    """Pooling, `fc_norm`, pre-logits and head on the blocks' tokens `x`, as `config` asks.

    Args:
        x: functional `(B, T, D)` tokens after the blocks (and the final norm).
        config: a `keras_vit.models.config.ViTConfig`.
        prefix: int. The class, distillation and register tokens before the patch tokens.
        dtype_of: callable mapping a layer name to its dtype policy (None: the global one).
        patch_valid: NaFlex validity `(B, N)` of the patch tokens, or None.

    Returns:
        The functional output tensor (the tokens themselves with `pooling=None` and no top).
    """
    if config.include_top and config.distillation_token:
        return _distilled_head(x, config, prefix, dtype_of)
    if config.pooling is not None:
        x = _pool(x, config, prefix, dtype_of, patch_valid)
    if config.include_top:
        if config.representation_size:
            x = keras.layers.Dense(
                config.representation_size,
                activation="tanh",
                name=PRE_LOGITS,
                dtype=dtype_of(PRE_LOGITS),
            )(x)
        x = _classifier(config, dtype_of, activation=config.classifier_activation)(x)
    return x
