"""Masked patch prediction's corruption (paper Appendix B.1.2): which patches of each image are
masked, replaced by another patch's embedding, or kept, drawn per batch (`keras.random`, seeded).

Reference:
    Dosovitskiy et al., 2021, Sec. 4.6 and Appendix B.1.2 (self-supervision).
"""

import math

import keras
from keras import ops

from keras_vit.layers._checks import check_positive_int_pair, check_seed

__all__ = ["PatchCorruption"]


def check_fractions(corruption_rate, mask_fraction, random_fraction):
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
    check_fractions(corruption_rate, mask_fraction, random_fraction)
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
        check_fractions(corruption_rate, mask_fraction, random_fraction)
        self.corruption_rate = float(corruption_rate)
        self.mask_fraction = float(mask_fraction)
        self.random_fraction = float(random_fraction)
        self.seed = check_seed(seed)
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

