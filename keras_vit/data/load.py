"""`load_source`: a dataset spec and a split to a `Source` (channels converted), and the default
evaluation split of a spec."""

from keras_vit.data._imports import import_tf
from keras_vit.data.digits import digits_source
from keras_vit.data.folder import folder_source
from keras_vit.data.source import CORRUPT_MODES
from keras_vit.data.specs import parse_spec
from keras_vit.data.synthetic import synthetic_source
from keras_vit.data.tfds_source import (
    image_folder_builder,
    image_folder_source,
    prepared_tfds_builder,
    tfds_builder,
    tfds_builder_source,
)


def load_source(
    spec,
    split="train",
    *,
    data_dir=None,
    num_channels=3,
    on_corrupt="error",
    download=False,
    carve=None,
):
    """Loads one split of a dataset spec (see the module docstring).

    Args:
        spec: str. `"digits"`, `"folder:PATH"`, `"imagefolder:PATH"`, `"tfds:NAME[:SPLIT]"` or
            `"synthetic[:CLASSES[:IMAGES[:SIZE]]]"`.
        split: str. `"train"` or `"test"` for digits/folders/synthetic; any split name for tfds (for
            `tfds:NAME:SPLIT` and `split="train"`, SPLIT wins). Defaults to `"train"`.
        data_dir: optional str. TensorFlow Datasets directory. Defaults to tfds' default.
        num_channels: 1 or 3. Gray images are replicated to 3 channels, colour images averaged
            to 1. Defaults to 3.
        on_corrupt: `"error"` or `"skip"` (folders). Defaults to `"error"`.
        download: bool. Let tfds download and prepare a missing dataset (after a quick check
            that its download hosts answer). Defaults to False.
        carve: optional `keras_vit.data.carve.Carve`: return its part (training or validation)
            of `split` instead of the whole split. Defaults to None.

    Returns:
        A `Source`.

    Raises:
        ValueError: a malformed spec, unknown tfds name or split, a path that is a file, fewer
            than two classes, or only corrupt images (see the module docstring).
        FileNotFoundError: a missing folder, or a tfds dataset that is not prepared in
            `data_dir` and is not (or cannot be) downloaded; the message says how to prepare it.
        PermissionError: a folder that cannot be read.
    """
    if num_channels not in (1, 3):
        raise ValueError(f"num_channels must be 1 or 3. Received: num_channels={num_channels!r}")
    if on_corrupt not in CORRUPT_MODES:
        raise ValueError(
            f"on_corrupt must be one of {CORRUPT_MODES}. Received: on_corrupt={on_corrupt!r}"
        )
    kind, arg = parse_spec(spec)
    if kind == "digits":
        source = digits_source(split, carve)
    elif kind == "synthetic":
        source = synthetic_source(arg, split, spec, carve)
    elif kind == "folder":
        source = folder_source(arg, split, num_channels, on_corrupt, carve)
    elif kind == "imagefolder":
        source = image_folder_source(arg, split, on_corrupt, spec, carve)
    else:
        name, _, train_split = arg.partition(":")
        if split == "train" and train_split:
            split = train_split
        source = tfds_builder_source(
            prepared_tfds_builder(name, data_dir, download, spec), split, spec, carve
        )
    source.dataset = source.dataset.map(
        lambda image, label: (_to_channels(image, num_channels), label)
    )
    if source.make_example is not None:
        make = source.make_example

        def make_example(index):
            image, label = make(index)
            return _to_channels(image, num_channels), label

        source.make_example = make_example
    if source.image_shape is not None:
        source.image_shape = (*source.image_shape[:2], num_channels)
    return source


def _to_channels(image, num_channels):
    tf = import_tf()
    channels = image.shape[-1]
    if channels == num_channels:
        return image
    if channels == 1 and num_channels == 3:
        return tf.tile(image, [1, 1, 3])
    if channels in (3, 4) and num_channels == 1:
        gray = tf.image.rgb_to_grayscale(tf.cast(image[..., :3], "float32"))
        return tf.cast(tf.round(gray), image.dtype)
    if channels == 4 and num_channels == 3:
        return image[..., :3]
    raise ValueError(
        f"Cannot convert images with {channels} channels to {num_channels} channels."
    )


def ensure_prepared(spec, data_dir=None, download=False):
    """For a tfds spec: the not-prepared error (or the download) before any split is read."""
    kind, arg = parse_spec(spec)
    if kind == "tfds":
        prepared_tfds_builder(arg.partition(":")[0], data_dir, download, spec)


def split_names(spec, data_dir=None):
    """The split names of a tfds or `imagefolder:` spec, None for digits/folders/synthetic."""
    kind, arg = parse_spec(spec)
    if kind == "tfds":
        return set(tfds_builder(arg.partition(":")[0], data_dir, spec).info.splits)
    if kind == "imagefolder":
        return set(image_folder_builder(arg, spec).info.splits)
    return None


def default_eval_split(spec, data_dir=None):
    """`"test"` for digits/folders; for tfds the first of test/validation the dataset has."""
    kind, arg = parse_spec(spec)
    if kind != "tfds":
        return "test"
    splits = tfds_builder(arg.partition(":")[0], data_dir, spec).info.splits
    for name in ("test", "validation"):
        if name in splits:
            return name
    raise ValueError(
        f"Dataset {spec!r} has no 'test' or 'validation' split (splits: {sorted(splits)}); set "
        "eval_split (--eval-split) to one of them."
    )

