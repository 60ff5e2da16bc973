"""`tfds:NAME[:SPLIT]` and `imagefolder:PATH` through TensorFlow Datasets: builders, the
not-prepared instructions, the (probed) download, and a `Source` from a prepared builder."""

import os

from keras_vit.data._imports import import_tf, import_tfds
from keras_vit.data.carve import carve_sizes
from keras_vit.data.corrupt import handle_corrupt
from keras_vit.data.folder import check_classes, check_dir, list_class_folders, list_dir
from keras_vit.data.probe import download_hosts, unreachable_hosts
from keras_vit.data.source import Source

TFDS_IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")


def short_error(error):
    """The first line of a tfds error and its 'Did you mean' hint, not its list of datasets."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return " ".join(lines[:1] + [line for line in lines[1:] if line.startswith("Did you mean")])


def tfds_builder(name, data_dir, spec):
    try:
        return import_tfds().builder(name, data_dir=data_dir)
    except Exception as e:  # DatasetNotFoundError, bad config or version, ...
        raise ValueError(
            f"Unknown TensorFlow Datasets name {name!r} (dataset {spec!r}): {short_error(e)} "
            "Expected a name from https://www.tensorflow.org/datasets/catalog/overview "
            "(NAME or NAME/CONFIG)."
        ) from e


def image_folder_builder(root, spec):
    """The `tfds.folder_dataset.ImageFolder` of `root`, checked to be a readable folder."""
    check_dir(root, spec)
    return import_tfds().folder_dataset.ImageFolder(root)


def image_folder_source(root, split, on_corrupt, spec, carve=None):
    """A `Source` from `tfds.folder_dataset.ImageFolder` (`root/SPLIT/CLASS/*.png`), checked.

    Labels index the class folders of all splits together (tfds' rule), so a class folder that
    is empty, or missing in one split, keeps its index; it is warned about. With a `Carve`, its
    part of the split (stratified by class), picked from the ImageFolder's fixed order.
    """
    builder = image_folder_builder(root, spec)
    splits = sorted(builder.info.splits)
    if split not in splits:
        found = [d for d in list_dir(root) if os.path.isdir(os.path.join(root, d))]
        raise ValueError(
            f"{spec!r} has no split {split!r} with images. Expected {root}/{split}/CLASS/"
            f"IMAGE ({', '.join(TFDS_IMAGE_EXTENSIONS)}); splits with images: {splits}, "
            f"sub-folders: {found}. Received: split={split!r}"
        )
    names = list(builder.info.features["label"].names)
    folder = os.path.join(root, split)
    classes, files, labels = list_class_folders(folder, TFDS_IMAGE_EXTENSIONS, recursive=False)
    labels = [names.index(classes[label]) for label in labels]
    check_classes(folder, names, labels, spec, split, TFDS_IMAGE_EXTENSIONS)
    bad = set(handle_corrupt(files, folder, split, on_corrupt))
    source = tfds_builder_source(builder, split, spec)
    if carve is not None:  # ImageFolder has no sub-splits: keep this part's positions
        import numpy as np

        tf = import_tf()
        listed = builder._split_examples[split]  # the dataset's order (tfds' fixed shuffle)
        keep = carve.indices(len(listed), labels=[names.index(e.label) for e in listed])
        mask = np.zeros(len(listed), bool)
        mask[keep] = True
        source.dataset = (
            source.dataset.enumerate()
            .filter(lambda i, example: tf.gather(mask, i))
            .map(lambda i, example: example)
        )
        source.num_examples = len(keep)
        kept = {os.path.normpath(listed[i].image_path) for i in keep}
        bad = {path for path in bad if os.path.normpath(path) in kept}
    if bad:  # tfds decodes inside its dataset: drop exactly the elements that fail to decode
        source.dataset = source.dataset.ignore_errors()
        source.num_examples -= len(bad)
    return source


def prepared_tfds_builder(name, data_dir, download, spec):
    builder = tfds_builder(name, data_dir, spec)
    if builder.is_prepared():
        return builder
    where = data_dir or "~/tensorflow_datasets (tfds' default)"
    if not download:
        raise_not_prepared(
            name,
            f"is not prepared in {where} (looked for {builder.data_dir}). Nothing was downloaded.",
        )
    if not getattr(builder, "MANUAL_DOWNLOAD_INSTRUCTIONS", None):
        unreachable = unreachable_hosts(download_hosts(builder))
        if unreachable:
            causes = "; ".join(f"{host}: {cause}" for host, cause in unreachable.items())
            raise_not_prepared(
                name,
                f"is not prepared in {where} and cannot be downloaded here: no connection to "
                f"the download host(s) ({causes}). Nothing was downloaded.",
                download=True,
            )
    try:
        builder.download_and_prepare()
    except Exception as e:  # requests/urllib errors, a missing manual download, ...
        raise_not_prepared(
            name,
            f"is not prepared in {where} and downloading or preparing it failed: "
            f"{type(e).__name__}: {short_error(e)}",
            download=True,
            cause=e,
        )
    return builder


def raise_not_prepared(name, problem, download=False, cause=None):
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



def tfds_builder_source(builder, split, name=None, carve=None):
    """A `Source` from a prepared tfds builder (a catalog dataset or a tfds `ImageFolder`).

    With a `Carve` (catalog datasets), its part of `split` as a tfds sub-split: the validation
    part is the last examples in tfds' order (shuffled when the dataset was prepared), not
    stratified (the labels are not read in advance).
    """
    splits = builder.info.splits
    if split not in splits and split.split("[")[0] not in splits:
        raise ValueError(
            f"split must be one of {sorted(splits)} for dataset {name or builder.name!r}. "
            f"Received: split={split!r}"
        )
    if carve is not None:
        split = carved_split(split, int(splits[split].num_examples), carve, name)
    keys = builder.info.supervised_keys
    image_key, label_key = (keys[0], keys[1]) if keys else ("image", "label")
    ds = builder.as_dataset(split=split, shuffle_files=False)
    ds = ds.map(lambda ex: (ex[image_key], ex[label_key]))
    shape = builder.info.features[image_key].shape
    fixed = shape if shape and None not in shape else None
    ds = ds.map(lambda image, label: (image, import_tf().cast(label, "int64")))
    return Source(
        ds,
        num_examples=int(splits[split].num_examples),
        num_classes=int(builder.info.features[label_key].num_classes),
        name=name or f"tfds:{builder.name}",
        image_shape=tuple(fixed) if fixed else None,
    )



def carved_split(split, count, carve, name):
    """The tfds sub-split of `carve`'s part of `split` (`count` examples): `train[:-N]` or
    `train[-N:]` with N held out for validation."""
    if "[" in split:
        raise ValueError(
            f"Cannot carve a validation split out of the sliced split {split!r} of dataset "
            f"{name!r}. Pass --validation-fraction 0, or a training split without [...]. "
            f"Received: split={split!r}"
        )
    train, _ = carve_sizes(count, carve.fraction)
    return f"{split}[:{train}]" if carve.part == "train" else f"{split}[{train}:]"
