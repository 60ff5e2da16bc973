"""Augmentation: our `RandomResizedCrop` layer and Keras 3's own augmentation layers by name.

Keras 3 ships RandAugment, MixUp, CutMix and RandomErasing that run on all three backends (and
inside `tf.data`), so they are the default. Keras has no inception-style random-resized-crop layer,
so `RandomResizedCrop` below is ours (the `tf.data` pipeline uses the equivalent stateless op
`keras_vit.data.random_resized_crop`).

keras-cv: `build_augmenters` also takes keras-cv layers by name (`"keras_cv.GridMask"`,
`"keras_cv.RandAugment(magnitude=0.3)"`; see `keras_vit.training.cv_augment`, the `cv` extra) and
any callable `Layer` instance, e.g. `build_augmenters(["randaugment", keras_cv.layers.GridMask()])`.
keras-cv stays optional: version 0.9 also installs the obsolete keras-core 0.1.7 package (unused
under Keras 3) and has no random-resized-crop layer.
"""

import math

import keras
from keras import ops

from keras_vit.training import cv_augment

# name -> (Keras class name, default kwargs, acts on labels too)
AUGMENTERS = {
    "randaugment": ("RandAugment", dict(value_range=(0, 255), num_ops=2, factor=0.5), False),
    "random_erasing": ("RandomErasing", dict(value_range=(0, 255)), False),
    "mixup": ("MixUp", dict(alpha=0.2), True),
    "cutmix": ("CutMix", dict(factor=1.0), True),
    # Geometric jitter, one Keras layer each. The border is filled with 0 (black); pass
    # `("random_rotation", {"fill_mode": "reflect"})` etc. for natural images. Caveat: each
    # resamples the already cropped-and-resized batch (bilinear), a blur the evaluation images
    # never get; on digits (8 px upsampled to 24) the three together cost ~8 points of test
    # accuracy (benchmarks/RESULTS.md), so the digits recipe jitters through the crop instead.
    "random_rotation": ("RandomRotation", dict(factor=1 / 30, fill_mode="constant"), False),
    "random_translation": (
        "RandomTranslation", dict(height_factor=0.1, width_factor=0.1, fill_mode="constant"), False
    ),
    "random_zoom": ("RandomZoom", dict(height_factor=0.1, fill_mode="constant"), False),
}


def build_augmenters(specs, seed=None, image_size=None):
    """Builds batch augmentation layers from names (or passes layer instances through).

    Args:
        specs: iterable of names (`"randaugment"`, `"random_erasing"`, `"mixup"`, `"cutmix"`,
            `"random_rotation"` (+-12 degrees), `"random_translation"` (+-10%), `"random_zoom"`
            (+-10%); see `AUGMENTERS` for the defaults), keras-cv layers by name
            (`"keras_cv.GridMask"`, `"keras_cv.RandAugment(magnitude=0.3)"`: see
            `keras_vit.training.cv_augment`), `(name, kwargs)` pairs to override the defaults,
            or ready `Layer`/callable instances (e.g. a keras-cv layer). Image layers see
            batches with values in [0, 255].
        seed: optional int passed to the Keras (and keras-cv) layers.
        image_size: optional int or (height, width): the `target_size` of keras-cv layers that
            resize (JitteredResize) unless given.

    Returns:
        list of `(layer, mixes_labels)`; `mixes_labels` layers are called on
        `{"images": x, "labels": one_hot_y}` and return the same dict.

    Example:

    >>> [type(layer).__name__ for layer, _ in build_augmenters(["mixup"])]
    ['MixUp']
    """
    built = []
    for spec in specs or ():
        if isinstance(spec, str) or (isinstance(spec, (tuple, list)) and len(spec) == 2):
            name, kwargs = (spec, {}) if isinstance(spec, str) else spec
            if cv_augment.is_keras_cv_spec(name):
                if not isinstance(kwargs, dict):
                    raise ValueError(
                        f"A (name, kwargs) augmentation needs a dict of kwargs. Received: {spec!r}"
                    )
                built.append(
                    cv_augment.build_keras_cv_layer(
                        name, kwargs, seed=seed, image_size=image_size
                    )
                )
                continue
            if name not in AUGMENTERS:
                raise ValueError(
                    f"Unknown augmentation {name!r}. Expected one of {sorted(AUGMENTERS)}, "
                    "keras_cv.NAME (a keras-cv layer) or a Layer instance."
                )
            cls_name, defaults, mixes = AUGMENTERS[name]
            layer = getattr(keras.layers, cls_name)(**{**defaults, "seed": seed, **kwargs})
            built.append((layer, mixes))
        elif callable(spec):
            built.append((spec, bool(getattr(spec, "mixes_labels", False))))
        else:
            raise ValueError(
                "Augmentations must be names, (name, kwargs) pairs or callables. "
                f"Received: {spec!r}"
            )
    return built


def check_crop_ranges(scale, ratio):
    """Validates the area-fraction and aspect-ratio ranges of a random resized crop."""
    scale = tuple(float(s) for s in scale)
    ratio = tuple(float(r) for r in ratio)
    if len(scale) != 2 or not 0 < scale[0] <= scale[1] <= 1:
        raise ValueError(f"scale must be (min, max) with 0 < min <= max <= 1. Received: {scale}")
    if len(ratio) != 2 or not 0 < ratio[0] <= ratio[1]:
        raise ValueError(f"ratio must be (min, max) with 0 < min <= max. Received: {ratio}")
    return scale, ratio


def crop_box_from_uniforms(u_ratio, u_area, u_y, u_x, height, width, scale, ratio, xp=ops):
    """Turns uniform [0, 1) samples into crop boxes `(y0, x0, h, w)` in pixels.

    The aspect ratio `w / h` is log-uniform in `ratio`; the area fraction is uniform in
    `scale`, capped at the largest fraction that fits the image at that aspect ratio (for a
    square image and ratios in [3/4, 4/3] the cap is >= 3/4, so the area stays in `scale` unless
    `scale[0] > 3/4`). The box position is uniform over the places where it fits. Shared by the
    Keras layer (`xp=keras.ops`) and the `tf.data` op (`xp` = a TensorFlow shim).
    """
    height = xp.cast(height, "float32")
    width = xp.cast(width, "float32")
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    r = xp.exp(log_lo + (log_hi - log_lo) * u_ratio)
    fit = xp.minimum(xp.minimum(width / (r * height), r * width / height), 1.0)
    hi = xp.minimum(fit, scale[1])
    lo = xp.minimum(scale[0], hi)
    area = (lo + (hi - lo) * u_area) * height * width
    h = xp.minimum(xp.sqrt(area / r), height)
    w = xp.minimum(xp.sqrt(area * r), width)
    y0 = (height - h) * u_y
    x0 = (width - w) * u_x
    return y0, x0, h, w


@keras.saving.register_keras_serializable(package="keras_vit")
class RandomResizedCrop(keras.layers.Layer):
    """Inception-style random resized crop (random area and aspect ratio, then resize).

    In training, crops a box per image whose area is a fraction in `scale` of the image and whose
    aspect ratio (width / height) is log-uniform in `ratio`, and resizes it bilinearly to
    `(height, width)`. In inference, resizes the whole image. Backend-neutral (`keras.ops`; the
    crop is one batched `affine_transform`).

    Args:
        height: int. Output height.
        width: int. Output width.
        scale: (min, max). Area fraction of the crop. Defaults to (0.08, 1.0) (Inception).
        ratio: (min, max). Aspect ratio range. Defaults to (3/4, 4/3).
        seed: optional int. Defaults to None.

    Call arguments:
        images: `(B, H, W, C)` float images.
        training: bool. Crops when True, only resizes otherwise.

    Returns:
        `(B, height, width, C)`.

    Example:

    >>> import numpy as np
    >>> tuple(RandomResizedCrop(16, 16, seed=0)(np.zeros((2, 32, 24, 3)), training=True).shape)
    (2, 16, 16, 3)

    Reference:
        Szegedy et al., 2015 (Inception crop), used by Dosovitskiy et al., 2021, Appendix B.
    """

    def __init__(self, height, width, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), seed=None, **kwargs):
        super().__init__(**kwargs)
        for name, value in (("height", height), ("width", width)):
            if not (isinstance(value, int) and value > 0):
                raise ValueError(f"{name} must be a positive int. Received: {name}={value!r}")
        self.height = height
        self.width = width
        self.scale, self.ratio = check_crop_ranges(scale, ratio)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def sample_boxes(self, batch_size, height, width):
        """Samples `(y0, x0, h, w)` crop boxes in input pixels, each of shape `(batch_size,)`."""
        u = keras.random.uniform((4, batch_size), seed=self.seed_generator)
        return crop_box_from_uniforms(u[0], u[1], u[2], u[3], height, width, self.scale, self.ratio)

    def call(self, images, training=None):
        images = ops.convert_to_tensor(images)
        shape = ops.shape(images)
        in_h, in_w = images.shape[1], images.shape[2]
        resized = ops.image.resize(images, (self.height, self.width), interpolation="bilinear")
        if not training:
            return resized
        y0, x0, h, w = self.sample_boxes(shape[0], in_h, in_w)
        # Output pixel (x, y) of the resized image reads input pixel x0 + x * w / W_out: in the
        # resized image's coordinates that is an affine map
        # (scale w / W_in, offset x0 * W_out / W_in).
        sy = h / in_h
        sx = w / in_w
        ty = y0 * self.height / in_h
        tx = x0 * self.width / in_w
        zeros = ops.zeros_like(sx)
        transform = ops.stack([sx, zeros, tx, zeros, sy, ty, zeros, zeros], axis=-1)
        return ops.image.affine_transform(
            resized,
            ops.cast(transform, resized.dtype),
            interpolation="bilinear",
            fill_mode="nearest",
        )

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.height, self.width, input_shape[3])

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "height": self.height,
                "width": self.width,
                "scale": self.scale,
                "ratio": self.ratio,
                "seed": self.seed,
            }
        )
        return config
