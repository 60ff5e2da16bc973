"""The NaFlex training and evaluation `tf.data` pipelines of the recipes (`--naflex`).

Each image keeps its aspect ratio: it is scaled to the model's input (`preprocessing`'s mean,
std and scale; [-1, 1] by default), resized to the largest size whose
patch grid fits `max_patches` (`keras_vit.data.naflex_image_size`) and cut into patches in
TensorFlow ops (`keras_vit.data.naflex_tf.naflex_example`, equal to `naflex_batch` on the same
images). Training batches are reshuffled per epoch (seed `(seed, epoch)`, as
`keras_vit.data.train_pipeline`) and flipped horizontally with per-example stateless seeds when
the data suits it; no crop (a crop would change the aspect ratio the model is to learn from).
"""

from keras_vit.data._imports import import_tf
from keras_vit.data.naflex_tf import naflex_example
from keras_vit.data.pipelines import scale, steps_per_epoch_for
from keras_vit.layers._checks import check_positive_int, check_positive_int_pair


def _naflex_example(patch_size, max_patches, preprocessing=None):
    """A `tf.data` map: an image uint8 `(h, w, C)` -> its NaFlex dict (`naflex_example`), its
    pixels scaled by `preprocessing` (the model's spec; None: [-1, 1])."""

    def apply(image):
        return naflex_example(
            image, patch_size, max_patches, preprocess=lambda x: scale(x, preprocessing)
        )

    return apply


def _checked(patch_size, max_patches, batch_size):
    return (
        check_positive_int_pair(patch_size, "patch_size"),
        check_positive_int(max_patches, "max_patches"),
        check_positive_int(batch_size, "batch_size"),
    )


def naflex_train_pipeline(
    source,
    *,
    patch_size,
    max_patches,
    batch_size,
    epochs,
    steps_per_epoch=None,
    start_epoch=0,
    seed=0,
    flip=None,
    shuffle_buffer=10_000,
    preprocessing=None,
):
    """The NaFlex training `tf.data.Dataset` for epochs `start_epoch .. epochs - 1`.

    Args:
        source: a `keras_vit.data.Source` (images of any sizes).
        patch_size: int or (height, width). The model's patch size.
        max_patches: int. Patches per image at most (the padded sequence length).
        batch_size: int. Images per batch (the last incomplete batch of an epoch is dropped).
        epochs: int.
        steps_per_epoch: optional int. Batches per epoch (default one pass over the data).
        start_epoch: int. The first epoch (a resumed run).
        seed: int. Shuffle and flip seed.
        flip: optional bool. Random horizontal flips (default: the source's `default_flip`).
        shuffle_buffer: int. Defaults to 10,000.
        preprocessing: optional `PreprocessingConfig` (the model's): its mean, std and scale
            (the resize is NaFlex's own). Defaults to None ([-1, 1]).

    Returns:
        `tf.data.Dataset` of `({"patches", "patch_coord", "patch_valid"}, one-hot labels)`.
    """
    tf = import_tf()
    patch_size, max_patches, batch_size = _checked(patch_size, max_patches, batch_size)
    if start_epoch >= epochs:
        raise ValueError(f"start_epoch ({start_epoch}) must be < epochs ({epochs}).")
    steps = steps_per_epoch or steps_per_epoch_for(source.num_examples, batch_size)
    flip = source.default_flip if flip is None else flip
    buffer = max(1, min(shuffle_buffer, source.num_examples))
    to_naflex = _naflex_example(patch_size, max_patches, preprocessing)
    num_classes = source.num_classes

    def one_epoch(epoch):
        def preprocess(index, example):
            image, label = example
            if flip:
                key = tf.stack([tf.constant(seed * 1_000_003 + epoch, "int64"), index])
                image = tf.image.stateless_random_flip_left_right(image, key)
            return to_naflex(image), tf.one_hot(label, num_classes)

        ds = source.dataset.shuffle(
            buffer, seed=seed * 7919 + epoch, reshuffle_each_iteration=False
        )
        ds = ds.repeat().enumerate().map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)
        return ds.batch(batch_size, drop_remainder=True).take(steps)

    ds = one_epoch(start_epoch)
    for epoch in range(start_epoch + 1, epochs):
        ds = ds.concatenate(one_epoch(epoch))
    return ds.prefetch(tf.data.AUTOTUNE)


def naflex_eval_pipeline(source, *, patch_size, max_patches, batch_size, preprocessing=None):
    """The NaFlex evaluation `tf.data.Dataset`: every image once, in order (last batch kept).

    Returns:
        `tf.data.Dataset` of `({"patches", "patch_coord", "patch_valid"}, one-hot labels)`.
    """
    tf = import_tf()
    patch_size, max_patches, batch_size = _checked(patch_size, max_patches, batch_size)
    to_naflex = _naflex_example(patch_size, max_patches, preprocessing)
    num_classes = source.num_classes
    ds = source.dataset.map(
        lambda image, label: (to_naflex(image), tf.one_hot(label, num_classes)),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    return ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)
