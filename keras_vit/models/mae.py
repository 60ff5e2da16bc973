"""Masked autoencoders (He et al., 2022): pixels of the dropped patches from a quarter of them.

    images -> encoder.patch_encoder (+ positions)     -> TokenDropping (keep 1 - mask_ratio,
              per image, MAE's shuffle)               -> encoder blocks, norm   -> latent
    latent -> decoder_embed -> + mask tokens, unshuffled (ids_restore) -> + fixed 2-D sincos
              -> decoder blocks -> decoder_norm -> decoder_pred -> logits (B, N, ph * pw * C)
    loss   = mean over the dropped patches of the per-patch MSE to the patch pixels
             (each target patch normalised by its mean and variance with `norm_pix_loss`)

The encoder is a keras_vit `VisionTransformer` (`model.encoder`, a `ViT(include_top=False,
pooling=None)` of any family whose position embedding allows dropping: learned, sincos or
rotary); its parts run one by one on the kept tokens. As in MAE (and transformers'
`ViTMAEForPreTraining`) a learned encoder position table is set to MAE's fixed 2-D sincos and
frozen (`fixed_position_embedding`). `model(images, noise=None)` returns transformers' outputs:
`loss`, `logits` (the reconstruction in our `Patches` order, (row, column, channel) per patch)
and `mask` (B, N), 1 = dropped; `noise` (B, N) orders the patches as transformers' `noise=`.
`compile(optimizer)` + `fit(images)` pre-train it on any backend; `extract_encoder` gives the
plain encoder that `keras-vit finetune --init` loads.

Reference:
    He et al., 2022, "Masked Autoencoders Are Scalable Vision Learners", Sec. 3, Appendix A.1.
"""

import dataclasses

import keras
import numpy as np
from keras import ops

from keras_vit.layers import Patches, TransformerBlock
from keras_vit.layers._checks import (
    check_bool,
    check_non_negative_int,
    check_positive_int,
    check_rate,
    check_seed,
)
from keras_vit.layers.sharding import REPLICATED, WIDTH
from keras_vit.layers.token_dropping import (
    TokenDropping,
    check_kept,
    check_noise,
    gather_tokens,
)
from keras_vit.models._patch_loss import weighted_patches, with_layer_losses
from keras_vit.models.arguments import nearest_keys
from keras_vit.models.config import ViTConfig
from keras_vit.models.config_checks import token_dropping_conflicts
from keras_vit.models.encoder import VisionTransformer, build_model, num_prefix_tokens
from keras_vit.models.variable_paths import PATHS

# The decoder's layer names (transformers' ViTMAE names map to them). Block `i` is
# `DECODER_BLOCK.format(i)`.
DECODER_EMBED = "decoder_embed"
DECODER_BLOCK = "decoder_block_{}"
DECODER_NORM = "decoder_norm"
DECODER_PRED = "decoder_pred"


def mae_sincos_table(grid_size, width, num_prefix=1, name="width"):
    """MAE's fixed 2-D sincos table `(1, num_prefix + rows * columns, width)` (NumPy float32).

    Each patch gets `[sin(c w), cos(c w), sin(r w), cos(r w)]` for its column c and row r,
    `w = 1 / 10000 ** (arange(width / 4) / (width / 4))` (MAE's `get_2d_sincos_pos_embed`,
    transformers' table after its half swap); the prefix rows are zeros.

    Example:

    >>> [round(float(v), 3) for v in mae_sincos_table((2, 2), 8)[0, 2]]
    [0.841, 0.01, 0.54, 1.0, 0.0, 0.0, 1.0, 1.0]
    """
    if width % 4:
        raise ValueError(
            f"{name} must be divisible by 4: MAE's fixed 2-D sincos position table gives each "
            f"patch a quarter of it per sin / cos of row and column. Received: {name}={width}"
        )
    quarter = width // 4
    omega = 1.0 / 10000.0 ** (np.arange(quarter, dtype="float64") / quarter)
    rows, cols = np.meshgrid(np.arange(grid_size[0]), np.arange(grid_size[1]), indexing="ij")
    r = np.outer(rows.reshape(-1), omega)
    c = np.outer(cols.reshape(-1), omega)
    table = np.concatenate([np.sin(c), np.cos(c), np.sin(r), np.cos(r)], axis=1)
    table = np.concatenate([np.zeros((num_prefix, width)), table], axis=0)
    return table[None].astype("float32")


def patch_pixels(images, patch_size):
    """`(B, H, W, C)` -> `(B, N, ph * pw * C)` float32, our `Patches` order (MAE's patchify)."""
    return ops.cast(Patches(patch_size)(images), "float32")


def mae_loss(targets, logits, mask, norm_pix_loss=False):
    """Mean over the dropped patches (`mask` 1) of the per-patch squared error.

    `norm_pix_loss` normalises each target patch by its mean and (unbiased, as torch's
    `var`) variance + 1e-6 first.
    """
    targets = ops.cast(targets, "float32")
    if norm_pix_loss:
        mean = ops.mean(targets, axis=-1, keepdims=True)
        n = targets.shape[-1]
        var = ops.sum(ops.square(targets - mean), axis=-1, keepdims=True) / (n - 1)
        targets = (targets - mean) / ops.sqrt(var + 1e-6)
    loss = ops.mean(ops.square(ops.cast(logits, "float32") - targets), axis=-1)
    mask = ops.cast(mask, "float32")
    return ops.sum(loss * mask) / ops.maximum(ops.sum(mask), 1.0)


def mae_encoder_config(config):
    """The headless token-output `ViTConfig` of an MAE encoder, refused with what cannot drop
    tokens (named)."""
    if isinstance(config, dict):
        config = ViTConfig.from_dict(config)
    if not isinstance(config, ViTConfig):
        raise ValueError(
            f"MaskedAutoencoder needs a ViTConfig (or a VisionTransformer's config). "
            f"Received: {type(config).__name__}"
        )
    for name, value, why in token_dropping_conflicts(config):
        raise ValueError(
            f"MaskedAutoencoder drops patch tokens, but an encoder with {name} {why}. "
            f"Received: {name}={value!r}"
        )
    return dataclasses.replace(
        config, include_top=False, pooling=None, fc_norm=False, patch_dropout_rate=0.0
    )


@keras.saving.register_keras_serializable(package="keras_vit")
class MaskedAutoencoder(keras.Model):
    """A masked autoencoder: a keras_vit encoder on the kept patches and a light decoder.

    Args:
        encoder_config: a `ViTConfig` (or its dict, or a `VisionTransformer` whose config and
            encoder weights are taken): the encoder, made headless with token outputs (a
            classifier, pre-logits, `fc_norm` or attention pool of the model is not part of
            it and is left out).
        mask_ratio: float in (0, 1). Fraction of the patches dropped per image (the loss is
            over them: 0 would drop none and train nothing). Defaults to 0.75.
        decoder_hidden_dim, decoder_num_layers, decoder_num_heads, decoder_mlp_dim: the
            decoder's sizes. Default to the paper's 512, 8, 16 and 2048.
        norm_pix_loss: bool. Targets normalised per patch. Defaults to False.
        fixed_position_embedding: bool. A learned encoder position table is set to MAE's
            fixed 2-D sincos and frozen, as MAE does. Defaults to True.
        seed: optional int for the masking noise. Defaults to None.

    Call arguments:
        images: `(B, H, W, C)`.
        noise: optional `(B, N)` float (a NumPy array, list or tensor): its argsort orders
            the patches (kept first); one row per image.
        training: bool.

    Returns:
        dict: `loss` (scalar), `logits` `(B, N, ph * pw * C)`, `mask` `(B, N)` (1 = dropped).

    Example:

    >>> import numpy as np
    >>> config = ViTConfig.from_variant("mu/4", image_size=16)
    >>> model = MaskedAutoencoder(config, decoder_hidden_dim=16, decoder_num_layers=1,
    ...     decoder_num_heads=2, decoder_mlp_dim=32, seed=0)
    >>> out = model(np.zeros((2, 16, 16, 3), "float32"))
    >>> tuple(out["logits"].shape), tuple(out["mask"].shape)
    ((2, 16, 48), (2, 16))
    """

    # Tensor-parallel roles of its own tables (keras_vit.layers.sharding); its Dense layers
    # are projections no layer claims.
    sharding_roles = {"decoder_pos_embed": WIDTH, "mask_token": REPLICATED}

    def __init__(
        self,
        encoder_config,
        mask_ratio=0.75,
        decoder_hidden_dim=512,
        decoder_num_layers=8,
        decoder_num_heads=16,
        decoder_mlp_dim=2048,
        norm_pix_loss=False,
        fixed_position_embedding=True,
        seed=None,
        **kwargs,
    ):
        source = encoder_config if isinstance(encoder_config, VisionTransformer) else None
        config = mae_encoder_config(source.config if source else encoder_config)
        kwargs.setdefault("name", f"mae_{config.name or 'vit'}")
        super().__init__(**kwargs)
        self._encoder_config = config
        # Checked, never coerced: 16.7 is not truncated to 16, nor "False" read as True.
        self.mask_ratio = check_rate(mask_ratio, "mask_ratio")
        if self.mask_ratio == 0:
            raise ValueError(
                "mask_ratio must be in (0, 1): MAE's loss is over the dropped patches, and 0 "
                "drops none (the loss is 0 and nothing is learned). Received: "
                f"mask_ratio={mask_ratio!r}"
            )
        self.decoder_hidden_dim = check_positive_int(decoder_hidden_dim, "decoder_hidden_dim")
        self.decoder_num_layers = check_non_negative_int(decoder_num_layers, "decoder_num_layers")
        self.decoder_num_heads = check_positive_int(decoder_num_heads, "decoder_num_heads")
        self.decoder_mlp_dim = check_positive_int(decoder_mlp_dim, "decoder_mlp_dim")
        self.norm_pix_loss = check_bool(norm_pix_loss, "norm_pix_loss")
        self.fixed_position_embedding = check_bool(
            fixed_position_embedding, "fixed_position_embedding"
        )
        if self.decoder_num_layers and self.decoder_hidden_dim % self.decoder_num_heads:
            raise ValueError(
                "decoder_num_heads must divide decoder_hidden_dim. Received: "
                f"decoder_hidden_dim={self.decoder_hidden_dim}, "
                f"decoder_num_heads={self.decoder_num_heads}"
            )
        self.seed = check_seed(seed)
        if self.decoder_hidden_dim % 4:
            mae_sincos_table((1, 1), self.decoder_hidden_dim, name="decoder_hidden_dim")
        if self.fixed_position_embedding and config.position_embedding == "learned":
            mae_sincos_table((1, 1), config.hidden_dim, name="hidden_dim")
        self.encoder = build_model(config)
        if source is not None:
            copy_encoder_weights(source, self.encoder)
        prefix = num_prefix_tokens(config)
        grid = config.grid_size
        num_patches = grid[0] * grid[1]
        check_kept(num_patches, self.mask_ratio, "mask_ratio")
        self.masking = TokenDropping(self.mask_ratio, prefix, seed=self.seed, name="masking")
        self.masking.build((None, prefix + num_patches, config.hidden_dim))
        encoder_positions = self.encoder.patch_encoder
        if self.fixed_position_embedding and config.position_embedding == "learned":
            table = mae_sincos_table(
                grid, config.hidden_dim, encoder_positions.num_prefix_positions
            )
            if source is None:
                encoder_positions.position_embeddings.assign(table)
            encoder_positions.position_embeddings.trainable = False
        width, ph, pw = self.decoder_hidden_dim, *config.patch_size
        self.decoder_embed = keras.layers.Dense(width, name=DECODER_EMBED)
        self.decoder_embed.build((None, None, config.hidden_dim))
        self.mask_token = self.add_weight(
            name="mask_token",
            shape=(1, 1, width),
            initializer=keras.initializers.RandomNormal(stddev=0.02),
        )
        self.decoder_pos_embed = self.add_weight(
            name="decoder_pos_embed",
            shape=(1, prefix + num_patches, width),
            initializer=keras.initializers.Constant(mae_sincos_table(grid, width, prefix)),
            trainable=False,
        )
        self.decoder_blocks = []
        for i in range(self.decoder_num_layers):
            block = TransformerBlock(
                self.decoder_num_heads,
                self.decoder_mlp_dim,
                layer_norm_epsilon=config.layer_norm_epsilon,
                approximate_gelu=config.approximate_gelu,
                name=DECODER_BLOCK.format(i),
            )
            block.build((None, prefix + num_patches, width))
            self.decoder_blocks.append(block)
        self.decoder_norm = keras.layers.LayerNormalization(
            epsilon=config.layer_norm_epsilon, name=DECODER_NORM
        )
        self.decoder_norm.build((None, None, width))
        self.decoder_pred = keras.layers.Dense(ph * pw * config.num_channels, name=DECODER_PRED)
        self.decoder_pred.build((None, None, width))
        self.built = True

    @property
    def encoder_config(self):
        """The encoder's `ViTConfig` (headless, token outputs)."""
        return self._encoder_config

    def encode(self, images, noise=None, training=None):
        """The encoder on the kept tokens: `(latent (B, P + K, D), mask, ids_restore)`."""
        encoder = self.encoder
        x = encoder.patch_encoder(images, training=training)
        rotary = None if encoder.rotary_embedding is None else encoder.rotary_embedding(images)
        dropped = self.masking(x, noise=noise, rotary_embedding=rotary, training=training)
        x, rotary = dropped["tokens"], dropped.get("rotary_embedding")
        if encoder.pre_norm is not None:
            x = encoder.pre_norm(x)
        for i, block in enumerate(encoder.blocks):
            table = rotary[i] if isinstance(rotary, list) else rotary
            options = {} if table is None else {"rotary_embedding": table}
            x = block(x, training=training, **options)
        if encoder.final_norm is not None:
            x = encoder.final_norm(x)
        return x, dropped["mask"], dropped["ids_restore"]

    def decode(self, latent, ids_restore, training=None):
        """The reconstruction `(B, N, ph * pw * C)` of every patch from the latent tokens."""
        prefix = self.masking.num_prefix_tokens
        x = self.decoder_embed(latent)
        batch, num_patches = ops.shape(x)[0], ids_restore.shape[1]
        kept = x.shape[1] - prefix
        masks = ops.broadcast_to(
            ops.cast(self.mask_token, x.dtype), (batch, num_patches - kept, self.decoder_hidden_dim)
        )
        patches = gather_tokens(ops.concatenate([x[:, prefix:], masks], axis=1), ids_restore)
        x = ops.concatenate([x[:, :prefix], patches], axis=1)
        x = x + ops.cast(self.decoder_pos_embed, x.dtype)
        for block in self.decoder_blocks:
            x = block(x, training=training)
        x = self.decoder_pred(self.decoder_norm(x))
        return x[:, prefix:]

    def __call__(self, images, *args, noise=None, **kwargs):
        shape = tuple(getattr(images, "shape", ()))
        grid = self.encoder_config.grid_size
        noise = check_noise(noise, shape[0] if shape else None, grid[0] * grid[1])
        return super().__call__(images, *args, noise=noise, **kwargs)

    def call(self, images, noise=None, training=None):
        if not keras.backend.is_float_dtype(keras.backend.standardize_dtype(images.dtype)):
            images = ops.cast(images, self.compute_dtype)  # as a functional ViT casts its input
        latent, mask, ids_restore = self.encode(images, noise=noise, training=training)
        logits = self.decode(latent, ids_restore, training=training)
        targets = patch_pixels(images, self.encoder_config.patch_size)
        loss = mae_loss(targets, logits, mask, self.norm_pix_loss)
        return {"loss": loss, "logits": logits, "mask": mask}

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """The reconstruction loss on the dropped patches; labels (`y`) are ignored.

        `sample_weight` (one per image) weights each image's patches, the batch's loss scaled
        by the mean weight (as `MaskedPatchPredictor.compute_loss`).
        """
        del y, training
        if isinstance(x, (tuple, list)):
            x = x[0]
        if sample_weight is None:
            loss = y_pred["loss"]
        else:
            mask, scale = weighted_patches(y_pred["mask"], sample_weight)
            targets = patch_pixels(x, self.encoder_config.patch_size)
            loss = scale * mae_loss(targets, y_pred["logits"], mask, self.norm_pix_loss)
        return with_layer_losses(self, loss)

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "encoder_config": self.encoder_config.to_dict(),
            "mask_ratio": self.mask_ratio,
            "decoder_hidden_dim": self.decoder_hidden_dim,
            "decoder_num_layers": self.decoder_num_layers,
            "decoder_num_heads": self.decoder_num_heads,
            "decoder_mlp_dim": self.decoder_mlp_dim,
            "norm_pix_loss": self.norm_pix_loss,
            "fixed_position_embedding": self.fixed_position_embedding,
            "seed": self.seed,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def copy_encoder_weights(source, encoder):
    """Copies a `VisionTransformer`'s weights into an MAE encoder built from its config.

    The encoder is the source's trunk (patch encoder, blocks, norms), headless: variables are
    matched by path, and the source's head-side ones the encoder lacks (classifier,
    pre-logits, attention pool) are left out. A source whose final norm is its `fc_norm`
    (pooling "gap" with `fc_norm=True`, MAE's fine-tuning head) gives that norm to the
    encoder's final norm, as timm maps MAE's `norm` to `fc_norm` the other way. Every encoder
    variable must be found with its shape.
    """
    weights = {variable.path: variable for variable in source.weights}
    final, fc = PATHS["encoder_norm"], PATHS["fc_norm"]
    for variable in list(weights.values()):  # fc_norm standing in for the final norm
        if variable.path.startswith(fc + "/"):
            weights.setdefault(final + variable.path[len(fc) :], variable)
    missing = [v.path for v in encoder.weights if v.path not in weights]
    shapes = [v.path for v in encoder.weights
              if v.path in weights and tuple(weights[v.path].shape) != tuple(v.shape)]  # fmt: skip
    if missing or shapes:
        raise ValueError(
            f"MaskedAutoencoder could not take the encoder weights of {source.name!r}: "
            f"missing {missing[:5]}, other shapes {shapes[:5]}."
        )
    for variable in encoder.weights:
        variable.assign(ops.convert_to_numpy(weights[variable.path]))


def build_mae_model(variant="B/16", *, image_size=224, num_channels=3, name=None, **kwargs):
    """Builds a `MaskedAutoencoder` on a `ViT(variant)` encoder.

    Args:
        variant: str. The encoder's size and patch code (`"B/16"`, `"mu/4"`, ...). Defaults to
            `"B/16"`.
        image_size: int or (height, width). Defaults to 224.
        num_channels: int. Defaults to 3.
        name: optional model name.
        **kwargs: `MaskedAutoencoder` arguments (`mask_ratio`, `decoder_*`, `norm_pix_loss`,
            `fixed_position_embedding`, `seed`), the rest `ViT` encoder overrides
            (`num_layers`, `hidden_dim`, `position_embedding`, `rotary_embedding`, ...).

    Example:

    >>> model = build_mae_model("mu/4", image_size=16, decoder_hidden_dim=16,
    ...     decoder_num_layers=1, decoder_num_heads=2, decoder_mlp_dim=32)
    >>> model.encoder.output_shape
    (None, 17, 32)
    """
    own = (
        "mask_ratio", "decoder_hidden_dim", "decoder_num_layers", "decoder_num_heads",
        "decoder_mlp_dim", "norm_pix_loss", "fixed_position_embedding", "seed",
    )  # fmt: skip
    options = {key: kwargs.pop(key) for key in own if key in kwargs}
    unknown = sorted(set(kwargs) - set(ViTConfig.argument_names()))
    if unknown:  # a misspelt MAE argument: suggest among both lists
        valid = [*own, *ViTConfig.field_names()]
        raise TypeError(
            f"Unknown build_mae_model arguments {unknown}{nearest_keys(unknown, valid)}. "
            f"Expected MaskedAutoencoder's {list(own)} or ViT encoder arguments."
        )
    config = ViTConfig.from_variant(
        variant,
        image_size=image_size,
        num_channels=num_channels,
        include_top=False,
        pooling=None,
        **kwargs,
    )
    if name is not None:
        options["name"] = name
    return MaskedAutoencoder(config, **options)


def extract_mae_encoder(model, name=None):
    """The pre-trained encoder of a `MaskedAutoencoder` as a new plain `VisionTransformer`
    (`ViT(include_top=False, pooling=None)`, a copy of its weights; the position table
    trainable again), which saves as the `.keras` file `keras-vit finetune --init` loads."""
    if not isinstance(model, MaskedAutoencoder):
        raise ValueError(
            "extract_mae_encoder expects a MaskedAutoencoder (from build_mae_model). "
            f"Received: {type(model).__name__}"
        )
    config = model.encoder_config
    if name is not None:
        config = dataclasses.replace(config, name=name)
    encoder = build_model(config)
    # One variable at a time, value to value: a sharded model's stay on their devices.
    for target, source in zip(encoder.weights, model.encoder.weights, strict=True):
        target.assign(source.value)
    return encoder
