"""A run's splits (keras_vit/data/splits.py): the validation split is carved from train (digits,
synthetic, folders, imagefolder) or is the dataset's own, never the test split."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from keras_vit import data  # noqa: E402
from tests.data.test_sources import write_pngs  # noqa: E402


def arrays(source):
    images, labels = zip(*source.dataset.as_numpy_iterator(), strict=True)
    return np.stack(images), np.array(labels)


def keys(images):
    return [image.tobytes() for image in images]


def test_digits_validation_is_carved_from_train_apart_from_test():
    pytest.importorskip("sklearn")
    whole = data.load_source("digits", "train")
    splits = data.load_splits("digits", validation_fraction=0.1)
    assert splits.info["train"]["examples"] == splits.train.num_examples == 1131
    assert splits.info["validation"]["examples"] == splits.validation.num_examples == 126
    assert splits.info["test"]["examples"] == splits.test.num_examples == 540
    assert splits.info["validation"]["source"] == (
        "carved from train (fraction 0.1, seed 0, stratified)"
    )
    train_x, train_y = arrays(splits.train)
    val_x, val_y = arrays(splits.validation)
    whole_x, whole_y = arrays(whole)
    # Train and validation together are the digits' training split, each example once.
    assert sorted(keys(train_x) + keys(val_x)) == sorted(keys(whole_x))
    # Stratified: every class has its share of the validation split (12 or 13 of 126).
    counts = np.bincount(val_y, minlength=10)
    assert counts.sum() == 126 and counts.min() >= 12 and counts.max() <= 13
    # Deterministic: the same examples on every load.
    np.testing.assert_array_equal(val_x, arrays(data.load_splits("digits").validation)[0])


def test_synthetic_and_folder_carves_are_disjoint_from_train_and_test(tmp_path):
    splits = data.load_splits("synthetic:3:40:8", validation_fraction=0.25)
    assert [splits.info[k]["examples"] for k in ("train", "validation", "test")] == [30, 10, 10]
    # 14, 13 and 13 images per class: 3.5, 3.25 and 3.25 held out, rounded to 4, 3, 3.
    assert sorted(arrays(splits.validation)[1].tolist()) == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert not set(keys(arrays(splits.train)[0])) & set(keys(arrays(splits.validation)[0]))
    # A pipeline over the carved indices (the synthetic source shuffles indices).
    batch = next(iter(data.train_pipeline(splits.train, image_size=8, batch_size=5, epochs=1)))
    assert tuple(batch[0].shape) == (5, 8, 8, 3)

    write_pngs(tmp_path / "imgs", per_class=10)
    splits = data.load_splits(f"folder:{tmp_path / 'imgs'}", validation_fraction=0.2)
    sizes = [splits.info[k]["examples"] for k in ("train", "validation", "test")]
    assert sizes == [17, 4, 9]  # 30 images, 30% test, 20% of the 21 left for validation
    parts = [set(keys(arrays(s)[0])) for s in (splits.train, splits.validation, splits.test)]
    assert not parts[0] & parts[1] and not parts[1] & parts[2] and not parts[0] & parts[2]


def test_no_validation_split_with_fraction_zero_or_without_validation():
    splits = data.load_splits("synthetic:3:40:8", validation_fraction=0.0)
    assert splits.validation is None and splits.train.num_examples == 40
    assert splits.info["validation"]["examples"] == 0
    assert "validation_fraction 0" in splits.info["validation"]["source"]
    splits = data.load_splits("synthetic:3:40:8", validation=False)
    assert splits.validation is None and splits.train.num_examples == 40


def test_a_datasets_own_validation_split_is_used(tmp_path):
    pytest.importorskip("tensorflow_datasets")
    for split, per_class in (("train", 6), ("validation", 2), ("test", 3)):
        write_pngs(tmp_path / split, per_class=per_class, seed=len(split))
    splits = data.load_splits(f"imagefolder:{tmp_path}", validation_fraction=0.5)
    assert [splits.info[k]["examples"] for k in ("train", "validation", "test")] == [18, 6, 9]
    assert splits.info["validation"]["source"] == "the dataset's own 'validation' split"
    # The validation split as the test split (--eval-split validation): carved from train.
    splits = data.load_splits(
        f"imagefolder:{tmp_path}", eval_split="validation", validation_fraction=1 / 3
    )
    assert [splits.info[k]["examples"] for k in ("train", "validation", "test")] == [12, 6, 6]
    assert splits.info["validation"]["source"].startswith("carved from train")
    train, val = (set(keys(arrays(s)[0])) for s in (splits.train, splits.validation))
    assert len(train) == 12 and len(val) == 6 and not train & val
    assert sorted(arrays(splits.validation)[1].tolist()) == [0, 0, 1, 1, 2, 2]


def test_a_carve_too_small_for_the_data_names_the_flag():
    with pytest.raises(ValueError, match=r"--validation-fraction\) 0.01 of the 40 training"):
        data.load_splits("synthetic:3:40:8", validation_fraction=0.01)


def test_a_tfds_carve_is_a_sub_split_of_the_training_split():
    from keras_vit.data.carve import Carve
    from keras_vit.data.tfds_source import carved_split

    assert carved_split("train", 100, Carve(0.1, "train"), "tfds:x") == "train[:90]"
    assert carved_split("train", 100, Carve(0.1, "validation"), "tfds:x") == "train[90:]"
    with pytest.raises(ValueError, match=r"sliced split 'train\[:10%\]'.*--validation-fraction 0"):
        carved_split("train[:10%]", 100, Carve(0.1), "tfds:x")
