"""The Keras variable paths of the model's roles: what the checkpoint name tables map to.

A variable's path is its layer's name, then the names inside the layer: `patch_encoder/kernel`,
`encoderblock_3/attention/query/bias`, `encoder_norm/gamma`. The layer part comes from the
role layer names the model is built with (`keras_vit.models.graph`: `PATCH_ENCODER`,
`BLOCK_NAME`, `FINAL_NORM`, ...; `keras_vit.models.heads`: `POOLING`, `FC_NORM`, `HEAD`, ...),
so a renamed role moves every timm, transformers and `.npz` table with it. The weight names
inside a layer (`kernel`, `class_embedding`, `mlp_dense_1`, ...) are that layer's own and stay
strings in the tables.

Example:

>>> patch_encoder("kernel"), block(3, "attention", "query", "bias")
('patch_encoder/kernel', 'encoderblock_3/attention/query/bias')
>>> PATHS["head"], map_head("latent")
('head', 'pooling/latent')
"""

from keras_vit.models.graph import (
    BLOCK_NAME,
    FINAL_NORM,
    PATCH_ENCODER,
    PRE_NORM,
    RELATIVE_POSITION_BIAS,
    ROTARY_EMBEDDING,
)
from keras_vit.models.heads import FC_NORM, HEAD, HEAD_DIST, POOLING, PRE_LOGITS

__all__ = [
    "BLOCK_NAME",
    "FC_NORM",
    "FINAL_NORM",
    "HEAD",
    "HEAD_DIST",
    "PATCH_ENCODER",
    "PATHS",
    "POOLING",
    "PRE_LOGITS",
    "PRE_NORM",
    "RELATIVE_POSITION_BIAS",
    "ROTARY_EMBEDDING",
    "block",
    "map_head",
    "patch_encoder",
    "variable_path",
]


def variable_path(layer, *parts):
    """The path of the variable `parts` (`"kernel"`, `"attention", "query"`) in `layer`."""
    return "/".join((layer, *parts))


def patch_encoder(*parts):
    """A path in the `PatchEncoder` (`"kernel"`, `"class_embedding"`, `"position_embeddings"`)."""
    return variable_path(PATCH_ENCODER, *parts)


def block(i, *parts):
    """A path in encoder block `i` (`block(0)` is the block layer itself)."""
    return variable_path(BLOCK_NAME.format(i), *parts)


def map_head(*parts):
    """A path in the pooling layer of a MAP head (`latent`, `q`, `kv`, `norm`, `mlp_fc1`, ...)."""
    return variable_path(POOLING, *parts)


# The variables (or layers) of the roles every table maps: one place to change if they move.
PATHS = {
    "patch_kernel": patch_encoder("kernel"),
    "patch_bias": patch_encoder("bias"),
    "class_token": patch_encoder("class_embedding"),
    "register_tokens": patch_encoder("register_embeddings"),
    "distillation_token": patch_encoder("distillation_embedding"),
    "position_embedding": patch_encoder("position_embeddings"),
    "pre_norm": PRE_NORM,
    "encoder_norm": FINAL_NORM,
    "fc_norm": FC_NORM,
    "map_head": POOLING,
    "pre_logits": PRE_LOGITS,
    "head": HEAD,
    "head_dist": HEAD_DIST,
}
