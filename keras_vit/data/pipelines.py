"""The training and evaluation `tf.data` pipelines (crop, flip, augmentation, the model's input
scaling, one-hot labels) and the step arithmetic of an epoch.

`preprocessing` (a `keras_vit.models.PreprocessingConfig`, the model's `config.preprocessing`)
gives the scaling of both pipelines (its mean, std and scale) and the evaluation transform
(its resize, interpolation and centre crop: `keras_vit.layers.image_preprocessor`, run here in
TensorFlow ops); None is the official `[-1, 1]` with a bilinear resize to `image_size`.
"""

import math

from keras_vit.data._imports import import_tf
from keras_vit.data.crop import random_resized_crop
from keras_vit.layers.image_preprocessor import preprocess_images, tf_namespace
from keras_vit.preprocessing import normalize_pixels, scale_pixels
from keras_vit.training import augment as augment_lib
from keras_vit.training.settings import check_repeats  # its one home (re-exported)


def steps_per_epoch_for(num_examples, batch_size):
    """Batches in one pass over the training data (incomplete last batch dropped)."""
    steps = num_examples // batch_size
    if steps < 1:
        raise ValueError(
            f"batch_size ({batch_size}) is larger than the training set ({num_examples} examples)."
        )
    return steps


def copies_first(images, labels):
    """`(k, N, ...)` copies of k examples -> `(N * k, ...)`: copy 0 of every example, then 1..."""
    tf = import_tf()

    def flat(x):
        x = tf.transpose(x, [1, 0, *range(2, len(x.shape))])
        return tf.reshape(x, [-1, *x.shape[2:]])

    return flat(images), flat(labels)


def train_pipeline(
    source,
    *,
    image_size,
    batch_size,
    epochs,
    steps_per_epoch=None,
    start_epoch=0,
    seed=0,
    crop_scale=(0.08, 1.0),
    crop_ratio=(3 / 4, 4 / 3),
    rotation=0.0,
    flip=None,
    augmenters=(),
    shuffle_buffer=10_000,
    repeated_augmentation=1,
    preprocessing=None,
):
    """The training `tf.data.Dataset` for epochs `start_epoch .. epochs - 1`.

    Epoch `e` is a fresh shuffle (seed `(seed, e)`) of the source, cropped (and rotated by up to
    `rotation` degrees, in the same resampling pass) and flipped with per-example stateless seeds,
    batched (`drop_remainder`), augmented by `augmenters` (see
    `keras_vit.training.augment.build_augmenters`; they see values in [0, 255]), scaled to
    the model's input (`preprocessing`'s mean, std and scale; None: [-1, 1]), and cut to
    `steps_per_epoch` batches. Restarting at `start_epoch` therefore yields
    the same batches as an uninterrupted run (Keras' augmentation layers excepted: they draw from
    their own seed generators). A source with `make_example` (`synthetic`) is shuffled by index
    over the whole set, and each example made after the shuffle, so that no epoch waits for a
    shuffle buffer of images to fill.

    `repeated_augmentation=N` > 1 is DeiT's repeated augmentation (`RASampler`): each batch
    holds `B / N` images, each `N` times under its own crop, flip and augmentation, laid out as
    `N` consecutive copies of the `B / N` images, so that when several processes split a global
    batch into equal consecutive shares (`keras.distribution.DataParallel`) with `N` a multiple
    of their number, the copies of an image go to different processes, as in DeiT. An epoch
    keeps its number of batches (DeiT's epochs likewise see each image about `1 / N` times).

    Returns:
        `tf.data.Dataset` of `(images float32 (B, H, W, C), one-hot labels (B, K))`.
    """
    tf = import_tf()
    repeats = check_repeats(repeated_augmentation, batch_size)
    size = tuple(image_size) if isinstance(image_size, (tuple, list)) else (image_size,) * 2
    steps = steps_per_epoch or steps_per_epoch_for(source.num_examples, batch_size)
    flip = source.default_flip if flip is None else flip
    num_classes = source.num_classes
    crop_scale, crop_ratio = augment_lib.check_crop_ranges(crop_scale, crop_ratio)
    if not 0.0 <= float(rotation) <= 180.0:
        raise ValueError(f"rotation must be in [0, 180] degrees. Received: rotation={rotation!r}")
    rotation = float(rotation)
    buffer = max(1, min(shuffle_buffer, source.num_examples))
    base = source.dataset
    make = source.make_example
    if make is not None:  # shuffle indices (the whole set: 8 bytes each), make examples after
        base = tf.data.Dataset.range(source.num_examples)
        buffer = source.num_examples

    def one_epoch(epoch):
        def augment_one(index, image):
            key = tf.stack([tf.constant(seed * 1_000_003 + epoch, "int64"), index])
            image = random_resized_crop(image, size, key, crop_scale, crop_ratio, rotation)
            if flip:
                image = tf.image.stateless_random_flip_left_right(image, key + [0, 1 << 40])
            return image

        def preprocess(index, example):
            image, label = example if make is None else make(example)
            if repeats == 1:
                return augment_one(index, image), tf.one_hot(label, num_classes)
            # Copy c of example i draws from key index i * N + c: its own crop and flip.
            copies = [augment_one(index * repeats + c, image) for c in range(repeats)]
            labels = tf.repeat(tf.one_hot(label, num_classes)[None], repeats, axis=0)
            return tf.stack(copies), labels

        ds = base.shuffle(buffer, seed=seed * 7919 + epoch, reshuffle_each_iteration=False)
        ds = ds.repeat()  # short datasets: an epoch may ask for more batches than one pass
        ds = ds.enumerate().map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)
        if repeats == 1:
            return ds.batch(batch_size, drop_remainder=True).take(steps)
        ds = ds.batch(batch_size // repeats, drop_remainder=True).map(copies_first)
        return ds.take(steps)

    # One dataset per epoch, chained in Python: the shuffle seed of epoch e is a Python int
    # (tf.data's shuffle cannot take a tensor seed once a global seed is set).
    if start_epoch >= epochs:
        raise ValueError(f"start_epoch ({start_epoch}) must be < epochs ({epochs}).")
    ds = one_epoch(start_epoch)
    for epoch in range(start_epoch + 1, epochs):
        ds = ds.concatenate(one_epoch(epoch))
    batch_shape = (batch_size, *size, None)
    for layer, mixes_labels in augmenters:
        ds = _augment(ds, layer, mixes_labels, batch_shape)
    ds = ds.map(lambda x, y: (scale(x, preprocessing), y), num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)


def scale(images, preprocessing=None):
    """Pixel values (0..255) to the model's input: `preprocessing`'s normalisation, in TF ops."""
    if preprocessing is None:
        return scale_pixels(images)
    spec = preprocessing
    return normalize_pixels(images, spec.mean, spec.std, spec.scale)


def eval_images(image, image_size, preprocessing=None):
    """One evaluation image (uint8 `(H, W, C)`, any size) to the model's input, in TF ops.

    None: the bilinear resize of `tf.image.resize` to `image_size`, then `[-1, 1]` (the
    official models'); a spec: its own resize, centre crop and normalisation (timm's and
    transformers' eval transform, `keras_vit.layers.image_preprocessor`).
    """
    tf = import_tf()
    if preprocessing is None:
        return scale_pixels(tf.image.resize(tf.cast(image, "float32"), image_size))
    return preprocess_images(
        image, image_size, xp=tf_namespace(tf), **preprocessing.layer_arguments()
    )


def _layer_name(layer):
    cls = type(layer)
    module = cls.__module__.split(".")[0]
    return f"{module}.{cls.__name__}" if module in ("keras", "keras_cv") else cls.__name__


def _augment(ds, layer, mixes_labels, batch_shape):
    """`ds` mapped through one augmentation layer; an error names the layer and the backend.

    The layer is traced into the `tf.data` graph here, so a layer that cannot run in it (on
    this Keras backend) fails now, with its own message. Its images must keep the batch shape
    (a resizing layer must resize back to the model's image size).
    """
    import keras

    tf = import_tf()
    if mixes_labels:

        def apply(x, y):
            out = layer({"images": x, "labels": y}, training=True)
            return out["images"], out["labels"]

    else:

        def apply(x, y):
            return layer(x, training=True), y

    name = _layer_name(layer)
    try:
        ds = ds.map(apply)
    except Exception as error:  # noqa: BLE001  (any failure of a third-party layer)
        raise RuntimeError(
            f"The augmentation layer {name} failed in the tf.data input pipeline under the "
            f"{keras.backend.backend()!r} Keras backend ({type(error).__name__}: "
            f"{' '.join(str(error).split())[:800]}). Drop it from --augment (augment=[...]), or "
            "try another Keras backend."
        ) from error
    shape = ds.element_spec[0].shape
    expected = tf.TensorShape(batch_shape)
    if shape.rank is not None and not shape.is_compatible_with(expected):
        raise ValueError(
            f"The augmentation layer {name} changed the image batch shape: expected "
            f"{tuple(expected.as_list())} (batch, height, width, channels). Received: "
            f"{tuple(shape.as_list())}. A resizing layer must output the model's image size."
        )
    return ds


def eval_pipeline(source, *, image_size, batch_size, pad=False, preprocessing=None):
    """The evaluation `tf.data.Dataset`: resize, scale to [-1, 1], one-hot labels, in order.

    `preprocessing` (the model's spec) replaces the resize and scaling by the model's own
    (`eval_images`).

    With `pad=True` (several processes: each must get equal, full batches) the last batch is
    filled up to `batch_size` with blank images of weight 0, and every real image gets the weight
    `padded count / real count`: Keras' loss (the weighted sum over a batch divided by its size)
    and weighted metrics then average over the real images, each counted once.

    Returns:
        `tf.data.Dataset` of `(images, one-hot labels)`, or `(images, one-hot labels, weights)`
        with `pad=True` (`ceil(n / batch_size)` batches).
    """
    tf = import_tf()
    size = tuple(image_size) if isinstance(image_size, (tuple, list)) else (image_size,) * 2
    num_classes = source.num_classes

    def preprocess(image, label):
        return eval_images(image, size, preprocessing), tf.one_hot(label, num_classes)

    ds = source.dataset.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)
    if not pad:
        return ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)
    real = int(source.num_examples)
    padded = math.ceil(real / batch_size) * batch_size
    weight = tf.constant(padded / real, "float32")
    ds = ds.map(lambda x, y: (x, y, weight))
    image_spec, label_spec, _ = ds.element_spec
    blank = (
        tf.zeros(image_spec.shape, image_spec.dtype),
        tf.zeros(label_spec.shape, label_spec.dtype),
        tf.constant(0.0, "float32"),
    )
    ds = ds.concatenate(tf.data.Dataset.from_tensors(blank).repeat(padded - real))
    return ds.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def numpy_arrays(dataset):
    """Collects a finite `(images, one-hot labels)` dataset into NumPy `(x, labels as ints)`."""
    import numpy as np

    xs, ys = [], []
    for x, y in dataset.as_numpy_iterator():
        xs.append(x)
        ys.append(y)
    return np.concatenate(xs), np.concatenate(ys).argmax(-1)


def epochs_for_steps(total_steps, steps_per_epoch):
    """Keras epochs needed for `total_steps` optimizer steps."""
    return max(1, math.ceil(total_steps / steps_per_epoch))
