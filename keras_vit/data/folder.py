"""`folder:PATH`: one sub-folder of images per class, with split folders or a held-out 30%;
the folder and class checks `imagefolder:` shares."""

import os
import warnings

from keras_vit.data._imports import import_tf
from keras_vit.data.corrupt import handle_corrupt
from keras_vit.data.source import IMAGE_EXTENSIONS, SPLIT_SEED, TEST_FRACTION, Source


def check_dir(path, spec):
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


def list_dir(path):
    try:
        return sorted(os.listdir(path))
    except PermissionError as e:
        raise PermissionError(
            f"Cannot list {path!r}: permission denied. Fix its permissions."
        ) from e


def list_class_folders(root, extensions=IMAGE_EXTENSIONS, recursive=True):
    """`(classes, files, labels)`: sorted class folders of `root` and their images.

    Labels index `classes`, empty class folders included, so a label never depends on which
    other folders happen to hold images.
    """
    classes = [
        d for d in list_dir(root) if os.path.isdir(os.path.join(root, d)) and not d.startswith(".")
    ]
    files, labels = [], []
    for label, name in enumerate(classes):
        folder = os.path.join(root, name)
        walk = sorted(os.walk(folder)) if recursive else [(folder, None, list_dir(folder))]
        for dirpath, _, filenames in walk:
            for f in sorted(filenames):
                if f.lower().endswith(extensions):
                    files.append(os.path.join(dirpath, f))
                    labels.append(label)
    return classes, files, labels


def check_classes(root, classes, labels, spec, split, extensions=IMAGE_EXTENSIONS):
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


def folder_source(root, split, num_channels, on_corrupt, carve=None):
    """The images of `split`; for `"train"` with a `Carve`, its part (stratified by class),
    picked before the images are checked, so each image is read once."""
    import numpy as np

    tf = import_tf()
    spec = f"folder:{root}"
    check_dir(root, spec)
    split_dirs = {"train": ("train",), "test": ("test", "validation", "val")}
    aliases = split_dirs.get(split, (split,))
    present = [a for a in aliases if os.path.isdir(os.path.join(root, a))]
    if present and os.path.isdir(os.path.join(root, "train")):
        folder = os.path.join(root, present[0])
        classes, files, labels = list_class_folders(folder)
        train_classes = list_class_folders(os.path.join(root, "train"))[0]
        if classes != train_classes:
            raise ValueError(
                f"The class folders of split {present[0]!r} differ from 'train' in {root!r}. "
                f"Expected: {train_classes}. Received: {classes}"
            )
        check_classes(folder, classes, labels, spec, split)
    else:
        if split not in ("train", "test"):
            raise ValueError(
                f"{spec} has no {split!r} sub-folder; without split folders the splits "
                f"are 'train' and 'test' (30% held out). Received: split={split!r}"
            )
        folder = root
        classes, files, labels = list_class_folders(root)
        check_classes(root, classes, labels, spec, split)
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
    if carve is not None and files:
        keep = carve.indices(len(files), labels=np.asarray(labels))
        files = [files[i] for i in keep]
        labels = [labels[i] for i in keep]
    if not files:
        raise ValueError(
            f"No images ({', '.join(IMAGE_EXTENSIONS)}) found in the class sub-folders "
            f"{classes} of {folder!r} (dataset {spec!r}). Put the images of class C in "
            f"{os.path.join(folder, 'C')!r}."
        )
    bad = handle_corrupt(files, folder, split, on_corrupt)
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

