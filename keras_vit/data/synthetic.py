"""`synthetic[:CLASSES[:IMAGES[:SIZE]]]`: class-patterned random images made inside the `tf.data`
graph (see `keras_vit.data`)."""

from keras_vit.data._imports import import_tf
from keras_vit.data.source import Source
from keras_vit.data.specs import parse_synthetic

SYNTHETIC_SEED = 0


def synthetic_source(arg, split, spec, carve=None):
    """Random class-patterned images, made inside the `tf.data` graph (see the module docstring).

    For `"train"` with a `Carve`, its part of the training indices (stratified by class).
    """
    if split not in ("train", "test"):
        raise ValueError(f"synthetic has splits 'train' and 'test'. Received: split={split!r}")
    tf = import_tf()
    classes, images, size = parse_synthetic(arg, spec)
    count = images if split == "train" else max(1, images // 4)
    stream = 0 if split == "train" else 1
    # One 4x4 colour grid per class (the same for both splits): what a model can learn.
    patterns = tf.random.stateless_uniform(
        (classes, 4, 4, 3), seed=[SYNTHETIC_SEED, 7], minval=32.0, maxval=224.0
    )
    rows = tf.range(size) * 4 // size  # nearest-neighbour enlargement of the 4x4 grid
    # Noise: one of a bank of 16 fields, rolled by an index-dependent offset (cheaper than a
    # fresh random field per image, which cost more than the training crop).
    bank = tf.random.stateless_uniform(
        (16, size, size, 3), seed=[2 * SYNTHETIC_SEED + stream, 11], minval=-32.0, maxval=32.0
    )

    def make(index):
        label = index % classes
        pattern = tf.gather(tf.gather(tf.gather(patterns, label), rows, axis=0), rows, axis=1)
        turn = index // 16
        shift = tf.stack([turn * 7 % size, turn * 13 % size])
        noise = tf.roll(tf.gather(bank, index % 16), shift, axis=[0, 1])
        image = tf.cast(tf.clip_by_value(pattern + noise, 0.0, 255.0), "uint8")
        return image, label

    if carve is not None:
        import numpy as np

        indices = tf.constant(carve.indices(count, labels=np.arange(count) % classes), "int64")
        count = int(indices.shape[0])
        make_all = make

        def make(index):
            return make_all(tf.gather(indices, index))

    ds = tf.data.Dataset.range(count).map(make, num_parallel_calls=tf.data.AUTOTUNE)
    return Source(
        ds, count, classes, spec, default_flip=True, image_shape=(size, size, 3),
        make_example=make,
    )

