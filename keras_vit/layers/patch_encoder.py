"""`PatchEncoder`: patch projection, class token, position embedding, mask embedding."""

import keras
import numpy as np
from keras import ops

from keras_vit.layers import position_embedding as pe
from keras_vit.layers._checks import (
    check_image_shape,
    check_positive_int,
    check_positive_int_pair,
    check_rate,
)

POSITION_EMBEDDINGS = ("learned", "sincos2d", None)


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchEncoder(keras.layers.Layer):
    """Embeds an image as a sequence of patch tokens (the paper's Eq. 1).

    Projects every non-overlapping `patch_size` patch linearly to `hidden_dim`
    (implemented as a strided convolution, which is the same function as
    `Patches` followed by a dense layer; the kernel has the official
    `embedding/kernel` layout `(ph, pw, C, D)`), optionally replaces masked
    patch embeddings with a learnable mask embedding, prepends a class token,
    adds a position embedding and applies dropout.

    The layer knows its patch grid once built and can resample its learned
    position embedding to another grid (`resampled_position_embedding`,
    `load_position_embedding`) the way the official loader does.

    Args:
        hidden_dim: int. Width D of the token embeddings.
        patch_size: int or (height, width). Patch size in pixels (1 for hybrid
            models, whose input is a CNN feature map).
        class_token: bool. Whether to prepend a learnable class token
            (initialised to zeros). Defaults to True.
        position_embedding: `"learned"` (normal(0.02) init), `"sincos2d"` (fixed)
            or None. Defaults to `"learned"`.
        dropout_rate: float in [0, 1). Dropout after adding the position
            embedding. Defaults to 0.
        use_mask_embedding: bool. Whether to create the learnable mask embedding
            used by masked-patch prediction (`patch_mask` call argument).
            Defaults to False.
        kernel_initializer: initializer for the projection kernel. Defaults to
            `"lecun_normal"` (Flax's default, as the official model).

    Call arguments:
        images: `(B, H, W, C)`, H and W the sizes the layer was built for.
        patch_mask: optional boolean `(B, N)`; True marks a patch whose embedding
            is replaced by the mask embedding. Needs `use_mask_embedding=True`.
        patch_source: optional int `(B, N)`; position i takes the embedding of
            patch `patch_source[b, i]` of the same image (the identity
            `arange(N)` changes nothing). Masked-patch prediction uses it to put
            another patch's embedding at a corrupted position. Applied before
            `patch_mask`.
        training: bool, whether dropout is active.

    Returns:
        `(B, N + class_token, hidden_dim)` tokens, N = (H / ph) * (W / pw).

    Example:

    >>> import numpy as np
    >>> tuple(PatchEncoder(32, 8)(np.zeros((2, 16, 24, 3), "float32")).shape)
    (2, 7, 32)

    Reference:
        Dosovitskiy et al., 2021, Sec. 3.1 (Eq. 1) and Appendix D.4.
    """

    def __init__(
        self,
        hidden_dim,
        patch_size,
        class_token=True,
        position_embedding="learned",
        dropout_rate=0.0,
        use_mask_embedding=False,
        kernel_initializer="lecun_normal",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.hidden_dim = check_positive_int(hidden_dim, "hidden_dim")
        self.patch_size = check_positive_int_pair(patch_size, "patch_size")
        self.class_token = bool(class_token)
        if position_embedding not in POSITION_EMBEDDINGS:
            raise ValueError(
                f"position_embedding must be one of {POSITION_EMBEDDINGS}. "
                f"Received: position_embedding={position_embedding!r}"
            )
        if position_embedding == "sincos2d" and hidden_dim % 4:
            raise ValueError(
                "hidden_dim must be divisible by 4 for position_embedding='sincos2d'. "
                f"Received: hidden_dim={hidden_dim}"
            )
        self.position_embedding = position_embedding
        self.dropout_rate = check_rate(dropout_rate, "dropout_rate")
        self.use_mask_embedding = bool(use_mask_embedding)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.dropout = keras.layers.Dropout(
            self.dropout_rate, dtype=self.dtype_policy, name="dropout"
        )
        self.image_size = None
        self.grid_size = None
        self.num_channels = None

    @property
    def num_prefix_tokens(self):
        return int(self.class_token)

    @property
    def num_patches(self):
        return None if self.grid_size is None else self.grid_size[0] * self.grid_size[1]

    def build(self, input_shape):
        shape = check_image_shape(input_shape, self.patch_size, name=self.name)
        _, height, width, channels = shape
        if height is None or width is None or channels is None:
            raise ValueError(
                f"Layer '{self.name}' needs static image height, width and channels to "
                f"build its position embedding. Received: input shape={shape}"
            )
        ph, pw = self.patch_size
        self.image_size = (height, width)
        self.num_channels = channels
        self.grid_size = (height // ph, width // pw)
        self.kernel = self.add_weight(
            name="kernel",
            shape=(ph, pw, channels, self.hidden_dim),
            initializer=self.kernel_initializer,
        )
        self.bias = self.add_weight(name="bias", shape=(self.hidden_dim,), initializer="zeros")
        if self.class_token:
            self.class_embedding = self.add_weight(
                name="class_embedding", shape=(1, 1, self.hidden_dim), initializer="zeros"
            )
        if self.use_mask_embedding:
            self.mask_embedding = self.add_weight(
                name="mask_embedding",
                shape=(1, 1, self.hidden_dim),
                initializer=keras.initializers.RandomNormal(stddev=0.02),
            )
        num_tokens = self.num_patches + self.num_prefix_tokens
        if self.position_embedding == "learned":
            self.position_embeddings = self.add_weight(
                name="position_embeddings",
                shape=(1, num_tokens, self.hidden_dim),
                initializer=keras.initializers.RandomNormal(stddev=0.02),
            )
        elif self.position_embedding == "sincos2d":
            table = pe.sincos_2d_position_embedding(self.grid_size, self.hidden_dim)
            prefix = np.zeros((1, self.num_prefix_tokens, self.hidden_dim), "float32")
            self._sincos_table = np.concatenate([prefix, table], axis=1)
        self.dropout.build((None, num_tokens, self.hidden_dim))
        self.built = True

    def project(self, images):
        """The linear patch projection alone: `(B, H, W, C)` -> `(B, N, D)`."""
        x = ops.conv(images, self.kernel, strides=self.patch_size, padding="valid")
        x = ops.reshape(x, (-1, self.num_patches, self.hidden_dim))
        return x + self.bias

    def _check_per_patch(self, value, name):
        """Checks that `value` (a patch_mask or patch_source) has shape (batch, num_patches)."""
        shape = tuple(value.shape)
        if len(shape) != 2 or shape[1] not in (None, self.num_patches):
            raise ValueError(
                f"{name} must have shape (batch, {self.num_patches}). "
                f"Received: {name}.shape={shape}"
            )

    def call(self, images, patch_mask=None, patch_source=None, training=None):
        check_image_shape(
            images.shape,
            self.patch_size,
            name=self.name,
            channels=self.num_channels,
            image_size=self.image_size,
        )
        x = self.project(images)
        if patch_source is not None:
            self._check_per_patch(patch_source, "patch_source")
            index = ops.expand_dims(ops.cast(patch_source, "int32"), -1)
            index = ops.repeat(index, self.hidden_dim, axis=-1)
            x = ops.take_along_axis(x, index, axis=1)
        if patch_mask is not None:
            if not self.use_mask_embedding:
                raise ValueError(
                    f"Layer '{self.name}' received a patch_mask but was created with "
                    "use_mask_embedding=False. Received: use_mask_embedding=False"
                )
            self._check_per_patch(patch_mask, "patch_mask")
            mask = ops.expand_dims(ops.cast(patch_mask, "bool"), -1)
            x = ops.where(mask, ops.cast(self.mask_embedding, x.dtype), x)
        if self.class_token:
            cls = ops.broadcast_to(
                ops.cast(self.class_embedding, x.dtype), (ops.shape(x)[0], 1, self.hidden_dim)
            )
            x = ops.concatenate([cls, x], axis=1)
        if self.position_embedding == "learned":
            x = x + ops.cast(self.position_embeddings, x.dtype)
        elif self.position_embedding == "sincos2d":
            x = x + ops.cast(self._sincos_table, x.dtype)
        return self.dropout(x, training=training)

    def compute_output_shape(self, input_shape):
        shape = check_image_shape(input_shape, self.patch_size, name=self.name)
        ph, pw = self.patch_size
        height, width = shape[1], shape[2]
        num = None if height is None or width is None else (height // ph) * (width // pw)
        if num is not None:
            num += self.num_prefix_tokens
        return (shape[0], num, self.hidden_dim)

    def resampled_position_embedding(self, grid_size):
        """Returns this layer's learned position embedding resampled to `grid_size` (NumPy)."""
        self._require_learned()
        return pe.resample_position_embedding(
            keras.ops.convert_to_numpy(self.position_embeddings),
            grid_size,
            num_prefix_tokens=self.num_prefix_tokens,
            old_grid=self.grid_size,
        )

    def load_position_embedding(self, posemb, source_grid=None):
        """Assigns a learned position embedding from another grid, resampling it.

        Args:
            posemb: array `(1, prefix + gh * gw, D)` with the same number of prefix
                (class-token) rows as this layer.
            source_grid: optional (gh, gw); a square grid is inferred when None.
        """
        self._require_learned()
        posemb = np.asarray(posemb)
        if posemb.ndim != 3 or posemb.shape[-1] != self.hidden_dim:
            raise ValueError(
                f"position embedding must have shape (1, tokens, {self.hidden_dim}). "
                f"Received: shape={posemb.shape}"
            )
        resampled = pe.resample_position_embedding(
            posemb, self.grid_size, self.num_prefix_tokens, old_grid=source_grid
        )
        self.position_embeddings.assign(resampled)

    def _require_learned(self):
        if not self.built or self.position_embedding != "learned":
            raise ValueError(
                f"Layer '{self.name}' has no learned position embedding to resample "
                f"(built={self.built}, position_embedding={self.position_embedding!r})."
            )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "hidden_dim": self.hidden_dim,
                "patch_size": self.patch_size,
                "class_token": self.class_token,
                "position_embedding": self.position_embedding,
                "dropout_rate": self.dropout_rate,
                "use_mask_embedding": self.use_mask_embedding,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config
