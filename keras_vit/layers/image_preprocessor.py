"""`ImagePreprocessor`: uint8 images of any size -> a model's input (resize, centre crop, scale).

The evaluation transform of timm (`create_transform(**resolve_data_config(...))`) and of
transformers' image processors, with `keras.ops` (every backend, shapes known only at run time
included: a TensorFlow SavedModel's `serve_bytes`) or with TensorFlow inside `tf.data` (the
recipes' pipelines pass `xp=tf_namespace()` from `keras_vit.data`):

1. resize, as PIL does (`interpolation` `"bilinear"` or `"bicubic"`: PIL's triangle and Keys
   cubic, `a = -0.5`, support widened by the scale when shrinking; each output pixel's weights
   normalised to sum to 1), to
   - `resize=None`: timm's rule from `crop_pct` and `crop_mode`: `"center"` resizes the short
     side to `floor(size / crop_pct)` (the long side `int(short_target * long / short)`, as
     torchvision), `"squash"` both sides to `floor(size / crop_pct)`;
   - `resize=n` (an int): the short side to `n` (transformers' `size={"shortest_edge": n}`);
   - `resize=(h, w)`: exactly `(h, w)` (transformers' `size={"height": h, "width": w}`);
   integer inputs are rounded and clipped to 0..255 after each pass (width, then height), as
   PIL's uint8 resize;
2. centre crop to `image_size` (the crop's top-left corner at `round((resized - size) / 2)`, as
   torchvision; resize and crop are one matrix product per axis);
3. `(x * scale - mean) / std` per channel (`scale` 1/255: timm's `ToTensor`, transformers'
   `rescale_factor`); mean = std = 0.5 at 1/255 is computed as `x / 127.5 - 1`
   (`keras_vit.preprocessing.scale_pixels`, the official models' scaling).

The resize differs from PIL's by its arithmetic only (PIL rounds fixed-point weights and its
horizontal pass to uint8 before the vertical one): docs/weights.md gives the measured difference.
"""

import math
import types

import keras
from keras import ops

from keras_vit.layers._checks import check_positive_int, check_positive_int_pair, is_int, is_number
from keras_vit.layers._pixel_checks import check_pixels, is_tf_tensor
from keras_vit.layers._pixels import normalize_pixels

__all__ = ["ImagePreprocessor"]

INTERPOLATIONS = ("bilinear", "bicubic")
CROP_MODES = ("center", "squash")
CROP_ROUNDINGS = ("round", "floor")
_SUPPORT = {"bilinear": 1.0, "bicubic": 2.0}
_CUBIC_A = -0.5  # PIL's bicubic


def check_preprocessing(
    *, mean, std, scale, interpolation, crop_pct, crop_mode, resize, crop_rounding="round"
):
    """Validates the preprocessing arguments; returns `(mean, std, scale, crop_pct, resize)`
    normalised (floats, tuples of floats, `resize` None, an int or an `(h, w)` pair)."""

    def channels(value, name):
        values = (value,) if is_number(value) else value
        try:
            numbers = all(is_number(v) for v in values) and not isinstance(values, (str, bytes))
            values = tuple(float(v) for v in values) if numbers else ()
        except TypeError:
            values = ()
        if not values or not all(map(math.isfinite, values)):
            raise ValueError(
                f"{name} must be a number or a sequence of numbers (one per channel). "
                f"Received: {name}={value!r}"
            )
        return values

    mean, std = channels(mean, "mean"), channels(std, "std")
    if min(std) <= 0:
        raise ValueError(f"std must be positive. Received: std={std}")
    if not is_number(scale) or not scale > 0:
        raise ValueError(f"scale must be a positive number (e.g. 1/255). Received: scale={scale!r}")
    if interpolation not in INTERPOLATIONS:
        raise ValueError(
            f"interpolation must be one of {INTERPOLATIONS}. "
            f"Received: interpolation={interpolation!r}"
        )
    if not is_number(crop_pct) or not 0 < crop_pct <= 1:
        raise ValueError(f"crop_pct must be in (0, 1]. Received: crop_pct={crop_pct!r}")
    if crop_mode not in CROP_MODES:
        raise ValueError(
            f"crop_mode must be one of {CROP_MODES} (timm's 'border' is not supported). "
            f"Received: crop_mode={crop_mode!r}"
        )
    if crop_rounding not in CROP_ROUNDINGS:
        raise ValueError(
            f"crop_rounding must be one of {CROP_ROUNDINGS}. "
            f"Received: crop_rounding={crop_rounding!r}"
        )
    if resize is not None:
        if is_int(resize):
            resize = int(resize)
            if resize < 1:
                raise ValueError(f"resize must be positive. Received: resize={resize!r}")
        else:
            resize = check_positive_int_pair(resize, "resize")
    return mean, std, float(scale), float(crop_pct), resize


def tf_namespace(tf):
    """The few array functions `preprocess_images` uses, as TensorFlow ops (for `tf.data`)."""
    return types.SimpleNamespace(
        arange=tf.range,
        cast=tf.cast,
        abs=tf.abs,
        maximum=tf.maximum,
        minimum=tf.minimum,
        where=tf.where,
        sum=lambda x, axis, keepdims: tf.reduce_sum(x, axis=axis, keepdims=keepdims),
        einsum=tf.einsum,
        round=tf.round,
        floor=tf.floor,
        ceil=tf.math.ceil,
        clip=tf.clip_by_value,
        shape=tf.shape,
        convert_to_tensor=tf.convert_to_tensor,
    )


def _filter(x, interpolation, xp):
    x = xp.abs(x)
    zero = 0.0 * x
    if interpolation == "bilinear":
        return xp.maximum(1.0 - x, zero)
    a = _CUBIC_A
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    far = (((x - 5.0) * x + 8.0) * x - 4.0) * a
    return xp.where(x < 1.0, near, xp.where(x < 2.0, far, zero))


def _axis_weights(in_size, resized, crop, interpolation, crop_rounding, xp):
    """`(crop, in_size)` weights: resize `in_size -> resized`, then keep the centred `crop`."""
    dtype = "float32"
    in_f, resized_f = xp.cast(in_size, dtype), xp.cast(resized, dtype)
    scale = in_f / resized_f
    stretch = xp.maximum(scale, 1.0)
    offset = (resized_f - float(crop)) / 2.0
    if crop_rounding == "round":  # torchvision: round; a crop larger than the image pads
        top = xp.where(offset < 0.0, xp.ceil(offset), xp.round(offset))  # (crop - size) // 2
    else:
        top = xp.floor(offset)
    index = xp.cast(xp.arange(crop), dtype) + top  # the resized image's row of each crop row
    center = scale * (index + 0.5)
    source = xp.cast(xp.arange(in_size), dtype) + 0.5
    weights = _filter((source[None, :] - center[:, None]) / stretch, interpolation, xp)
    # Rows of a crop larger than the resized image are its zero padding (torchvision's
    # CenterCrop pads with 0, before normalisation); the others are normalised to sum 1.
    inside = xp.cast(index >= 0.0, dtype) * xp.cast(index < resized_f, dtype)
    total = xp.sum(weights, axis=1, keepdims=True)
    return weights / xp.maximum(total, 1e-12) * inside[:, None]


def resized_size(height, width, image_size, *, crop_pct, crop_mode, resize, xp=ops):
    """The `(height, width)` an input is resized to before the centre crop.

    Python ints when `height` and `width` are (torchvision's integer arithmetic), else tensors.
    """
    if resize is not None and not isinstance(resize, int):
        return resize
    static = isinstance(height, int) and isinstance(width, int)
    if resize is None:
        target = tuple(math.floor(s / crop_pct) for s in image_size)
        if crop_mode == "squash":
            return target
        if target[0] != target[1]:  # timm's ResizeKeepRatio (longest=0): the smaller ratio
            # of the two, so that both sides cover the target and the crop fits
            if static:
                ratio = min(height / target[0], width / target[1])
                return round(height / ratio), round(width / ratio)
            h, w = xp.cast(height, "float32"), xp.cast(width, "float32")
            ratio = xp.minimum(h / target[0], w / target[1])
            return (
                xp.cast(xp.round(h / ratio), "int32"),
                xp.cast(xp.round(w / ratio), "int32"),
            )
        resize = target[0]
    if static:  # torchvision: new_long = int(new_short * long / short)
        if height <= width:
            return resize, int(resize * width / height)
        return int(resize * height / width), resize
    h, w = xp.cast(height, "float32"), xp.cast(width, "float32")
    short_h = h <= w
    long_h = xp.cast(xp.floor(resize * h / w), "int32")  # h is the long side
    long_w = xp.cast(xp.floor(resize * w / h), "int32")
    return (
        xp.where(short_h, resize, long_h),
        xp.where(short_h, long_w, resize),
    )


def preprocess_images(
    images, image_size, *, mean, std, scale, interpolation, crop_pct, crop_mode, resize,
    crop_rounding="round", xp=ops,
):
    """Resize, centre crop and normalise `(..., H, W, C)` images (see the module docstring)."""
    integer = not keras.backend.standardize_dtype(images.dtype).startswith(("float", "bfloat"))
    shape = xp.shape(images)
    height, width = shape[-3], shape[-2]
    new_h, new_w = resized_size(
        height, width, image_size, crop_pct=crop_pct, crop_mode=crop_mode, resize=resize, xp=xp
    )
    rows = _axis_weights(height, new_h, image_size[0], interpolation, crop_rounding, xp)
    cols = _axis_weights(width, new_w, image_size[1], interpolation, crop_rounding, xp)
    x = xp.cast(images, "float32")
    # PIL's order: the horizontal pass, then the vertical one; a uint8 image is rounded and
    # clipped to uint8 after each (bicubic overshoots), as PIL does.
    x = xp.einsum("Ww,...hwc->...hWc", cols, x)
    if integer:
        x = xp.clip(xp.round(x), 0.0, 255.0)
    x = xp.einsum("Hh,...hWc->...HWc", rows, x)
    if integer:
        x = xp.clip(xp.round(x), 0.0, 255.0)
    return normalize_pixels(x, mean, std, scale, xp=xp)


@keras.saving.register_keras_serializable(package="keras_vit")
class ImagePreprocessor(keras.layers.Layer):
    """Turns images `(B, H, W, C)` of any size (uint8 or float in 0..255) into a model's input.

    Resize (PIL's bilinear or bicubic), centre crop to `image_size`, then
    `(x * scale - mean) / std`: the evaluation transform of timm and transformers (see
    `keras_vit.layers.image_preprocessor`). `model.preprocessor` is one, built from the model's
    `config.preprocessing` (`keras_vit.models.PreprocessingConfig`). A crop larger than the
    resized image (a non-square `image_size`, or a `resize` smaller than it) is padded with
    pixel 0 first, as timm's (torchvision's) `CenterCrop` does.

    Inputs follow one rule (`keras_vit.layers._pixel_checks`): pixel values 0..255 (uint8,
    or integers or floats holding 0..255), channels last, `num_channels` of them; NumPy arrays,
    Python lists and tensors of the backend. A `tf.Tensor` (a `tf.data` pipeline's
    `dataset.map(model.preprocessor)`) is processed with TensorFlow ops on every backend and
    comes back a `tf.Tensor`.

    Args:
        image_size: int or (height, width): the output size.
        mean, std: a number or one per channel. Default to 0.5 (with `scale=1/255`: `[-1, 1]`).
        scale: positive float applied before the mean. Defaults to 1/255.
        interpolation: `"bilinear"` or `"bicubic"`. Defaults to `"bilinear"`.
        crop_pct: float in (0, 1]: timm's crop fraction. Defaults to 1.0.
        crop_mode: `"center"` (resize the short side) or `"squash"` (both sides). Defaults to
            `"squash"`.
        resize: None (timm's rule from `crop_pct`), an int (the short side) or `(h, w)`.
            Defaults to None.
        crop_rounding: `"round"` (timm: crop offset `round((resized - size) / 2)`) or
            `"floor"` (transformers). Defaults to `"round"`.
        num_channels: optional int. The channels the images must have; None: one per value
            of `mean` / `std` when they have several, else any. Defaults to None.

    Example:

    >>> import numpy as np
    >>> layer = ImagePreprocessor(4, mean=0.5, std=0.5)
    >>> out = layer(np.full((1, 8, 6, 3), 255, "uint8"))
    >>> tuple(out.shape), float(np.asarray(out).min())
    ((1, 4, 4, 3), 1.0)
    """

    def __init__(
        self,
        image_size,
        *,
        mean=0.5,
        std=0.5,
        scale=1 / 255,
        interpolation="bilinear",
        crop_pct=1.0,
        crop_mode="squash",
        resize=None,
        crop_rounding="round",
        num_channels=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.image_size = check_positive_int_pair(image_size, "image_size")
        self.num_channels = check_positive_int(num_channels, "num_channels", allow_none=True)
        self.interpolation, self.crop_mode = interpolation, crop_mode
        self.crop_rounding = crop_rounding
        self.mean, self.std, self.scale, self.crop_pct, self.resize = check_preprocessing(
            mean=mean, std=std, scale=scale, interpolation=interpolation,
            crop_pct=crop_pct, crop_mode=crop_mode, resize=resize, crop_rounding=crop_rounding,
        )
        for name in ("mean", "std"):
            values = getattr(self, name)
            if self.num_channels is not None and len(values) not in (1, self.num_channels):
                raise ValueError(
                    f"{name} needs 1 or num_channels ({self.num_channels}) values. "
                    f"Received: {name}={list(values)}"
                )
        self.built = True

    @property
    def channels(self):
        """The channel count the images must have (None: any)."""
        if self.num_channels is not None:
            return self.num_channels
        counts = {len(self.mean), len(self.std)} - {1}
        return counts.pop() if counts else None

    def __call__(self, images, *args, **kwargs):
        images = check_pixels(images, channels=self.channels, min_rank=3)
        if is_tf_tensor(images) and keras.backend.backend() != "tensorflow":
            # Adapter for `tf.data` on the JAX and PyTorch backends: the same arithmetic in
            # TensorFlow ops, returning a tf.Tensor (tests/layers/test_image_preprocessor.py
            # compares it with the keras.ops path).
            import tensorflow as tf

            options = self._options()
            return preprocess_images(images, self.image_size, xp=tf_namespace(tf), **options)
        return super().__call__(images, *args, **kwargs)

    def _options(self):
        return dict(
            mean=self.mean, std=self.std, scale=self.scale, interpolation=self.interpolation,
            crop_pct=self.crop_pct, crop_mode=self.crop_mode, resize=self.resize,
            crop_rounding=self.crop_rounding,
        )  # fmt: skip

    def call(self, images):
        return preprocess_images(
            images, self.image_size, mean=self.mean, std=self.std, scale=self.scale,
            interpolation=self.interpolation, crop_pct=self.crop_pct,
            crop_mode=self.crop_mode, resize=self.resize, crop_rounding=self.crop_rounding,
        )

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-3], *self.image_size, input_shape[-1])

    def compute_output_spec(self, images):
        shape = self.compute_output_shape(images.shape)
        return keras.KerasTensor(shape, dtype="float32")

    def get_config(self):
        config = super().get_config()
        resize = self.resize
        config.update(
            image_size=list(self.image_size),
            mean=list(self.mean),
            std=list(self.std),
            scale=self.scale,
            interpolation=self.interpolation,
            crop_pct=self.crop_pct,
            crop_mode=self.crop_mode,
            resize=list(resize) if isinstance(resize, tuple) else resize,
            crop_rounding=self.crop_rounding,
            num_channels=self.num_channels,
        )
        return config
