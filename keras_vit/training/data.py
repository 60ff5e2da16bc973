"""Input pipelines (`tf.data`, TensorFlow-only; imported lazily): `digits`, `folder:`, `tfds:`,
`synthetic`.

Dataset specs:
    - `digits`: scikit-learn's 8x8 handwritten digits (offline, the default). 30% is held out as
      the `test` split (stratified, fixed seed); images are upsampled to the model's size and the
      gray channel is replicated to 3 channels (unless `num_channels=1`).
    - `folder:PATH`: one sub-folder per class (`PATH/cat/*.jpg`, ...). If `PATH/train` and
      `PATH/test` (or `validation`/`val`) hold class folders, they are the splits; otherwise 30%
      is held out as `test` (stratified, fixed seed). Every image is decoded once up front: a
      corrupt file raises an error naming it, or (`on_corrupt="skip"`) is dropped with a warning.
    - `imagefolder:PATH`: a `tfds.folder_dataset.ImageFolder` (`PATH/SPLIT/LABEL/*.png`), with
      the same checks (corrupt images included) as `folder:`.
    - `tfds:NAME[:SPLIT]`: a TensorFlow Datasets dataset prepared in `data_dir` (SPLIT is the
      training split, `train` by default). Nothing is downloaded unless `download=True`; a
      dataset that is not prepared fails at once with instructions (an offline `tfds.load` would
      hang for minutes before failing). With `download=True`, the hosts in the dataset's URL list
      are probed first (a TCP connection each, in parallel, `PROBE_TIMEOUT` seconds in all): with
      no network the same instructions come within seconds, not after minutes of retries.
    - `synthetic[:CLASSES[:IMAGES[:SIZE]]]`: random images made in memory, for speed measurements
      and offline runs on any machine (defaults: 10 classes, 1,024 training images, 224 px;
      e.g. `synthetic:1000:8192:224`). The `test` split holds a quarter as many images. Each
      image is a fixed function of (split, index): its class's pattern (a random 4x4 colour grid,
      enlarged to SIZE) plus uniform noise (one of 16 fixed noise fields, shifted by an
      index-dependent offset), so a model can learn the classes. Images are made inside the
      `tf.data` graph from stateless random draws (parallel, no Python per element, only the
      16 noise fields held in memory), so the same spec gives the same images in every run.

Mistakes end in one clear error naming the received value and what to do: `ValueError` for a
malformed spec, an unknown scheme, tfds name or split, a path that is a file, fewer than two
classes, or a split whose images are all corrupt (even with `on_corrupt="skip"`);
`FileNotFoundError` for a missing folder or a tfds dataset that is not prepared and cannot be
downloaded. A class folder without images is kept, with a `UserWarning` naming it: labels index
the sorted class folders, so the other classes keep their labels (and a model trained on the
folder keeps its class order once images are added); a training split still needs images of at
least two classes.

Preprocessing as in the paper: training images get an Inception-style random resized crop and a
horizontal flip (off for digits); evaluation images are resized. Values are scaled to [-1, 1].
Labels are one-hot (so MixUp/CutMix and label smoothing share one loss). Every random choice is
stateless, keyed by (seed, epoch, example), so a resumed run sees exactly the batches the
uninterrupted run would have seen. The `tf.data` datasets feed `model.fit` on every Keras backend.
"""

import dataclasses
import importlib
import logging
import math
import os
import socket
import threading
import time
import urllib.parse
import warnings

from keras_vit.training import augment as augment_lib

logger = logging.getLogger(__name__)

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")
TEST_FRACTION = 0.3
SPLIT_SEED = 0
CORRUPT_MODES = ("error", "skip")
SCHEMES = {
    "folder": "folder:PATH",
    "imagefolder": "imagefolder:PATH",
    "tfds": "tfds:NAME[:SPLIT]",
    "synthetic": "synthetic[:CLASSES[:IMAGES[:SIZE]]]",
}
EXPECTED_SPECS = (
    "'digits', 'folder:PATH', 'imagefolder:PATH', 'tfds:NAME[:SPLIT]' or "
    "'synthetic[:CLASSES[:IMAGES[:SIZE]]]'"
)
# `synthetic` defaults: classes, training images, image size; the test split has IMAGES // 4.
SYNTHETIC_DEFAULTS = (10, 1024, 224)
SYNTHETIC_SEED = 0
# tfds ImageFolder reads only these (tensorflow_datasets/core/folder_dataset/image_folder.py).
TFDS_IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")
# Offline check before a tfds download: connect to every host the download would use.
PROBE_TIMEOUT = 5.0  # seconds for all hosts together (probed in parallel)


_MODULES = {}  # imported once: a call inside a traced tf.data function then imports nothing


def _import(module, message):
    if module not in _MODULES:
        try:
            _MODULES[module] = importlib.import_module(module)
        except ImportError as e:  # pragma: no cover - depends on the install
            raise ImportError(message) from e
    return _MODULES[module]


def _tf():
    return _import(
        "tensorflow",
        "keras_vit.training.data builds tf.data pipelines and needs TensorFlow "
        "(pip install 'keras-vit[recipes]'). It feeds every Keras backend.",
    )


@dataclasses.dataclass
class Source:
    """A split of a dataset before preprocessing.

    Attributes:
        dataset: `tf.data.Dataset` of `(image uint8 (H, W, C), label int64)`; images may differ in
            size unless `image_shape` is set.
        num_examples: int.
        num_classes: int.
        name: str. The spec it came from.
        default_flip: bool. Whether horizontal flips suit the data (False for digits).
        image_shape: optional (H, W, C) when all images share one shape.
        make_example: optional callable, index (int64 tensor) -> `(image, label)`, for sources
            that can make any example from its index (`synthetic`): the training pipeline then
            shuffles indices, a buffer that fills at once, instead of whole images.
    """

    dataset: object
    num_examples: int
    num_classes: int
    name: str
    default_flip: bool = True
    image_shape: tuple = None
    make_example: object = None


def parse_spec(spec):
    """Splits a dataset spec into `(kind, argument)`.

    `"tfds:cifar10:train"` -> `("tfds", "cifar10:train")`; `"digits"` -> `("digits", None)`.
    Raises a `ValueError` naming the expected forms for an unknown scheme or an empty name.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"dataset must be a non-empty string. Received: dataset={spec!r}")
    if spec in ("digits", "synthetic"):
        return spec, None
    kind, sep, arg = spec.partition(":")
    if kind not in SCHEMES or not sep:
        raise ValueError(
            f"dataset must be {EXPECTED_SPECS}. Unknown dataset scheme {kind!r}. "
            f"Received: dataset={spec!r}"
        )
    if kind == "synthetic":
        parse_synthetic(arg, spec)
        return kind, arg
    what = "a dataset name" if kind == "tfds" else "a folder path"
    if not arg.strip() or (kind == "tfds" and not arg.partition(":")[0].strip()):
        raise ValueError(
            f"dataset {kind!r} needs {what} after '{kind}:' (expected {SCHEMES[kind]!r}). "
            f"Received: dataset={spec!r}"
        )
    return kind, arg


def parse_synthetic(arg, spec=None):
    """`(classes, images, size)` of a `synthetic[:CLASSES[:IMAGES[:SIZE]]]` spec's argument.

    `arg` is what follows `synthetic:` (None or `""` for the defaults `SYNTHETIC_DEFAULTS`).
    Raises a `ValueError` naming the expected form and the received spec.
    """
    spec = spec if spec is not None else f"synthetic:{arg}" if arg else "synthetic"
    parts = [p.strip() for p in arg.split(":")] if arg else []
    names = ("CLASSES", "IMAGES", "SIZE")
    expected = (
        f"expected {SCHEMES['synthetic']!r} with positive integers (CLASSES >= 2), "
        "e.g. 'synthetic:1000:8192:224'"
    )
    if len(parts) > len(names):
        raise ValueError(f"dataset {spec!r} has {len(parts)} fields: {expected}. "
                         f"Received: dataset={spec!r}")
    values = list(SYNTHETIC_DEFAULTS)
    for i, part in enumerate(parts):
        try:
            values[i] = int(part)
        except ValueError:
            values[i] = 0
        if values[i] < (2 if i == 0 else 1):
            raise ValueError(
                f"dataset {spec!r}: {names[i]} must be "
                f"{'an integer >= 2' if i == 0 else 'a positive integer'}, got {part!r}; "
                f"{expected}. Received: dataset={spec!r}"
            )
    return tuple(values)


def load_source(
    spec,
    split="train",
    *,
    data_dir=None,
    num_channels=3,
    on_corrupt="error",
    download=False,
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
        source = _digits(split)
    elif kind == "synthetic":
        source = _synthetic(arg, split, spec)
    elif kind == "folder":
        source = _folder(arg, split, num_channels, on_corrupt)
    elif kind == "imagefolder":
        source = _image_folder(arg, split, on_corrupt, spec)
    else:
        name, _, train_split = arg.partition(":")
        if split == "train" and train_split:
            split = train_split
        source = tfds_builder_source(
            _prepared_tfds_builder(name, data_dir, download, spec), split, spec
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
    tf = _tf()
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


def _digits(split):
    if split not in ("train", "test"):
        raise ValueError(f"digits has splits 'train' and 'test'. Received: split={split!r}")
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    tf = _tf()
    digits = load_digits()
    images = np.round(digits.images * (255.0 / 16.0)).astype("uint8")[..., None]
    labels = digits.target.astype("int64")
    x_train, x_test, y_train, y_test = train_test_split(
        images, labels, test_size=TEST_FRACTION, random_state=SPLIT_SEED, stratify=labels
    )
    x, y = (x_train, y_train) if split == "train" else (x_test, y_test)
    return Source(
        tf.data.Dataset.from_tensor_slices((x, y)),
        num_examples=len(y),
        num_classes=10,
        name="digits",
        default_flip=False,
        image_shape=(8, 8, 1),
    )


def _synthetic(arg, split, spec):
    """Random class-patterned images, made inside the `tf.data` graph (see the module docstring)."""
    if split not in ("train", "test"):
        raise ValueError(f"synthetic has splits 'train' and 'test'. Received: split={split!r}")
    tf = _tf()
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

    ds = tf.data.Dataset.range(count).map(make, num_parallel_calls=tf.data.AUTOTUNE)
    return Source(
        ds, count, classes, spec, default_flip=True, image_shape=(size, size, 3),
        make_example=make,
    )


def _check_dir(path, spec):
    """Raises a clear error unless `path` is a readable folder."""
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"Image folder not found: {path!r} (dataset {spec!r}). Expected an existing folder "
            "with one sub-folder of images per class; check the path."
        )
    if not os.path.isdir(path):
        raise ValueError(
            f"Expected a folder with one sub-folder of images per class, but {path!r} is a file "
            f"(dataset {spec!r}). Pass the folder that holds the class folders."
        )
    if not os.access(path, os.R_OK | os.X_OK):
        raise PermissionError(
            f"Image folder {path!r} is not readable (dataset {spec!r}). Fix its permissions."
        )


def _list_dir(path):
    try:
        return sorted(os.listdir(path))
    except PermissionError as e:
        raise PermissionError(
            f"Cannot list {path!r}: permission denied. Fix its permissions."
        ) from e


def _list_class_folders(root, extensions=IMAGE_EXTENSIONS, recursive=True):
    """`(classes, files, labels)`: sorted class folders of `root` and their images.

    Labels index `classes`, empty class folders included, so a label never depends on which
    other folders happen to hold images.
    """
    classes = [
        d for d in _list_dir(root) if os.path.isdir(os.path.join(root, d)) and not d.startswith(".")
    ]
    files, labels = [], []
    for label, name in enumerate(classes):
        folder = os.path.join(root, name)
        walk = sorted(os.walk(folder)) if recursive else [(folder, None, _list_dir(folder))]
        for dirpath, _, filenames in walk:
            for f in sorted(filenames):
                if f.lower().endswith(extensions):
                    files.append(os.path.join(dirpath, f))
                    labels.append(label)
    return classes, files, labels


def _check_classes(root, classes, labels, spec, split, extensions=IMAGE_EXTENSIONS):
    """At least two class folders (two with images for training); empty ones warned about."""
    listing = f"Expected one sub-folder of images ({', '.join(extensions)}) per class"
    if not classes:
        raise ValueError(
            f"No class sub-folders in {root!r} (dataset {spec!r}). {listing}, e.g. "
            f"{os.path.join(root, 'cat', '0.png')!r}."
        )
    if len(classes) < 2:
        raise ValueError(
            f"A classification dataset needs at least 2 classes, but {root!r} has one class "
            f"folder: {classes[0]!r} (dataset {spec!r}). {listing}; add a folder per class."
        )
    present = set(labels)
    empty = [name for i, name in enumerate(classes) if i not in present]
    if empty and split == "train" and len(present) < 2:
        found = [name for i, name in enumerate(classes) if i in present]
        raise ValueError(
            f"A training set needs images of at least 2 classes, but in {root!r} only "
            f"{found} has images; empty class folders: {empty} (dataset {spec!r}). {listing}."
        )
    if empty:
        message = (
            f"Class folder(s) without images in {root!r}: {empty} (dataset {spec!r}). They "
            f"keep their label index (num_classes={len(classes)}) but have no examples."
        )
        warnings.warn(message, stacklevel=4)


def _folder(root, split, num_channels, on_corrupt):
    import numpy as np

    tf = _tf()
    spec = f"folder:{root}"
    _check_dir(root, spec)
    split_dirs = {"train": ("train",), "test": ("test", "validation", "val")}
    aliases = split_dirs.get(split, (split,))
    present = [a for a in aliases if os.path.isdir(os.path.join(root, a))]
    if present and os.path.isdir(os.path.join(root, "train")):
        folder = os.path.join(root, present[0])
        classes, files, labels = _list_class_folders(folder)
        train_classes = _list_class_folders(os.path.join(root, "train"))[0]
        if classes != train_classes:
            raise ValueError(
                f"The class folders of split {present[0]!r} differ from 'train' in {root!r}. "
                f"Expected: {train_classes}. Received: {classes}"
            )
        _check_classes(folder, classes, labels, spec, split)
    else:
        if split not in ("train", "test"):
            raise ValueError(
                f"{spec} has no {split!r} sub-folder; without split folders the splits "
                f"are 'train' and 'test' (30% held out). Received: split={split!r}"
            )
        folder = root
        classes, files, labels = _list_class_folders(root)
        _check_classes(root, classes, labels, spec, split)
        if files:
            from sklearn.model_selection import train_test_split

            idx = np.arange(len(files))
            counts = np.bincount(labels)
            stratify = labels if counts[counts > 0].min() >= 2 else None
            train_idx, test_idx = train_test_split(
                idx, test_size=TEST_FRACTION, random_state=SPLIT_SEED, stratify=stratify
            )
            keep = np.sort(train_idx if split == "train" else test_idx)
            files = [files[i] for i in keep]
            labels = [labels[i] for i in keep]
    if not files:
        raise ValueError(
            f"No images ({', '.join(IMAGE_EXTENSIONS)}) found in the class sub-folders "
            f"{classes} of {folder!r} (dataset {spec!r}). Put the images of class C in "
            f"{os.path.join(folder, 'C')!r}."
        )
    bad = _handle_corrupt(files, folder, split, on_corrupt)
    if bad:
        bad_set = set(bad)
        kept = [(f, y) for f, y in zip(files, labels, strict=True) if f not in bad_set]
        files, labels = [f for f, _ in kept], [y for _, y in kept]

    def decode(path, label):
        image = tf.io.decode_image(
            tf.io.read_file(path), channels=3, expand_animations=False, dtype="uint8"
        )
        image.set_shape((None, None, 3))
        return image, label

    ds = tf.data.Dataset.from_tensor_slices(
        (tf.constant(files, "string"), np.asarray(labels, "int64"))
    )
    ds = ds.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
    return Source(ds, len(files), len(classes), spec)


def _handle_corrupt(files, folder, split, on_corrupt):
    """The corrupt images among `files`: an error, or (`on_corrupt="skip"`) a warning.

    Raises a `ValueError` naming the folder and the count when every image is corrupt.
    """
    bad = find_corrupt_images(files)
    if not bad:
        return bad
    shown = "\n  ".join(bad[:10]) + (f"\n  ... and {len(bad) - 10} more" if len(bad) > 10 else "")
    if len(bad) == len(files):
        raise ValueError(
            f"All {len(bad)} image(s) of split {split!r} in {folder!r} cannot be decoded, so "
            f"nothing is left to load (on_corrupt={on_corrupt!r}):\n  {shown}\n"
            "Check that these are image files (PNG/JPEG/BMP/GIF/WebP) and not empty or truncated."
        )
    if on_corrupt == "error":
        raise ValueError(
            f"{len(bad)} of {len(files)} image(s) in {folder!r} cannot be decoded:\n  {shown}\n"
            "Remove or fix them, or skip them with on_corrupt='skip' (--on-corrupt skip)."
        )
    warnings.warn(f"Skipping {len(bad)} corrupt image(s) in {folder!r}:\n  {shown}", stacklevel=4)
    return bad


def find_corrupt_images(paths):
    """Returns the paths TensorFlow cannot decode (one parallel decoding pass)."""
    tf = _tf()
    if not paths:
        return []

    def try_decode(i, path):
        image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
        return i, tf.shape(image)[0]

    ds = tf.data.Dataset.from_tensor_slices((tf.range(len(paths), dtype="int64"), list(paths)))
    ds = ds.map(try_decode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
    ds = ds.ignore_errors()
    ok = {int(i) for i, _ in ds.as_numpy_iterator()}
    return [p for i, p in enumerate(paths) if i not in ok]


def _tfds():
    return _import(
        "tensorflow_datasets",
        "'imagefolder:' and 'tfds:' datasets need TensorFlow Datasets "
        "(pip install tensorflow-datasets).",
    )


def _short_error(error):
    """The first line of a tfds error and its 'Did you mean' hint, not its list of datasets."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return " ".join(lines[:1] + [line for line in lines[1:] if line.startswith("Did you mean")])


def _tfds_builder(name, data_dir, spec):
    try:
        return _tfds().builder(name, data_dir=data_dir)
    except Exception as e:  # DatasetNotFoundError, bad config or version, ...
        raise ValueError(
            f"Unknown TensorFlow Datasets name {name!r} (dataset {spec!r}): {_short_error(e)} "
            "Expected a name from https://www.tensorflow.org/datasets/catalog/overview "
            "(NAME or NAME/CONFIG)."
        ) from e


def _image_folder(root, split, on_corrupt, spec):
    """A `Source` from `tfds.folder_dataset.ImageFolder` (`root/SPLIT/CLASS/*.png`), checked.

    Labels index the class folders of all splits together (tfds' rule), so a class folder that
    is empty, or missing in one split, keeps its index; it is warned about.
    """
    _check_dir(root, spec)
    builder = _tfds().folder_dataset.ImageFolder(root)
    splits = sorted(builder.info.splits)
    if split not in splits:
        found = [d for d in _list_dir(root) if os.path.isdir(os.path.join(root, d))]
        raise ValueError(
            f"{spec!r} has no split {split!r} with images. Expected {root}/{split}/CLASS/"
            f"IMAGE ({', '.join(TFDS_IMAGE_EXTENSIONS)}); splits with images: {splits}, "
            f"sub-folders: {found}. Received: split={split!r}"
        )
    names = list(builder.info.features["label"].names)
    folder = os.path.join(root, split)
    classes, files, labels = _list_class_folders(folder, TFDS_IMAGE_EXTENSIONS, recursive=False)
    labels = [names.index(classes[label]) for label in labels]
    _check_classes(folder, names, labels, spec, split, TFDS_IMAGE_EXTENSIONS)
    bad = _handle_corrupt(files, folder, split, on_corrupt)
    source = tfds_builder_source(builder, split, spec)
    if bad:  # tfds decodes inside its dataset: drop exactly the elements that fail to decode
        source.dataset = source.dataset.ignore_errors()
        source.num_examples -= len(bad)
    return source


def _prepared_tfds_builder(name, data_dir, download, spec):
    builder = _tfds_builder(name, data_dir, spec)
    if builder.is_prepared():
        return builder
    where = data_dir or "~/tensorflow_datasets (tfds' default)"
    if not download:
        _raise_not_prepared(
            name,
            f"is not prepared in {where} (looked for {builder.data_dir}). Nothing was downloaded.",
        )
    if not getattr(builder, "MANUAL_DOWNLOAD_INSTRUCTIONS", None):
        unreachable = unreachable_hosts(download_hosts(builder))
        if unreachable:
            causes = "; ".join(f"{host}: {cause}" for host, cause in unreachable.items())
            _raise_not_prepared(
                name,
                f"is not prepared in {where} and cannot be downloaded here: no connection to "
                f"the download host(s) ({causes}). Nothing was downloaded.",
                download=True,
            )
    try:
        builder.download_and_prepare()
    except Exception as e:  # requests/urllib errors, a missing manual download, ...
        _raise_not_prepared(
            name,
            f"is not prepared in {where} and downloading or preparing it failed: "
            f"{type(e).__name__}: {_short_error(e)}",
            download=True,
            cause=e,
        )
    return builder


def _raise_not_prepared(name, problem, download=False, cause=None):
    """Raises the `FileNotFoundError` that says how to prepare tfds dataset `name` elsewhere."""
    raise FileNotFoundError(
        f"TensorFlow Datasets dataset {name!r} {problem} To prepare it:\n"
        f"  - on a machine with network: `tfds build {name} --data_dir DIR` (or "
        f"`tfds.builder({name!r}, data_dir=DIR).download_and_prepare()`), then copy DIR here "
        "and pass --data-dir DIR;\n"
        "  - datasets that need a manual download (e.g. imagenet2012): put the archives in "
        f"DIR/downloads/manual first (see the tfds catalog page of {name!r})"
        + (";\n  - or allow downloading here with --download." if not download else ".")
    ) from cause


def download_hosts(builder):
    """The `(host, port)` pairs a tfds builder downloads from (from its checksums file).

    Empty when tfds has no URL list for the dataset; the download is then not probed, and a
    failure is still reported with the preparation instructions (after tfds' own retries).
    """
    try:
        urls = list(builder.url_infos or ())
    except Exception:  # no checksums file, or one tfds cannot read
        return set()
    hosts = set()
    for url in urls:
        parts = urllib.parse.urlsplit(url)
        if parts.hostname:
            default = {"https": 443, "http": 80, "ftp": 21}.get(parts.scheme, 443)
            hosts.add((parts.hostname, parts.port or default))
    return hosts


def unreachable_hosts(hosts, timeout=None):
    """`{"host:port": cause}` for the hosts a TCP connection cannot reach within `timeout` s.

    All hosts are probed in parallel (a connection is opened and closed, nothing is sent), so
    the check takes at most `timeout` seconds (`PROBE_TIMEOUT` by default) even when name
    resolution hangs.
    """
    timeout = PROBE_TIMEOUT if timeout is None else timeout
    results = {}

    def probe(host, port):
        try:
            with socket.create_connection((host, port), timeout=timeout):
                results[(host, port)] = None
        except OSError as e:
            results[(host, port)] = f"{type(e).__name__}: {e}"

    threads = [threading.Thread(target=probe, args=hp, daemon=True) for hp in sorted(hosts)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    no_answer = f"no answer within {timeout:g} s"
    return {
        f"{host}:{port}": results.get((host, port), no_answer)
        for host, port in sorted(hosts)
        if results.get((host, port), no_answer) is not None
    }


def tfds_builder_source(builder, split, name=None):
    """A `Source` from a prepared tfds builder (a catalog dataset or a tfds `ImageFolder`)."""
    splits = builder.info.splits
    if split not in splits and split.split("[")[0] not in splits:
        raise ValueError(
            f"split must be one of {sorted(splits)} for dataset {name or builder.name!r}. "
            f"Received: split={split!r}"
        )
    keys = builder.info.supervised_keys
    image_key, label_key = (keys[0], keys[1]) if keys else ("image", "label")
    ds = builder.as_dataset(split=split, shuffle_files=False)
    ds = ds.map(lambda ex: (ex[image_key], ex[label_key]))
    shape = builder.info.features[image_key].shape
    fixed = shape if shape and None not in shape else None
    ds = ds.map(lambda image, label: (image, _tf().cast(label, "int64")))
    return Source(
        ds,
        num_examples=int(splits[split].num_examples),
        num_classes=int(builder.info.features[label_key].num_classes),
        name=name or f"tfds:{builder.name}",
        image_shape=tuple(fixed) if fixed else None,
    )


def default_eval_split(spec, data_dir=None):
    """`"test"` for digits/folders; for tfds the first of test/validation the dataset has."""
    kind, arg = parse_spec(spec)
    if kind != "tfds":
        return "test"
    splits = _tfds_builder(arg.partition(":")[0], data_dir, spec).info.splits
    for name in ("test", "validation"):
        if name in splits:
            return name
    raise ValueError(
        f"Dataset {spec!r} has no 'test' or 'validation' split (splits: {sorted(splits)}); set "
        "eval_split (--eval-split) to one of them."
    )


# --- preprocessing ----------------------------------------------------------------------------


class _TFOps:
    """The few ops `crop_box_from_uniforms` needs, in TensorFlow (for use inside tf.data)."""

    def __getattr__(self, name):
        tf = _tf()
        return {
            "cast": tf.cast,
            "exp": tf.exp,
            "minimum": tf.minimum,
            "sqrt": tf.sqrt,
        }[name]


def sample_crop_box(height, width, seed, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """Stateless crop box `(y0, x0, h, w)` (float pixels) for an image of `height x width`."""
    tf = _tf()
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
    tf = _tf()
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


def _scale(images):
    return images / 127.5 - 1.0


def steps_per_epoch_for(num_examples, batch_size):
    """Batches in one pass over the training data (incomplete last batch dropped)."""
    steps = num_examples // batch_size
    if steps < 1:
        raise ValueError(
            f"batch_size ({batch_size}) is larger than the training set ({num_examples} examples)."
        )
    return steps


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
):
    """The training `tf.data.Dataset` for epochs `start_epoch .. epochs - 1`.

    Epoch `e` is a fresh shuffle (seed `(seed, e)`) of the source, cropped (and rotated by up to
    `rotation` degrees, in the same resampling pass) and flipped with per-example stateless seeds,
    batched (`drop_remainder`), augmented by `augmenters` (see
    `keras_vit.training.augment.build_augmenters`; they see values in [0, 255]), scaled to
    [-1, 1], and cut to `steps_per_epoch` batches. Restarting at `start_epoch` therefore yields
    the same batches as an uninterrupted run (Keras' augmentation layers excepted: they draw from
    their own seed generators). A source with `make_example` (`synthetic`) is shuffled by index
    over the whole set, and each example made after the shuffle, so that no epoch waits for a
    shuffle buffer of images to fill.

    Returns:
        `tf.data.Dataset` of `(images float32 (B, H, W, C), one-hot labels (B, K))`.
    """
    tf = _tf()
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
        def preprocess(index, example):
            image, label = example if make is None else make(example)
            key = tf.stack([tf.constant(seed * 1_000_003 + epoch, "int64"), index])
            image = random_resized_crop(image, size, key, crop_scale, crop_ratio, rotation)
            if flip:
                image = tf.image.stateless_random_flip_left_right(image, key + [0, 1 << 40])
            return image, tf.one_hot(label, num_classes)

        ds = base.shuffle(buffer, seed=seed * 7919 + epoch, reshuffle_each_iteration=False)
        ds = ds.repeat()  # short datasets: an epoch may ask for more batches than one pass
        ds = ds.enumerate().map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)
        return ds.batch(batch_size, drop_remainder=True).take(steps)

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
    ds = ds.map(lambda x, y: (_scale(x), y), num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)


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

    tf = _tf()
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


def eval_pipeline(source, *, image_size, batch_size, pad=False):
    """The evaluation `tf.data.Dataset`: resize, scale to [-1, 1], one-hot labels, in order.

    With `pad=True` (several processes: each must get equal, full batches) the last batch is
    filled up to `batch_size` with blank images of weight 0, and every real image gets the weight
    `padded count / real count`: Keras' loss (the weighted sum over a batch divided by its size)
    and weighted metrics then average over the real images, each counted once.

    Returns:
        `tf.data.Dataset` of `(images, one-hot labels)`, or `(images, one-hot labels, weights)`
        with `pad=True` (`ceil(n / batch_size)` batches).
    """
    tf = _tf()
    size = tuple(image_size) if isinstance(image_size, (tuple, list)) else (image_size,) * 2
    num_classes = source.num_classes

    def preprocess(image, label):
        image = tf.image.resize(tf.cast(image, "float32"), size, method="bilinear")
        return _scale(image), tf.one_hot(label, num_classes)

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
