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

Reference:
    Dosovitskiy et al., 2021, Sec. 4.6 and Appendix B.1.2 (self-supervision).
"""

import inspect
import math

import keras
import numpy as np
from keras import ops

from keras_vit.layers import PatchEncoder
from keras_vit.layers._checks import check_positive_int_pair
from keras_vit.models import variants
from keras_vit.models.config import ViTConfig
from keras_vit.models.encoder import apply_blocks, build_model, make_patch_encoder

TARGETS = ("color", "downsampled", "pixels")
DOWNSAMPLED_GRID = 4  # the paper's 4x4 downsized patch (16 x 512-way)


def _check_fractions(corruption_rate, mask_fraction, random_fraction):
    for name, value in (
        ("corruption_rate", corruption_rate),
        ("mask_fraction", mask_fraction),
        ("random_fraction", random_fraction),
    ):
        if not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be a number in [0, 1]. Received: {name}={value!r}")
    if mask_fraction + random_fraction > 1.0 + 1e-9:
        raise ValueError(
            "mask_fraction + random_fraction must be <= 1 (the rest stays unchanged). "
            f"Received: mask_fraction={mask_fraction}, random_fraction={random_fraction}"
        )


def num_corrupted(num_patches, corruption_rate):
    """Patches corrupted per image: `round(corruption_rate * num_patches)` (halves round up)."""
    return int(math.floor(corruption_rate * num_patches + 0.5))


def sample_corruption(
    batch_size,
    num_patches,
    corruption_rate=0.5,
    mask_fraction=0.8,
    random_fraction=0.1,
    seed=None,
):
    """Draws the BERT-style corruption of Appendix B.1.2 for a batch.

    Per image exactly `round(corruption_rate * num_patches)` patches are chosen (uniformly,
    without replacement). Each chosen patch independently gets the mask embedding with
    probability `mask_fraction`, another random patch's embedding (of the same image, never
    itself) with probability `random_fraction`, and is left unchanged otherwise. All three kinds
    are predicted and count in the loss.

    Args:
        batch_size: int or scalar tensor. B.
        num_patches: int. N.
        corruption_rate: float in [0, 1]. Fraction of patches corrupted. Defaults to 0.5.
        mask_fraction: float. Share of corrupted patches given the mask embedding.
            Defaults to 0.8.
        random_fraction: float. Share of corrupted patches given another patch's embedding.
            Defaults to 0.1.
        seed: None, an int or a `keras.random.SeedGenerator` (pass a generator to get fresh
            draws on every call inside a layer or a traced function).

    Returns:
        `(patch_mask, patch_source, weights)`: bool `(B, N)` (mask embedding here), int32
        `(B, N)` (the patch whose embedding goes at each position; the identity outside the
        random-replacement positions) and float32 `(B, N)` (1 on corrupted patches, else 0).

    Example:

    >>> mask, source, weights = sample_corruption(2, 16, seed=0)
    >>> [int(w) for w in keras.ops.convert_to_numpy(keras.ops.sum(weights, axis=1))]
    [8, 8]
    """
    _check_fractions(corruption_rate, mask_fraction, random_fraction)
    num_patches = int(num_patches)
    if not isinstance(seed, keras.random.SeedGenerator):
        seed = keras.random.SeedGenerator(seed)
    shape = (batch_size, num_patches)
    count = num_corrupted(num_patches, corruption_rate)
    # Exactly `count` per image: the positions of the `count` smallest uniform scores.
    scores = keras.random.uniform(shape, seed=seed)
    ranks = ops.argsort(ops.argsort(scores, axis=1), axis=1)
    corrupted = ops.less(ranks, count)
    kind = keras.random.uniform(shape, seed=seed)
    patch_mask = ops.logical_and(corrupted, ops.less(kind, mask_fraction))
    replace = ops.logical_and(
        corrupted,
        ops.logical_and(
            ops.greater_equal(kind, mask_fraction),
            ops.less(kind, mask_fraction + random_fraction),
        ),
    )
    positions = ops.expand_dims(ops.arange(num_patches, dtype="int32"), 0)
    if num_patches > 1:
        offset = keras.random.randint(shape, 1, num_patches, seed=seed, dtype="int32")
        other = ops.mod(positions + offset, num_patches)
    else:  # a single patch has no other patch to borrow
        other = positions + ops.zeros(shape, "int32")
    patch_source = ops.where(replace, other, positions + ops.zeros(shape, "int32"))
    return patch_mask, ops.cast(patch_source, "int32"), ops.cast(corrupted, "float32")


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchCorruption(keras.layers.Layer):
    """Draws a fresh masked-patch-prediction corruption for every batch of images.

    Wraps `sample_corruption` with a seeded `keras.random.SeedGenerator`. It corrupts at
    evaluation too (the pre-training model's validation loss is the same task).

    Args:
        patch_size: int or (height, width). Patch size of the encoder.
        corruption_rate: float in [0, 1]. Defaults to 0.5.
        mask_fraction: float in [0, 1]. Defaults to 0.8.
        random_fraction: float in [0, 1]. Defaults to 0.1.
        seed: optional int. Defaults to None.

    Call arguments:
        images: `(B, H, W, C)`.

    Returns:
        `(patch_mask bool (B, N), patch_source int32 (B, N), weights float32 (B, N))`.

    Example:

    >>> import numpy as np
    >>> mask, source, weights = PatchCorruption(4, seed=1)(np.zeros((3, 16, 16, 1), "float32"))
    >>> tuple(weights.shape)
    (3, 16)

    Reference:
        Dosovitskiy et al., 2021, Appendix B.1.2.
    """

    def __init__(
        self,
        patch_size,
        corruption_rate=0.5,
        mask_fraction=0.8,
        random_fraction=0.1,
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.patch_size = check_positive_int_pair(patch_size, "patch_size")
        _check_fractions(corruption_rate, mask_fraction, random_fraction)
        self.corruption_rate = float(corruption_rate)
        self.mask_fraction = float(mask_fraction)
        self.random_fraction = float(random_fraction)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed, name="seed_generator")

    def _num_patches(self, shape):
        if len(shape) != 4 or shape[1] is None or shape[2] is None:
            raise ValueError(
                f"Layer '{self.name}' expects images (batch, height, width, channels) with "
                f"static height and width. Received: shape={tuple(shape)}"
            )
        (ph, pw), (h, w) = self.patch_size, shape[1:3]
        if h % ph or w % pw:
            raise ValueError(
                "image height and width must be divisible by the patch size. "
                f"Received: image shape={tuple(shape)}, patch_size={self.patch_size}"
            )
        return (h // ph) * (w // pw)

    def build(self, input_shape):
        self._num_patches(input_shape)
        self.built = True

    def call(self, images):
        num_patches = self._num_patches(tuple(images.shape))
        return sample_corruption(
            ops.shape(images)[0],
            num_patches,
            self.corruption_rate,
            self.mask_fraction,
            self.random_fraction,
            seed=self.seed_generator,
        )

    def compute_output_shape(self, input_shape):
        shape = (input_shape[0], self._num_patches(input_shape))
        return shape, shape, shape

    def compute_output_spec(self, images):
        shape = (images.shape[0], self._num_patches(tuple(images.shape)))
        return (
            keras.KerasTensor(shape, dtype="bool"),
            keras.KerasTensor(shape, dtype="int32"),
            keras.KerasTensor(shape, dtype="float32"),
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "patch_size": self.patch_size,
                "corruption_rate": self.corruption_rate,
                "mask_fraction": self.mask_fraction,
                "random_fraction": self.random_fraction,
                "seed": self.seed,
            }
        )
        return config


def _check_target(target):
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}. Received: target={target!r}")


def _image_patches(images, patch_size):
    """`(B, H, W, C)` -> `(B, N, ph, pw, C)`, patches in row-major order (as `Patches`)."""
    _, height, width, channels = tuple(images.shape)
    ph, pw = patch_size
    gh, gw = height // ph, width // pw
    x = ops.reshape(images, (-1, gh, ph, gw, pw, channels))
    x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
    return ops.reshape(x, (-1, gh * gw, ph, pw, channels))


def quantize_colors(values, color_bits=3):
    """Maps values in [-1, 1] to `2**color_bits` levels: `floor((v + 1) / 2 * L)` clipped to L-1."""
    levels = 2**color_bits
    q = ops.floor((ops.cast(values, "float32") + 1.0) * (0.5 * levels))
    return ops.cast(ops.clip(q, 0, levels - 1), "int32")


def _color_class(quantized, color_bits):
    """Combines per-channel levels `(..., C)` into one class: c0 * L^(C-1) + ... + c_{C-1}."""
    levels = 2**color_bits
    channels = quantized.shape[-1]
    weights = np.array([levels ** (channels - 1 - c) for c in range(channels)], "int32")
    return ops.sum(quantized * ops.convert_to_tensor(weights), axis=-1)


def num_target_classes(target, num_channels, color_bits=3):
    """Classes per predicted colour (`2**(bits * C)`: 512 for RGB, 8 for gray); None for pixels."""
    _check_target(target)
    return None if target == "pixels" else (2**color_bits) ** num_channels


def patch_targets(images, patch_size, target="color", color_bits=3):
    """The masked-patch-prediction targets of every patch, computed from the images.

    Args:
        images: `(B, H, W, C)` in [-1, 1] (static H, W, C).
        patch_size: int or (height, width).
        target: `"color"`: the 3-bit mean colour (per channel the patch mean quantised to 8
            levels; class `c0 * 64 + c1 * 8 + c2` for RGB, 512 classes; 8 for one channel).
            `"downsampled"`: the patch downsized to 4x4 by averaging, each cell a 3-bit colour
            class (16 x 512-way; the patch size must be divisible by 4). `"pixels"`: the raw
            patch pixels for L2 regression, in `Patches` order (row, column, channel).
            Defaults to `"color"`.
        color_bits: int. Bits per channel. Defaults to 3.

    Returns:
        int32 `(B, N)` for `"color"`, int32 `(B, N, 16)` for `"downsampled"`, float32
        `(B, N, ph * pw * C)` for `"pixels"`.

    Example:

    >>> import numpy as np
    >>> t = patch_targets(np.ones((1, 8, 8, 3), "float32"), 4)  # white: level 7 everywhere
    >>> keras.ops.convert_to_numpy(t).tolist()
    [[511, 511, 511, 511]]
    """
    _check_target(target)
    patch_size = check_positive_int_pair(patch_size, "patch_size")
    shape = tuple(images.shape)
    if len(shape) != 4 or None in shape[1:]:
        raise ValueError(
            "images must have shape (batch, height, width, channels) with static sizes. "
            f"Received: shape={shape}"
        )
    if shape[1] % patch_size[0] or shape[2] % patch_size[1]:
        raise ValueError(
            "image height and width must be divisible by the patch size. "
            f"Received: image shape={shape}, patch_size={patch_size}"
        )
    patches = _image_patches(ops.cast(images, "float32"), patch_size)
    ph, pw = patch_size
    channels = shape[-1]
    if target == "pixels":
        return ops.reshape(patches, (-1, patches.shape[1], ph * pw * channels))
    if target == "color":
        return _color_class(quantize_colors(ops.mean(patches, axis=(2, 3)), color_bits), color_bits)
    g = DOWNSAMPLED_GRID
    if ph % g or pw % g:
        raise ValueError(
            f"target='downsampled' needs a patch size divisible by {g}. "
            f"Received: patch_size={patch_size}"
        )
    n = patches.shape[1]
    cells = ops.reshape(patches, (-1, n, g, ph // g, g, pw // g, channels))
    cells = ops.mean(cells, axis=(3, 5))  # (B, N, 4, 4, C)
    classes = _color_class(quantize_colors(cells, color_bits), color_bits)
    return ops.reshape(classes, (-1, n, g * g))


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchTargets(keras.layers.Layer):
    """Layer form of `patch_targets` (no weights), so the targets live inside the model.

    Args:
        patch_size: int or (height, width).
        target: `"color"`, `"downsampled"` or `"pixels"`. Defaults to `"color"`.
        color_bits: int. Defaults to 3.

    Call arguments:
        images: `(B, H, W, C)` in [-1, 1].

    Returns:
        See `patch_targets`.

    Reference:
        Dosovitskiy et al., 2021, Appendix B.1.2.
    """

    def __init__(self, patch_size, target="color", color_bits=3, **kwargs):
        super().__init__(**kwargs)
        self.patch_size = check_positive_int_pair(patch_size, "patch_size")
        _check_target(target)
        if not isinstance(color_bits, int) or not 1 <= color_bits <= 8:
            raise ValueError(
                f"color_bits must be an int in [1, 8]. Received: color_bits={color_bits!r}"
            )
        self.target = target
        self.color_bits = color_bits

    def call(self, images):
        return patch_targets(images, self.patch_size, self.target, self.color_bits)

    def compute_output_spec(self, images):
        b, h, w, c = tuple(images.shape)
        ph, pw = self.patch_size
        n = (h // ph) * (w // pw)
        if self.target == "pixels":
            return keras.KerasTensor((b, n, ph * pw * c), dtype="float32")
        if self.target == "color":
            return keras.KerasTensor((b, n), dtype="int32")
        return keras.KerasTensor((b, n, DOWNSAMPLED_GRID**2), dtype="int32")

    def compute_output_shape(self, input_shape):
        return self.compute_output_spec(keras.KerasTensor(input_shape)).shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {"patch_size": self.patch_size, "target": self.target, "color_bits": self.color_bits}
        )
        return config


def per_patch_loss(targets, predictions, target="color"):
    """The loss of every patch, `(B, N)`: cross-entropy (mean over the 16 cells for
    `"downsampled"`) or the mean squared error over the patch pixels (`"pixels"`)."""
    _check_target(target)
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
    unknown = sorted(set(encoder_kwargs) - set(ENCODER_KEYS))
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
    `predictions`, `targets` and `weights` (1 on corrupted patches). Layer names match
    `keras_vit.ViT` (`patch_encoder`, `encoderblock_i`, `encoder_norm`), plus `corruption`,
    `targets` and the prediction head `mpp_head`. Prefer the `build_mpp_model` builder.

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
        _check_target(target)
        _check_fractions(corruption_rate, mask_fraction, random_fraction)
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
        x = apply_blocks(x, config)
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
        self.seed = seed
        self.encoder_kwargs = encoder_kwargs

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """The masked loss on the corrupted patches; labels (`y`) are ignored.

        `sample_weight` (one per image, optional) weights each image's patches, and as in Keras'
        losses (a weighted sum divided by the batch size) the batch's loss is scaled by the mean
        weight: images of weight 0 (the padding of a multi-process evaluation) drop out, and
        weights of 1 change nothing.
        """
        del x, y, training
        weights, scale = y_pred["weights"], 1.0
        if sample_weight is not None:
            sample_weight = ops.reshape(ops.cast(sample_weight, "float32"), (-1,))
            weights = ops.cast(weights, "float32") * sample_weight[:, None]
            scale = ops.mean(sample_weight)
        loss = scale * masked_patch_loss(
            y_pred["targets"], y_pred["predictions"], weights, self.target
        )
        for extra in self.losses:
            loss = loss + ops.cast(extra, loss.dtype)
        return loss

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

    Copies the patch projection, class token, position embedding, every block and the final
    norm by layer name; the mask embedding, the corruption and the prediction head are
    dropped. The result saves as a `.keras` file that `keras-vit finetune --init` loads.

    Args:
        model: a `MaskedPatchPredictor` (e.g. loaded from `model.keras`).
        name: optional name of the encoder model.

    Returns:
        A functional `keras.Model` returning `(B, 1 + N, D)` tokens.
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
    for layer in encoder.layers:
        if not layer.weights:
            continue
        source = model.get_layer(layer.name)
        if isinstance(layer, PatchEncoder):
            for attr in (
                "kernel",
                "bias",
                "class_embedding",
                "distillation_embedding",
                "register_embeddings",
                "position_embeddings",
            ):
                if hasattr(layer, attr):
                    # A NumPy copy: on JAX, sharing the buffer would let training one model
                    # (which donates its buffers) delete the other's weights.
                    getattr(layer, attr).assign(ops.convert_to_numpy(getattr(source, attr)))
        else:
            layer.set_weights(source.get_weights())
    return encoder
