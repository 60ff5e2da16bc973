"""Every dataset mistake ends in a clear `ValueError` / `FileNotFoundError` (issue 23).

The images are tiny PNGs written with PIL by the tests; nothing touches the network (the offline
tfds check is exercised with a patched `socket.create_connection`).
"""

import os

import numpy as np
import pytest

pytest.importorskip("tensorflow")
tfds = pytest.importorskip("tensorflow_datasets")
Image = pytest.importorskip("PIL.Image")

from keras_vit import data  # noqa: E402


def write_images(folder, classes, per_class=3):
    for label, name in enumerate(classes):
        os.makedirs(folder / name, exist_ok=True)
        for i in range(per_class):
            pixels = np.full((8, 8, 3), 30 * label + i, "uint8")
            Image.fromarray(pixels).save(folder / name / f"{i}.png")


def write_corrupt(folder, classes, per_class=3):
    for name in classes:
        os.makedirs(folder / name, exist_ok=True)
        for i in range(per_class):
            (folder / name / f"bad{i}.png").write_bytes(b"\x89PNG\r\n\x1a\ntruncated")


@pytest.mark.parametrize("kind", ["folder", "imagefolder"])
def test_missing_folder_is_file_not_found(tmp_path, kind):
    missing = tmp_path / "nope"
    with pytest.raises(FileNotFoundError, match="not found") as err:
        data.load_source(f"{kind}:{missing}")
    assert str(missing) in str(err.value)


@pytest.mark.parametrize("kind", ["folder", "imagefolder"])
def test_a_file_instead_of_a_folder_is_named(tmp_path, kind):
    path = tmp_path / "images.txt"
    path.write_text("not a folder")
    with pytest.raises(ValueError, match="is a file") as err:
        data.load_source(f"{kind}:{path}")
    assert str(path) in str(err.value)


@pytest.mark.parametrize("split", ["train", "test"])
def test_all_corrupt_with_skip_names_the_folder_and_count(tmp_path, split):
    write_corrupt(tmp_path / split, ["a", "b"], per_class=2)
    write_corrupt(tmp_path / ("test" if split == "train" else "train"), ["a", "b"], per_class=2)
    for kind, folder in [("folder", tmp_path / split), ("imagefolder", tmp_path / split)]:
        spec = f"{kind}:{tmp_path}"
        with pytest.raises(ValueError, match=r"All 4 image\(s\)") as err:
            data.load_source(spec, split, on_corrupt="skip")
        assert str(folder) in str(err.value) and "bad0.png" in str(err.value)


def test_all_corrupt_without_split_folders(tmp_path):
    write_corrupt(tmp_path, ["a", "b"], per_class=5)
    with pytest.raises(ValueError, match=r"All 7 image\(s\) of split 'train'") as err:
        data.load_source(f"folder:{tmp_path}", on_corrupt="skip")
    assert repr(str(tmp_path)) in str(err.value)


def test_some_corrupt_images_are_skipped_in_an_image_folder(tmp_path):
    write_images(tmp_path / "train", ["a", "b"], per_class=3)
    write_corrupt(tmp_path / "train", ["a"], per_class=1)
    with pytest.raises(ValueError, match="bad0.png"):
        data.load_source(f"imagefolder:{tmp_path}")
    with pytest.warns(UserWarning, match="Skipping 1 corrupt"):
        source = data.load_source(f"imagefolder:{tmp_path}", on_corrupt="skip")
    assert source.num_examples == 6
    assert sum(1 for _ in source.dataset) == 6


@pytest.mark.parametrize("kind", ["folder", "imagefolder"])
def test_a_single_class_is_an_error(tmp_path, kind):
    root = tmp_path / "train" if kind == "imagefolder" else tmp_path
    write_images(root, ["only"], per_class=6)
    with pytest.raises(ValueError, match="at least 2 classes") as err:
        data.load_source(f"{kind}:{tmp_path}")
    assert "'only'" in str(err.value) and str(root) in str(err.value)


def test_one_class_with_images_and_an_empty_one_is_an_error(tmp_path):
    write_images(tmp_path, ["cat"], per_class=6)
    os.makedirs(tmp_path / "dog")
    with pytest.raises(ValueError, match=r"only \['cat'\] has images") as err:
        data.load_source(f"folder:{tmp_path}")
    assert "['dog']" in str(err.value) and str(tmp_path) in str(err.value)


@pytest.mark.parametrize("kind", ["folder", "imagefolder"])
def test_an_empty_class_folder_is_warned_about_and_keeps_the_label_index(tmp_path, kind):
    root = tmp_path / "train" if kind == "imagefolder" else tmp_path
    write_images(root, ["a", "c"], per_class=6)
    os.makedirs(root / "b")
    with pytest.warns(UserWarning, match=r"without images .*\['b'\]") as record:
        source = data.load_source(f"{kind}:{tmp_path}")
    assert str(root) in str(record[0].message)
    assert source.num_classes == 3
    labels = sorted({int(y) for _, y in source.dataset.as_numpy_iterator()})
    assert labels == [0, 2]  # 'c' keeps index 2 although 'b' is empty


def test_an_empty_class_keeps_the_split_stratified(tmp_path):
    write_images(tmp_path, ["a", "c"], per_class=10)
    os.makedirs(tmp_path / "b")
    with pytest.warns(UserWarning, match="without images"):
        test = data.load_source(f"folder:{tmp_path}", "test")
    labels = [int(y) for _, y in test.dataset.as_numpy_iterator()]
    assert sorted(labels) == [0, 0, 0, 2, 2, 2]


def test_a_folder_without_class_folders(tmp_path):
    with pytest.raises(ValueError, match="No class sub-folders") as err:
        data.load_source(f"folder:{tmp_path}")
    assert str(tmp_path) in str(err.value)
    with pytest.raises(ValueError, match="no split 'train' with images"):
        data.load_source(f"imagefolder:{tmp_path}")


def test_unknown_split_names_expected_and_received(tmp_path):
    write_images(tmp_path / "train", ["a", "b"])
    with pytest.raises(ValueError, match=r"splits with images: \['train'\].*split='test'"):
        data.load_source(f"imagefolder:{tmp_path}", "test")
    builder = tfds.folder_dataset.ImageFolder(str(tmp_path))
    with pytest.raises(ValueError, match=r"one of \['train'\].*Received: split='val'"):
        data.tfds_builder_source(builder, "val")
    write_images(tmp_path / "flat", ["a", "b"])
    with pytest.raises(ValueError, match="split='validation'"):
        data.load_source(f"folder:{tmp_path / 'flat'}", "validation")


@pytest.mark.parametrize(
    "spec, match",
    [
        ("hf:cifar10", "Unknown dataset scheme 'hf'"),
        ("cifar10", "Unknown dataset scheme 'cifar10'"),
        ("tfds:", "needs a dataset name"),
        ("tfds::train", "needs a dataset name"),
        ("folder:", "needs a folder path"),
        ("imagefolder:  ", "needs a folder path"),
        ("", "non-empty string"),
        ("synthetic:1", "CLASSES must be an integer >= 2, got '1'"),
        ("synthetic:ten", "CLASSES must be an integer >= 2, got 'ten'"),
        ("synthetic:10:0", "IMAGES must be a positive integer, got '0'"),
        ("synthetic:10:64:-8", "SIZE must be a positive integer"),
        ("synthetic:10:64:32:1", "has 4 fields"),
    ],
)
def test_bad_specs(spec, match):
    with pytest.raises(ValueError, match=match) as err:
        data.load_source(spec)
    assert repr(spec) in str(err.value)


def test_unknown_tfds_name_is_short_and_suggests(tmp_path):
    with pytest.raises(ValueError, match="Unknown TensorFlow Datasets name 'mnsit'") as err:
        data.load_source("tfds:mnsit", data_dir=str(tmp_path))
    message = str(err.value)
    assert "Did you mean" in message and "mnist" in message
    assert "abstract_reasoning" not in message  # not tfds' list of every dataset
    with pytest.raises(ValueError, match="Unknown TensorFlow Datasets name"):
        data.default_eval_split("tfds:mnsit", str(tmp_path))


def test_unprepared_tfds_dataset_names_the_data_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match="not prepared") as err:
        data.load_source("tfds:mnist", data_dir=str(tmp_path))
    assert str(tmp_path) in str(err.value) and "--download" in str(err.value)
