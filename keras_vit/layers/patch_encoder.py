"""`PatchEncoder`: patch projection, prefix tokens, position embedding, mask embedding."""

import keras
from keras import ops

from keras_vit.layers import attention as attention_module
from keras_vit.layers import naflex_position
from keras_vit.layers import position_embedding as pe
from keras_vit.layers._checks import (
    check_bool,
    check_image_shape,
    check_non_negative_int,
    check_positive_int,
    check_positive_int_pair,
    check_rate,
)
from keras_vit.layers.attention import check_epsilon
from keras_vit.layers.norms import check_norm, make_norm
from keras_vit.layers.patch_positions import PositionTable
from keras_vit.layers.patch_resize import resample_patch_embedding_ops
from keras_vit.layers.sharding import WIDTH

POSITION_EMBEDDINGS = ("learned", "sincos2d", None)


# The most patch tokens a patch encoder builds for (a 256 x 256 grid): a bound checked before
# the position embedding is allocated, so that a mistyped image size fails at once.
MAX_TOKENS = 256 * 256


def build_patch_weights(layer, channels):
    """The projection and prefix-token variables of a patch encoder, in `PatchEncoder`'s order.

    `kernel` `(ph, pw, C, D)`, `bias`, then `class_embedding`, `distillation_embedding` and
    `register_embeddings` as `layer` (a `PatchEncoder` or `NaFlexPatchEncoder`) has them: one
    order, so that `set_weights` moves weights between the two.
    """
    ph, pw = layer.patch_size
    layer.kernel = layer.add_weight(
        name="kernel",
        shape=(ph, pw, channels, layer.hidden_dim),
        initializer=layer.kernel_initializer,
    )
    layer.bias = layer.add_weight(name="bias", shape=(layer.hidden_dim,), initializer="zeros")
    if layer.class_token:
        layer.class_embedding = layer.add_weight(
            name="class_embedding", shape=(1, 1, layer.hidden_dim), initializer="zeros"
        )
    if layer.distillation_token:
        layer.distillation_embedding = layer.add_weight(
            name="distillation_embedding",
            shape=(1, 1, layer.hidden_dim),
            initializer=keras.initializers.TruncatedNormal(stddev=0.02),
        )
    if layer.num_register_tokens:
        layer.register_embeddings = layer.add_weight(
            name="register_embeddings",
            shape=(1, layer.num_register_tokens, layer.hidden_dim),
            initializer=keras.initializers.RandomNormal(stddev=1e-6),
        )


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchEncoder(PositionTable, keras.layers.Layer):
    """Embeds an image as a sequence of patch tokens (the paper's Eq. 1).

    Projects every non-overlapping `patch_size` patch linearly to `hidden_dim`
    (implemented as a strided convolution, which is the same function as
    `Patches` followed by a dense layer; the kernel has the official
    `embedding/kernel` layout `(ph, pw, C, D)`), optionally replaces masked
    patch embeddings with a learnable mask embedding, prepends the prefix
    tokens, adds a position embedding and applies dropout.

    Prefix tokens, in timm's order: the class token (`class_embedding`
    `(1, 1, D)`, timm `cls_token`), the distillation token
    (`distillation_embedding` `(1, 1, D)`, DeiT's `dist_token`), then the
    register tokens (`register_embeddings` `(1, R, D)`, timm `reg_token`).
    The learned position embedding (`position_embeddings`) covers the prefix
    tokens too, `(1, prefix + N, D)`, as in the original ViT; with
    `prefix_position_embedding=False` it covers the patches only, `(1, N, D)`,
    and the prefix tokens are prepended after it is added (timm's
    `no_embed_class=True`: DeiT III, register models).

    The layer knows its patch grid once built and can resample its learned
    position embedding to another grid (`resampled_position_embedding`,
    `load_position_embedding`) the way the official loader (or timm) does.
    With `dynamic_image_size=True` it takes any input size the patch divides
    and resamples the table at every call to the input's grid, exactly as
    timm's `dynamic_img_size=True` (PyTorch's antialiased bicubic, see
    `keras_vit.layers.bicubic`; no resampling when the grids are equal).

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
        num_register_tokens: int. Register tokens after the class (and
            distillation) token. Defaults to 0.
        distillation_token: bool. DeiT's distillation token after the class
            token. Defaults to False.
        prefix_position_embedding: bool. Whether the position embedding has
            rows for the prefix tokens. Defaults to True.
        dynamic_image_size: bool. Accept any image size the patch divides,
            resampling the position embedding at call time. Defaults to False.
        position_embedding_grid: optional (rows, columns) grid of the position
            embedding table. None takes the grid of the input the layer is built
            on; required with `dynamic_image_size` when that input has no static
            height and width. Defaults to None.
        patch_norm: None, `"layernorm"` or `"rmsnorm"`: a norm (sublayer
            `patch_norm`) on the patch embeddings right after the projection,
            before the position embedding and the prefix tokens (timm's
            `patch_embed.norm`, `embed_norm_layer`: AIMv2). Defaults to None.
        patch_norm_epsilon: float. Epsilon of `patch_norm`. Defaults to 1e-6.
        position_embedding_interpolation, position_embedding_antialias,
            position_embedding_align_corners: with `dynamic_image_size`, how the
            learned table is resized to each input's grid: PyTorch's
            `F.interpolate` with `"bicubic"` or `"bilinear"`, antialiased or not,
            `align_corners` (without antialias). Default to timm's `"bicubic"`,
            True, False (Qwen3-VL: `"bilinear"`, False, True).

    Call arguments:
        images: `(B, H, W, C)`, H and W the sizes the layer was built for (any
            multiple of the patch with `dynamic_image_size`).
        patch_mask: optional boolean `(B, N)`; True marks a patch whose embedding
            is replaced by the mask embedding. Needs `use_mask_embedding=True`.
        patch_source: optional int `(B, N)`; position i takes the embedding of
            patch `patch_source[b, i]` of the same image (the identity
            `arange(N)` changes nothing). Masked-patch prediction uses it to put
            another patch's embedding at a corrupted position. Applied before
            `patch_mask`.
        patch_size: optional int or (height, width): embed with this patch size instead
            (FlexiViT): the kernel PI-resized to it (bilinear, antialiased:
            `keras_vit.layers.resample_patch_embedding`) and the position embedding
            resampled to the image's grid at that patch size. Needs
            `dynamic_image_size=True` (the token count changes).
        training: bool, whether dropout is active.

    Returns:
        `(B, prefix + N, hidden_dim)` tokens, N = (H / ph) * (W / pw), prefix =
        `num_prefix_tokens` (class + distillation + register tokens).

    Example:

    >>> import numpy as np
    >>> tuple(PatchEncoder(32, 8)(np.zeros((2, 16, 24, 3), "float32")).shape)
    (2, 7, 32)

    Reference:
        Dosovitskiy et al., 2021, Sec. 3.1 (Eq. 1) and Appendix D.4.
    """

    # Tensor-parallel roles of the projections (keras_vit.layers.sharding).
    sharding_roles = {"kernel|position_embeddings": WIDTH}

    def __init__(
        self,
        hidden_dim,
        patch_size,
        class_token=True,
        position_embedding="learned",
        dropout_rate=0.0,
        use_mask_embedding=False,
        kernel_initializer="lecun_normal",
        num_register_tokens=0,
        distillation_token=False,
        prefix_position_embedding=True,
        dynamic_image_size=False,
        position_embedding_grid=None,
        patch_norm=None,
        patch_norm_epsilon=1e-6,
        position_embedding_interpolation="bicubic",
        position_embedding_antialias=True,
        position_embedding_align_corners=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if position_embedding_interpolation not in naflex_position.INTERPOLATIONS:
            raise ValueError(
                f"position_embedding_interpolation must be one of "
                f"{naflex_position.INTERPOLATIONS}. Received: "
                f"position_embedding_interpolation={position_embedding_interpolation!r}"
            )
        self.position_embedding_interpolation = position_embedding_interpolation
        self.position_embedding_antialias = check_bool(
            position_embedding_antialias, "position_embedding_antialias"
        )
        self.position_embedding_align_corners = check_bool(
            position_embedding_align_corners, "position_embedding_align_corners"
        )
        if position_embedding_antialias and position_embedding_align_corners:
            raise ValueError(
                "position_embedding_align_corners=True needs position_embedding_antialias="
                "False. Received: both True"
            )
        self.patch_norm = None if patch_norm is None else check_norm(patch_norm)
        self.patch_norm_epsilon = check_epsilon(patch_norm_epsilon, "patch_norm_epsilon")
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
        num_register_tokens = check_non_negative_int(num_register_tokens, "num_register_tokens")
        self.num_register_tokens = num_register_tokens
        for name, value in (
            ("distillation_token", distillation_token),
            ("prefix_position_embedding", prefix_position_embedding),
            ("dynamic_image_size", dynamic_image_size),
        ):
            if not isinstance(value, bool):
                raise ValueError(f"{name} must be a bool. Received: {name}={value!r}")
        self.distillation_token = distillation_token
        self.prefix_position_embedding = prefix_position_embedding
        self.dynamic_image_size = dynamic_image_size
        if position_embedding_grid is not None:
            position_embedding_grid = check_positive_int_pair(
                position_embedding_grid, "position_embedding_grid"
            )
        self.position_embedding_grid = position_embedding_grid
        self.dropout = keras.layers.Dropout(
            self.dropout_rate, dtype=self.dtype_policy, name="dropout"
        )
        self.image_size = None
        self.grid_size = None
        self.num_channels = None

    @property
    def num_prefix_tokens(self):
        """Tokens before the patches: class + distillation + register tokens."""
        return int(self.class_token) + int(self.distillation_token) + self.num_register_tokens

    @property
    def num_prefix_positions(self):
        """Prefix rows of the position embedding: `num_prefix_tokens`, or 0 without prefix rows."""
        return self.num_prefix_tokens if self.prefix_position_embedding else 0

    @property
    def num_patches(self):
        """Patches of the layer's own grid (the position embedding's grid)."""
        return None if self.grid_size is None else self.grid_size[0] * self.grid_size[1]

    def _built_grid(self, shape):
        """The position-embedding grid for a build input `shape` (checked)."""
        _, height, width, channels = shape
        ph, pw = self.patch_size
        static = height is not None and width is not None
        grid = self.position_embedding_grid
        if grid is None:
            if not static:
                raise ValueError(
                    f"Layer '{self.name}' needs static image height and width to build its "
                    "position embedding, or dynamic_image_size=True with "
                    f"position_embedding_grid=(rows, columns). Received: input shape={shape}"
                )
            grid = (height // ph, width // pw)
        elif static and not self.dynamic_image_size and grid != (height // ph, width // pw):
            raise ValueError(
                f"Layer '{self.name}' has position_embedding_grid={grid} but its input "
                f"makes a grid of {(height // ph, width // pw)} (and dynamic_image_size is "
                f"off). Received: input shape={shape}"
            )
        if channels is None:
            raise ValueError(
                f"Layer '{self.name}' needs a static channel count. Received: input shape={shape}"
            )
        if grid[0] * grid[1] > MAX_TOKENS:
            raise ValueError(
                f"Layer '{self.name}' would make {grid[0] * grid[1]:,} patch tokens (a "
                f"{grid[0]} x {grid[1]} grid of {ph} x {pw} patches), more than the "
                f"{MAX_TOKENS:,} keras_vit allows (a 256 x 256 grid, already 2^32 attention "
                f"weights per head): use a smaller image_size or a larger patch_size. "
                f"Received: input shape={shape}, patch_size={self.patch_size}"
            )
        return grid

    def build(self, input_shape):
        shape = check_image_shape(input_shape, self.patch_size, name=self.name)
        grid = self._built_grid(shape)
        ph, pw = self.patch_size
        self.image_size = (grid[0] * ph, grid[1] * pw)
        self.num_channels = shape[3]
        self.grid_size = tuple(grid)
        channels = shape[3]
        build_patch_weights(self, channels)
        if self.use_mask_embedding:
            self.mask_embedding = self.add_weight(
                name="mask_embedding",
                shape=(1, 1, self.hidden_dim),
                initializer=keras.initializers.RandomNormal(stddev=0.02),
            )
        if self.position_embedding == "learned":
            self.position_embeddings = self.add_weight(
                name="position_embeddings",
                shape=(1, self.num_prefix_positions + self.num_patches, self.hidden_dim),
                initializer=keras.initializers.RandomNormal(stddev=0.02),
            )
        elif self.position_embedding == "sincos2d":
            self._sincos_table = pe.sincos_2d_position_embedding(self.grid_size, self.hidden_dim)
        if self.patch_norm is not None:
            self.embedding_norm = make_norm(
                self.patch_norm, self.patch_norm_epsilon, "patch_norm", self.dtype_policy
            )
            self.embedding_norm.build((None, None, self.hidden_dim))
        num_tokens = None if self.dynamic_image_size else self.num_patches + self.num_prefix_tokens
        self.dropout.build((None, num_tokens, self.hidden_dim))
        self.built = True

    def _project_grid(self, images, patch_size=None):
        """`(B, H, W, C)` -> `(B, H / ph, W / pw, D)` patch embeddings (kernel PI-resized to
        `patch_size` when given)."""
        kernel, strides = self.kernel, self.patch_size
        if patch_size is not None and patch_size != self.patch_size:
            kernel, strides = resample_patch_embedding_ops(kernel, patch_size), patch_size
        x = ops.conv(images, kernel, strides=strides, padding="valid")
        return x + ops.cast(self.bias, x.dtype)

    def project(self, images):
        """The linear patch projection alone: `(B, H, W, C)` -> `(B, N, D)`."""
        if attention_module.torch_fast_path():  # the same convolution without ops.conv's copies
            from keras_vit.layers import _torch_kernels

            return _torch_kernels.patch_projection(self, images)
        x = ops.conv(images, self.kernel, strides=self.patch_size, padding="valid")
        if self.dynamic_image_size:
            x = ops.reshape(x, (ops.shape(x)[0], -1, self.hidden_dim))
        else:
            x = ops.reshape(x, (-1, self.num_patches, self.hidden_dim))
        return x + self.bias

    def _check_per_patch(self, value, name):
        """Checks that `value` (a patch_mask or patch_source) has shape (batch, num_patches)."""
        shape = tuple(value.shape)
        patches = None if self.dynamic_image_size else self.num_patches
        if len(shape) != 2 or shape[1] not in (None, patches) and patches is not None:
            raise ValueError(
                f"{name} must have shape (batch, {patches}). Received: {name}.shape={shape}"
            )

    def _prefix_tokens(self, batch, dtype):
        """`(B, prefix, D)`: class, distillation and register tokens (+ their positions)."""
        parts = []
        if self.class_token:
            parts.append(self.class_embedding)
        if self.distillation_token:
            parts.append(self.distillation_embedding)
        if self.num_register_tokens:
            parts.append(self.register_embeddings)
        prefix = ops.cast(ops.concatenate(parts, axis=1) if len(parts) > 1 else parts[0], dtype)
        if self.prefix_position_embedding and self.position_embedding == "learned":
            positions = self.position_embeddings[:, : self.num_prefix_tokens]
            prefix = prefix + ops.cast(positions, dtype)
        return ops.broadcast_to(
            prefix, (ops.shape(batch)[0], self.num_prefix_tokens, self.hidden_dim)
        )

    def call(self, images, patch_mask=None, patch_source=None, patch_size=None, training=None):
        if patch_size is not None:
            patch_size = check_positive_int_pair(patch_size, "patch_size")
            if patch_size != self.patch_size and not self.dynamic_image_size:
                raise ValueError(
                    f"Layer '{self.name}' embeds with another patch size only with "
                    f"dynamic_image_size=True. Received: patch_size={patch_size}, "
                    f"layer patch_size={self.patch_size}"
                )
        check_image_shape(
            images.shape,
            patch_size or self.patch_size,
            name=self.name,
            channels=self.num_channels,
            image_size=None if self.dynamic_image_size else self.image_size,
        )
        if self.dynamic_image_size:
            x = self._project_grid(images, patch_size)
            shape = ops.shape(x)
            grid = (shape[1], shape[2])
            x = ops.reshape(x, (shape[0], -1, self.hidden_dim))
        else:
            x = self.project(images)
            grid = None
        if self.patch_norm is not None:
            x = self.embedding_norm(x)
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
        positions = self.patch_position_embedding(grid)
        if positions is not None:
            x = x + ops.cast(positions, x.dtype)
        if self.num_prefix_tokens:
            x = ops.concatenate([self._prefix_tokens(x, x.dtype), x], axis=1)
        if attention_module.torch_fast_path() and not (training and self.dropout.rate > 0):
            return x  # the identity, without a Keras layer call
        return self.dropout(x, training=training)

    def compute_output_shape(self, input_shape):
        shape = check_image_shape(input_shape, self.patch_size, name=self.name)
        ph, pw = self.patch_size
        height, width = shape[1], shape[2]
        num = None if height is None or width is None else (height // ph) * (width // pw)
        if num is not None:
            num += self.num_prefix_tokens
        return (shape[0], num, self.hidden_dim)

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
                "num_register_tokens": self.num_register_tokens,
                "distillation_token": self.distillation_token,
                "prefix_position_embedding": self.prefix_position_embedding,
                "dynamic_image_size": self.dynamic_image_size,
                "position_embedding_grid": self.position_embedding_grid,
                "patch_norm": self.patch_norm,
                "patch_norm_epsilon": self.patch_norm_epsilon,
                "position_embedding_interpolation": self.position_embedding_interpolation,
                "position_embedding_antialias": self.position_embedding_antialias,
                "position_embedding_align_corners": self.position_embedding_align_corners,
            }
        )
        return config
