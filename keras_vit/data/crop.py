"""The training crop in TensorFlow (for `tf.data`): a stateless Inception-style random resized
crop, optionally rotated, resampled in one pass."""

import math

from keras_vit.data._imports import import_tf
from keras_vit.training import augment as augment_lib


class _TFOps:
    """The few ops `crop_box_from_uniforms` needs, in TensorFlow (for use inside tf.data)."""

    def __getattr__(self, name):
        tf = import_tf()
        return {
            "cast": tf.cast,
            "exp": tf.exp,
            "minimum": tf.minimum,
            "sqrt": tf.sqrt,
        }[name]


def sample_crop_box(height, width, seed, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """Stateless crop box `(y0, x0, h, w)` (float pixels) for an image of `height x width`."""
    tf = import_tf()
    scale, ratio = augment_lib.check_crop_ranges(scale, ratio)
    u = tf.random.stateless_uniform((4,), seed=seed)
    return augment_lib.crop_box_from_uniforms(
        u[0], u[1], u[2], u[3], height, width, scale, ratio, xp=_TFOps()
    )


def random_resized_crop(
    image, size, seed, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), rotation=0.0
):
    """Inception-style random resized crop of one `(H, W, C)` image (stateless, for tf.data).

    The box is sampled by `sample_crop_box` (the same rule as the `RandomResizedCrop` layer),
    optionally rotated about its centre by an angle uniform in `[-rotation, rotation]` degrees,
    and resampled bilinearly to `size` in one pass (`ImageProjectiveTransformV3`, border pixels
    repeated) with the pixel-centre convention of `tf.image.resize`: a box covering the whole
    image gives exactly the evaluation pipeline's resize, so training and evaluation images differ
    only by the crop, never by the resampling grid or an extra interpolation blur.
    """
    tf = import_tf()
    image = tf.cast(image, "float32")
    shape = tf.shape(image)
    y0, x0, h, w = sample_crop_box(shape[0], shape[1], seed, scale, ratio)
    # Output pixel (i, j) has its centre at (i + 0.5, j + 0.5) * (h, w) / size inside the box;
    # rotate that point about the box centre and convert back to an input pixel index (- 0.5).
    sy, sx = h / size[0], w / size[1]
    if rotation:
        angle = (2.0 * tf.random.stateless_uniform((), seed=seed + [0, 2 << 40]) - 1.0) * (
            rotation * math.pi / 180.0
        )
        cos, sin = tf.cos(angle), tf.sin(angle)
    else:
        cos, sin = tf.constant(1.0), tf.constant(0.0)
    dx, dy = 0.5 * sx - 0.5 * w, 0.5 * sy - 0.5 * h  # offset of output pixel 0 from the centre
    cx, cy = x0 + 0.5 * w - 0.5, y0 + 0.5 * h - 0.5
    transform = tf.stack(
        [
            cos * sx, -sin * sy, cx + cos * dx - sin * dy,
            sin * sx, cos * sy, cy + sin * dx + cos * dy,
            0.0, 0.0,
        ]
    )
    out = tf.raw_ops.ImageProjectiveTransformV3(
        images=image[None],
        transforms=transform[None],
        output_shape=tf.constant(size, "int32"),
        fill_value=0.0,
        interpolation="BILINEAR",
        fill_mode="NEAREST",
    )
    return out[0]

