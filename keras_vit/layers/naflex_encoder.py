"""`NaFlexPatchEncoder`: a NaFlex batch (patches, coordinates, validity) -> tokens."""

import keras
from keras import ops

from keras_vit.layers._checks import (
    check_bool,
    check_non_negative_int,
    check_positive_int,
    check_positive_int_pair,
    check_rate,
)
from keras_vit.layers.naflex_position import INTERPOLATIONS, naflex_position_embedding
from keras_vit.layers.patch_encoder import build_patch_weights
from keras_vit.layers.sharding import WIDTH

POSITION_EMBEDDINGS = ("learned", "factorized", None)


@keras.saving.register_keras_serializable(package="keras_vit")
class NaFlexPatchEncoder(keras.layers.Layer):
    """Embeds NaFlex patch sequences (timm's `NaFlexEmbeds` on pre-patchified input).

    The input is what timm's NaFlex loader (and `keras_vit.data.naflex_batch`) makes: each
    image at its own aspect ratio, cut into `patch_size` patches flattened in (row, column,
    channel) order, `(B, N, ph * pw * C)`, with their `(y, x)` grid coordinates and a validity
    flag (padding is False). Each patch is projected by the same kernel as
    `keras_vit.layers.PatchEncoder` (`kernel` `(ph, pw, C, D)`, reshaped to `(ph * pw * C, D)`:
    a Dense on the flattened patch), so weights move between a NaFlex and a plain model. Each
    image's position embedding is the learned `(gh, gw)` table (`position_embeddings`,
    `(1, gh * gw, D)` as a `PatchEncoder` with `prefix_position_embedding=False`) resized to
    its own grid, or factorised row and column tables (`position_embeddings_y` `(1, gh, D)`,
    `position_embeddings_x` `(1, gw, D)`) resized linearly and added
    (`keras_vit.layers.naflex_position`). The class and register tokens come first, without
    position embedding, as in timm.

    Args:
        hidden_dim: int. Token width D.
        patch_size: int or (height, width).
        position_embedding_grid: int or (rows, columns). The table's grid.
        class_token: bool. Defaults to False.
        num_register_tokens: int. Defaults to 0.
        position_embedding: `"learned"`, `"factorized"` or None. Defaults to `"learned"`.
        interpolation: `"bicubic"` or `"bilinear"` (learned tables). Defaults to `"bicubic"`.
        antialias: bool. Antialiased resize (timm's default). Defaults to True.
        align_corners: bool. Only without antialiasing. Defaults to False.
        aspect_preserving: bool. Resize to the longer side's square and keep the top-left
            block (timm's `pos_embed_ar_preserving`). Defaults to False.
        dropout_rate: float. Dropout on the tokens. Defaults to 0.
        kernel_initializer: the projection's initializer. Defaults to `"lecun_normal"`.

    Call arguments:
        patches: `(B, N, ph * pw * C)` float.
        patch_coord: `(B, N, 2)` integer `(y, x)`.
        patch_valid: `(B, N)` boolean.
        training: bool.

    Returns:
        `(B, prefix + N, D)` tokens; padding tokens carry the projection of their (zero)
        pixels and no position embedding, and are masked downstream.

    Example:

    >>> import numpy as np
    >>> from keras_vit.data import naflex_batch
    >>> batch = naflex_batch([np.ones((16, 32, 3)), np.ones((24, 8, 3))], 8, 8)
    >>> layer = NaFlexPatchEncoder(16, 8, position_embedding_grid=4, class_token=True)
    >>> tuple(layer(batch["patches"], batch["patch_coord"], batch["patch_valid"]).shape)
    (2, 9, 16)

    Reference:
        Dehghani et al., 2023, "Patch n' Pack: NaViT"; timm `naflexvit.py`.
    """

    # Tensor-parallel roles of the projections (keras_vit.layers.sharding).
    sharding_roles = {"kernel|position_embeddings(_y|_x)?": WIDTH}

    def __init__(
        self,
        hidden_dim,
        patch_size,
        position_embedding_grid,
        class_token=False,
        num_register_tokens=0,
        position_embedding="learned",
        interpolation="bicubic",
        antialias=True,
        align_corners=False,
        aspect_preserving=False,
        dropout_rate=0.0,
        kernel_initializer="lecun_normal",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.hidden_dim = check_positive_int(hidden_dim, "hidden_dim")
        self.patch_size = check_positive_int_pair(patch_size, "patch_size")
        self.position_embedding_grid = check_positive_int_pair(
            position_embedding_grid, "position_embedding_grid"
        )
        self.class_token = check_bool(class_token, "class_token")
        num_register_tokens = check_non_negative_int(num_register_tokens, "num_register_tokens")
        self.num_register_tokens = num_register_tokens
        self.distillation_token = False  # (DeiT's: plain models only)
        if position_embedding not in POSITION_EMBEDDINGS:
            raise ValueError(
                f"position_embedding must be one of {POSITION_EMBEDDINGS}. "
                f"Received: position_embedding={position_embedding!r}"
            )
        self.position_embedding = position_embedding
        if interpolation not in INTERPOLATIONS:
            raise ValueError(
                f"interpolation must be one of {INTERPOLATIONS}. "
                f"Received: interpolation={interpolation!r}"
            )
        self.interpolation = interpolation
        self.antialias = check_bool(antialias, "antialias")
        self.align_corners = check_bool(align_corners, "align_corners")
        if antialias and align_corners:
            raise ValueError(
                "align_corners=True needs antialias=False. "
                "Received: antialias=True, align_corners=True"
            )
        self.aspect_preserving = check_bool(aspect_preserving, "aspect_preserving")
        self.dropout_rate = check_rate(dropout_rate, "dropout_rate")
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.dropout = keras.layers.Dropout(
            self.dropout_rate, dtype=self.dtype_policy, name="dropout"
        )
        self.num_channels = None

    @property
    def num_prefix_tokens(self):
        """Tokens before the patches: class + register tokens."""
        return int(self.class_token) + self.num_register_tokens

    @property
    def grid_size(self):
        """The position-embedding table's grid (what a plain `PatchEncoder` calls its grid)."""
        return self.position_embedding_grid

    def build(self, patches_shape, patch_coord_shape=None, patch_valid_shape=None):
        ph, pw = self.patch_size
        features = patches_shape[-1]
        if len(patches_shape) != 3 or features is None or features % (ph * pw):
            raise ValueError(
                f"Layer '{self.name}' expects patches (batch, tokens, {ph} * {pw} * channels). "
                f"Received: patches shape={tuple(patches_shape)}"
            )
        channels = features // (ph * pw)
        self.num_channels = channels
        build_patch_weights(self, channels)
        gh, gw = self.position_embedding_grid
        normal = keras.initializers.RandomNormal(stddev=0.02)
        if self.position_embedding == "learned":
            self.position_embeddings = self.add_weight(
                name="position_embeddings", shape=(1, gh * gw, self.hidden_dim), initializer=normal
            )
        elif self.position_embedding == "factorized":
            self.position_embeddings_y = self.add_weight(
                name="position_embeddings_y", shape=(1, gh, self.hidden_dim), initializer=normal
            )
            self.position_embeddings_x = self.add_weight(
                name="position_embeddings_x", shape=(1, gw, self.hidden_dim), initializer=normal
            )
        self.dropout.build((None, None, self.hidden_dim))
        self.built = True

    def position_table(self):
        """The learned `(gh, gw, D)` table, the factorised `(rows, columns)` pair, or None."""
        gh, gw = self.position_embedding_grid
        if self.position_embedding == "learned":
            return ops.reshape(self.position_embeddings, (gh, gw, self.hidden_dim))
        if self.position_embedding == "factorized":
            return (self.position_embeddings_y[0], self.position_embeddings_x[0])
        return None

    def call(self, patches, patch_coord, patch_valid, training=None):
        kernel = ops.reshape(ops.cast(self.kernel, self.compute_dtype), (-1, self.hidden_dim))
        x = ops.matmul(ops.cast(patches, self.compute_dtype), kernel)
        x = x + ops.cast(self.bias, x.dtype)
        table = self.position_table()
        if table is not None:
            positions = naflex_position_embedding(
                table,
                patch_coord,
                patch_valid,
                interpolation=self.interpolation,
                antialias=self.antialias,
                align_corners=self.align_corners,
                aspect_preserving=self.aspect_preserving,
            )
            x = x + ops.cast(positions, x.dtype)
        parts = []
        if self.class_token:
            parts.append(self.class_embedding)
        if self.num_register_tokens:
            parts.append(self.register_embeddings)
        if parts:
            prefix = ops.cast(ops.concatenate(parts, axis=1), x.dtype)
            prefix = ops.broadcast_to(
                prefix, (ops.shape(x)[0], self.num_prefix_tokens, self.hidden_dim)
            )
            x = ops.concatenate([prefix, x], axis=1)
        return self.dropout(x, training=training)

    def compute_output_shape(self, patches_shape, patch_coord_shape=None, patch_valid_shape=None):
        tokens = patches_shape[1]
        if tokens is not None:
            tokens += self.num_prefix_tokens
        return (patches_shape[0], tokens, self.hidden_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "hidden_dim": self.hidden_dim,
                "patch_size": self.patch_size,
                "position_embedding_grid": self.position_embedding_grid,
                "class_token": self.class_token,
                "num_register_tokens": self.num_register_tokens,
                "position_embedding": self.position_embedding,
                "interpolation": self.interpolation,
                "antialias": self.antialias,
                "align_corners": self.align_corners,
                "aspect_preserving": self.aspect_preserving,
                "dropout_rate": self.dropout_rate,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config
