"""Masked patch prediction: the paper's self-supervised pre-training (Sec. 4.6, Appendix B.1.2).

BERT-style corruption of the patch embeddings, targets computed from the images themselves, a
per-token prediction head and a loss counted only on the corrupted patches. Everything is
`keras.ops` / `keras.random` (seeded), so the same model trains with `model.fit` on TensorFlow,
JAX and PyTorch.

How the pieces fit (all inside one functional model, so any image pipeline can feed `fit`):

    images -> PatchCorruption -> (patch_mask, patch_source, weights)      random, per image
    images -> PatchEncoder(images, patch_mask=..., patch_source=...)      mask embedding /
              -> encoder blocks -> encoder_norm -> drop class token       another patch's
              -> Dense head ("mpp_head")                -> predictions    embedding
    images -> PatchTargets                               -> targets       deterministic
    loss = masked_patch_loss(targets, predictions, weights)               `compute_loss`

Labels are never read: `fit(images)` or a pipeline yielding `(images, labels)` both work.
`extract_encoder` returns the plain `ViT(include_top=False, pooling=None)` encoder (mask
embedding and prediction head dropped) that `keras-vit finetune --init` loads.

The corruption and the targets are layers (`keras_vit.layers.patch_corruption`,
`keras_vit.layers.patch_targets`); the loss lives here, beside the model whose `compute_loss` it
is (the training package sits above the models and cannot hold it).

Reference:
    Dosovitskiy et al., 2021, Sec. 4.6 and Appendix B.1.2 (self-supervision).
"""

import inspect

import keras
from keras import ops

from keras_vit.layers._checks import check_positive_int_pair, check_seed
from keras_vit.layers.patch_corruption import PatchCorruption, check_fractions
from keras_vit.layers.patch_targets import (
    DOWNSAMPLED_GRID,
    PatchTargets,
    check_target,
    num_target_classes,
)
from keras_vit.models import variants
from keras_vit.models._patch_loss import weighted_patches, with_layer_losses
from keras_vit.models.config import LEGACY_ARGUMENTS, ViTConfig
from keras_vit.models.encoder import (
    BLOCK_NAME,
    FINAL_NORM,
    PATCH_ENCODER,
    PRE_NORM,
    apply_blocks,
    build_model,
    make_patch_encoder,
)


def per_patch_loss(targets, predictions, target="color"):
    """The loss of every patch, `(B, N)`: cross-entropy (mean over the 16 cells for
    `"downsampled"`) or the mean squared error over the patch pixels (`"pixels"`)."""
    check_target(target)
    predictions = ops.cast(predictions, "float32")
    if target == "pixels":
        return ops.mean(ops.square(predictions - ops.cast(targets, "float32")), axis=-1)
    ce = keras.losses.sparse_categorical_crossentropy(targets, predictions, from_logits=True)
    if target == "downsampled":
        ce = ops.mean(ce, axis=-1)
    return ce


def masked_patch_loss(targets, predictions, weights, target="color"):
    """Mean per-patch loss over the corrupted patches only (`weights` 1 there, 0 elsewhere).

    Args:
        targets: from `patch_targets`.
        predictions: logits `(B, N, K)` (`"color"`), `(B, N, 16, K)` (`"downsampled"`) or
            pixels `(B, N, ph * pw * C)` (`"pixels"`).
        weights: float `(B, N)`.
        target: the target kind. Defaults to `"color"`.

    Returns:
        Scalar: `sum(loss * weights) / max(sum(weights), 1)`.
    """
    weights = ops.cast(weights, "float32")
    loss = per_patch_loss(targets, predictions, target)
    return ops.sum(loss * weights) / ops.maximum(ops.sum(weights), 1.0)


# The `ViT` arguments the pre-training model takes: the sizes and the encoder options. The input
# size, the head (none: tokens) and the name are set here; hybrids are not supported.
ENCODER_KEYS = ViTConfig.field_names("size", "encoder")


def _encoder_config(variant, image_size, num_channels, encoder_kwargs, name):
    """The `ViTConfig` of the plain `ViT(include_top=False, pooling=None)` encoder."""
    if "resnet_units" in variants.parse_variant(variant):
        raise ValueError(
            "Masked patch prediction corrupts patch embeddings of plain ViTs; hybrid variants "
            f"are not supported. Received: variant={variant!r}"
        )
    if encoder_kwargs.get("patch_dropout_rate"):
        raise ValueError(
            "Masked patch prediction predicts every patch; patch dropout would remove some. "
            f"Received: patch_dropout_rate={encoder_kwargs['patch_dropout_rate']!r}"
        )
    unknown = sorted(set(encoder_kwargs) - {*ENCODER_KEYS, *LEGACY_ARGUMENTS})
    if unknown:
        raise ValueError(f"Unknown encoder arguments {unknown}. Expected some of {ENCODER_KEYS}.")
    return ViTConfig.from_variant(
        variant,
        image_size=image_size,
        num_channels=num_channels,
        include_top=False,
        pooling=None,
        name=name,
        **encoder_kwargs,
    )


@keras.saving.register_keras_serializable(package="keras_vit")
class MaskedPatchPredictor(keras.Model):
    """A ViT encoder with masked-patch-prediction corruption, targets, head and loss.

    A functional model (built in `__init__`) whose `compute_loss` is the masked loss, so
    `compile(optimizer)` + `fit(images)` pre-train it on any backend. Its outputs are a dict:
    `predictions`, `targets` and `weights` (1 on corrupted patches). Its encoder's parts are
    roles, as on `VisionTransformer`: `patch_encoder`, `pre_norm`, `blocks`, `final_norm`
    (`encoder_config` is the encoder's `ViTConfig`); the layer names match `keras_vit.ViT`'s,
    plus `corruption`, `targets` and the prediction head `mpp_head`. Prefer the
    `build_mpp_model` builder.

    Args:
        variant: str. ViT size and patch code, e.g. `"B/16"`. Defaults to `"B/16"`.
        image_size: int or (height, width). Defaults to 224.
        num_channels: int. Defaults to 3.
        target: `"color"` (3-bit mean colour), `"downsampled"` (4x4 x 3-bit) or `"pixels"`
            (L2). Defaults to `"color"`.
        corruption_rate, mask_fraction, random_fraction: see `sample_corruption`. Default to
            0.5, 0.8, 0.1.
        color_bits: int. Defaults to 3.
        seed: optional int for the corruption. Defaults to None.
        encoder_kwargs: optional dict of `ViT` overrides (`num_layers`, `hidden_dim`,
            `mlp_dim`, `num_heads`, `patch_size`, dropout rates, ...). Defaults to None.

    Reference:
        Dosovitskiy et al., 2021, Sec. 4.6 and Appendix B.1.2.
    """

    def __init__(
        self,
        variant="B/16",
        image_size=224,
        num_channels=3,
        target="color",
        corruption_rate=0.5,
        mask_fraction=0.8,
        random_fraction=0.1,
        color_bits=3,
        seed=None,
        encoder_kwargs=None,
        **kwargs,
    ):
        check_target(target)
        check_fractions(corruption_rate, mask_fraction, random_fraction)
        encoder_kwargs = dict(encoder_kwargs or {})
        if isinstance(encoder_kwargs.get("patch_size"), list):
            encoder_kwargs["patch_size"] = tuple(encoder_kwargs["patch_size"])
        image_size = check_positive_int_pair(image_size, "image_size")
        config = _encoder_config(variant, image_size, num_channels, encoder_kwargs, None)
        patch_encoder = make_patch_encoder(config, use_mask_embedding=True)
        patch_size = config.patch_size
        images = keras.Input((*image_size, num_channels), name="images")
        patch_mask, patch_source, weights = PatchCorruption(
            patch_size, corruption_rate, mask_fraction, random_fraction, seed, name="corruption"
        )(images)
        x = patch_encoder(images, patch_mask=patch_mask, patch_source=patch_source)
        x = apply_blocks(x, config, features=images)
        x = x[:, patch_encoder.num_prefix_tokens :]
        classes = num_target_classes(target, num_channels, color_bits)
        grid = config.grid_size[0] * config.grid_size[1]
        if target == "pixels":
            units = patch_size[0] * patch_size[1] * num_channels
            predictions = keras.layers.Dense(units, name="mpp_head")(x)
        elif target == "color":
            predictions = keras.layers.Dense(classes, name="mpp_head")(x)
        else:
            cells = DOWNSAMPLED_GRID**2
            predictions = keras.layers.Dense(cells * classes, name="mpp_head")(x)
            predictions = keras.layers.Reshape((grid, cells, classes), name="mpp_cells")(
                predictions
            )
        targets = PatchTargets(patch_size, target, color_bits, name="targets")(images)
        outputs = {"predictions": predictions, "targets": targets, "weights": weights}
        kwargs.setdefault("name", "mpp_" + variants.model_name(variant))
        super().__init__(inputs=images, outputs=outputs, **kwargs)
        self.variant = variant
        self.image_size = image_size
        self.num_channels = num_channels
        self.target = target
        self.corruption_rate = corruption_rate
        self.mask_fraction = mask_fraction
        self.random_fraction = random_fraction
        self.color_bits = color_bits
        self.seed = check_seed(seed)
        self.encoder_kwargs = encoder_kwargs
        self._encoder_config = config

    @property
    def encoder_config(self):
        """The `ViTConfig` of the encoder (`extract_encoder` builds it)."""
        return self._encoder_config

    @property
    def patch_encoder(self):
        """The `PatchEncoder` (with its mask embedding)."""
        return self.get_layer(PATCH_ENCODER)

    @property
    def pre_norm(self):
        """The LayerNorm before the blocks, or None."""
        return self.get_layer(PRE_NORM) if self.encoder_config.pre_norm else None

    @property
    def blocks(self):
        """The `TransformerBlock`s, first to last."""
        return [
            self.get_layer(BLOCK_NAME.format(i)) for i in range(self.encoder_config.num_layers)
        ]

    @property
    def final_norm(self):
        """The LayerNorm after the blocks, or None (with `fc_norm`)."""
        keep = self.encoder_config.final_norm and not self.encoder_config.fc_norm
        return self.get_layer(FINAL_NORM) if keep else None

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """The masked loss on the corrupted patches; labels (`y`) are ignored.

        `sample_weight` (one per image, optional) weights each image's patches, and as in Keras'
        losses (a weighted sum divided by the batch size) the batch's loss is scaled by the mean
        weight: images of weight 0 (the padding of a multi-process evaluation) drop out, and
        weights of 1 change nothing.
        """
        del x, y, training
        weights, scale = weighted_patches(y_pred["weights"], sample_weight)
        loss = scale * masked_patch_loss(
            y_pred["targets"], y_pred["predictions"], weights, self.target
        )
        return with_layer_losses(self, loss)

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "variant": self.variant,
            "image_size": self.image_size,
            "num_channels": self.num_channels,
            "target": self.target,
            "corruption_rate": self.corruption_rate,
            "mask_fraction": self.mask_fraction,
            "random_fraction": self.random_fraction,
            "color_bits": self.color_bits,
            "seed": self.seed,
            "encoder_kwargs": dict(self.encoder_kwargs),
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)


# The arguments of `MaskedPatchPredictor` that `build_mpp_model` passes on by name.
MPP_OPTIONS = tuple(
    p
    for p in inspect.signature(MaskedPatchPredictor.__init__).parameters
    if p not in ("self", "variant", "encoder_kwargs", "kwargs")
)


def build_mpp_model(variant="B/16", *, name=None, **kwargs):
    """Builds the masked-patch-prediction pre-training model (`MaskedPatchPredictor`).

    Args:
        variant: str. ViT size and patch code (`"B/16"`, `"Ti/4"`, `"mu/4"`, ...). Defaults to
            `"B/16"`.
        image_size: int or (height, width). Defaults to 224.
        num_channels: int. Defaults to 3.
        target: `"color"` (3-bit mean colour, the paper's choice), `"downsampled"` (4x4
            downsized patch, 16 x 512-way) or `"pixels"` (L2 on the patch pixels). Defaults to
            `"color"`.
        corruption_rate: float. Fraction of patches corrupted per image. Defaults to 0.5.
        mask_fraction: float. Corrupted patches given the mask embedding. Defaults to 0.8.
        random_fraction: float. Corrupted patches given another patch's embedding. Defaults
            to 0.1 (the remaining 0.1 stay unchanged).
        color_bits: int. Bits per channel of the colour targets. Defaults to 3.
        seed: optional int for the corruption draws. Defaults to None.
        name: optional model name.
        **kwargs: the arguments above (keyword only; `MaskedPatchPredictor`'s defaults), and
            the `ViT` overrides: `num_layers`, `hidden_dim`, `mlp_dim`,
            `num_heads`, `patch_size`, `dropout_rate`, `attention_dropout_rate`,
            `drop_path_rate`, `approximate_gelu`, `layer_norm_epsilon`,
            `layer_scale_init_value`, `position_embedding`, `class_token`,
            `num_register_tokens`, `distillation_token`, `prefix_position_embedding`,
            `pre_norm`, `qk_norm`, `activation`.

    Returns:
        A `MaskedPatchPredictor` (a functional `keras.Model`); `compile(optimizer)` and
        `fit(images)`.

    Example:

    >>> model = build_mpp_model("mu/4", image_size=16, num_channels=1, seed=0)
    >>> model.compile(optimizer="adam")
    >>> model.output["predictions"].shape
    (None, 16, 8)

    Reference:
        Dosovitskiy et al., 2021, Sec. 4.6 and Appendix B.1.2.
    """
    # The model's own arguments keep MaskedPatchPredictor's defaults; the rest are ViT overrides.
    options = {key: kwargs.pop(key) for key in MPP_OPTIONS if key in kwargs}
    if name is not None:
        options["name"] = name
    return MaskedPatchPredictor(variant, encoder_kwargs=kwargs, **options)


def extract_encoder(model, name=None):
    """The pre-trained encoder as a plain `ViT(include_top=False, pooling=None)`.

    Copies the patch projection, prefix tokens, position embedding, every block and the norms
    role by role (`patch_encoder`, `pre_norm`, `blocks`, `final_norm` of both models); the mask
    embedding, the corruption and the prediction head are dropped. The result saves as a
    `.keras` file that `keras-vit finetune --init` loads.

    Args:
        model: a `MaskedPatchPredictor` (e.g. loaded from `model.keras`).
        name: optional name of the encoder model.

    Returns:
        A `VisionTransformer` returning `(B, 1 + N, D)` tokens.
    """
    if not isinstance(model, MaskedPatchPredictor):
        raise ValueError(
            "extract_encoder expects a MaskedPatchPredictor (from build_mpp_model). "
            f"Received: {type(model).__name__}"
        )
    config = _encoder_config(
        model.variant,
        model.image_size,
        model.num_channels,
        model.encoder_kwargs,
        name or variants.model_name(model.variant),
    )
    encoder = build_model(config)
    target, source = encoder.patch_encoder, model.patch_encoder
    for attr in (
        "kernel",
        "bias",
        "class_embedding",
        "distillation_embedding",
        "register_embeddings",
        "position_embeddings",
    ):
        if hasattr(target, attr):
            # A NumPy copy: on JAX, sharing the buffer would let training one model (which
            # donates its buffers) delete the other's weights.
            getattr(target, attr).assign(ops.convert_to_numpy(getattr(source, attr)))
    pairs = [
        (encoder.pre_norm, model.pre_norm),
        *zip(encoder.blocks, model.blocks, strict=True),
        (encoder.final_norm, model.final_norm),
    ]
    for target, source in pairs:
        if target is not None:
            target.set_weights(source.get_weights())
    return encoder
