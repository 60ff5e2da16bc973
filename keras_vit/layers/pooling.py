"""`TokenPooling`: one vector per image from the encoder's token sequence."""

import keras
from keras import ops

from keras_vit.layers._checks import check_non_negative_int, check_positive_int

__all__ = ["TokenPooling"]

POOLINGS = ("token", "gap", "distillation", "token_distillation", "token_gap")


@keras.saving.register_keras_serializable(package="keras_vit")
class TokenPooling(keras.layers.Layer):
    """Pools `(B, T, D)` tokens to `(B, D)`.

    Args:
        pooling: `"token"` takes the first (class) token; `"gap"` averages the
            patch tokens (those after the `num_prefix_tokens` prefix tokens);
            `"distillation"` takes the second token (DeiT's distillation
            token); `"token_distillation"` averages the first two,
            `(x[:, 0] + x[:, 1]) / 2` (a distilled DeiT's pre-logits in timm);
            `"token_gap"` concatenates the class token and the patch-token mean,
            `(B, 2 * D)` (transformers' `Dinov2ForImageClassification`).
        num_prefix_tokens: int. Tokens before the patch tokens (class,
            distillation and register tokens). Defaults to 1.

    Call arguments:
        inputs: `(B, T, D)`.
        patch_valid: optional boolean `(B, T - num_prefix_tokens)`: which patch tokens
            `"gap"` averages (NaFlex padding is left out, as timm's `global_pool_naflex`);
            the token poolings ignore it. Defaults to None (all).

    Example:

    >>> import numpy as np
    >>> tuple(TokenPooling("gap", num_prefix_tokens=0)(np.ones((2, 4, 8), "float32")).shape)
    (2, 8)

    Reference:
        Dosovitskiy et al., 2021, Sec. 3.1 and Appendix D.3 (class token vs GAP).
    """

    def __init__(self, pooling="token", num_prefix_tokens=1, **kwargs):
        super().__init__(**kwargs)
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}. Received: pooling={pooling!r}")
        num_prefix_tokens = check_non_negative_int(num_prefix_tokens, "num_prefix_tokens")
        if pooling in ("token", "token_gap"):
            check_positive_int(num_prefix_tokens, "num_prefix_tokens")
        if pooling in ("distillation", "token_distillation") and num_prefix_tokens < 2:
            raise ValueError(
                f"pooling={pooling!r} reads the class and distillation tokens and needs "
                f"num_prefix_tokens >= 2. Received: num_prefix_tokens={num_prefix_tokens}"
            )
        self.pooling = pooling
        self.num_prefix_tokens = num_prefix_tokens

    def call(self, inputs, patch_valid=None):
        if self.pooling == "token":
            return inputs[:, 0]
        if self.pooling == "distillation":
            return inputs[:, 1]
        if self.pooling == "token_distillation":
            return (inputs[:, 0] + inputs[:, 1]) / 2
        patches = inputs[:, self.num_prefix_tokens :]
        if patch_valid is None:
            mean = ops.mean(patches, axis=1)
        else:
            weights = ops.cast(patch_valid, patches.dtype)[..., None]
            count = ops.maximum(ops.sum(weights, axis=1), ops.cast(1, patches.dtype))
            mean = ops.sum(patches * weights, axis=1) / count
        if self.pooling == "token_gap":
            return ops.concatenate([inputs[:, 0], mean], axis=-1)
        return mean

    def compute_output_shape(self, input_shape):
        width = input_shape[-1]
        if self.pooling == "token_gap" and width is not None:
            width *= 2
        return (input_shape[0], width)

    def get_config(self):
        config = super().get_config()
        config.update({"pooling": self.pooling, "num_prefix_tokens": self.num_prefix_tokens})
        return config
