"""The sources (keras_vit/data/folder.py, corrupt.py, tfds_source.py) on images the tests write."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
pytest.importorskip("tensorflow_datasets")

from keras_vit import data  # noqa: E402


def write_pngs(root, classes=("cat", "dog", "fish"), per_class=5, size=(12, 10), seed=0):
    rng = np.random.default_rng(seed)
    paths = []
    for label, name in enumerate(classes):
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            noise = rng.integers(0, 30, (*size, 3), dtype="uint8")
            image = np.full((*size, 3), 40 * label, "uint8") + noise
            path = folder / f"{i}.png"
            path.write_bytes(tf.io.encode_png(image).numpy())
            paths.append(path)
    return paths

def test_folder_loading(tmp_path):
    write_pngs(tmp_path / "imgs", per_class=10)
    train = data.load_source(f"folder:{tmp_path / 'imgs'}", "train")
    test = data.load_source(f"folder:{tmp_path / 'imgs'}", "test")
    assert train.num_classes == 3 and train.num_examples + test.num_examples == 30
    assert test.num_examples == 9
    ds = data.train_pipeline(train, image_size=8, batch_size=4, epochs=1, seed=0)
    x, y = next(iter(ds))
    assert tuple(x.shape) == (4, 8, 8, 3) and tuple(y.shape) == (4, 3)
    # Explicit split folders win.
    write_pngs(tmp_path / "split" / "train", per_class=4)
    write_pngs(tmp_path / "split" / "test", per_class=2)
    assert data.load_source(f"folder:{tmp_path / 'split'}", "test").num_examples == 6


def test_corrupt_image_error_names_the_file_or_is_skipped(tmp_path):
    paths = write_pngs(tmp_path, per_class=4)
    bad = tmp_path / "dog" / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\nnot really a png")
    # The broken file lands in one of the two held-out splits: loading both meets it.
    with pytest.raises(ValueError, match="broken.png"):
        for split in ("train", "test"):
            data.load_source(f"folder:{tmp_path}", split)
    assert data.find_corrupt_images([str(p) for p in paths] + [str(bad)]) == [str(bad)]
    with pytest.warns(UserWarning, match="broken.png"):
        counts = [
            data.load_source(f"folder:{tmp_path}", split, on_corrupt="skip").num_examples
            for split in ("train", "test")
        ]
    assert sum(counts) == 12


def test_tfds_image_folder(tmp_path):
    import tensorflow_datasets as tfds

    write_pngs(tmp_path / "train", per_class=4, size=(10, 10))
    write_pngs(tmp_path / "test", per_class=2, size=(10, 10))
    source = data.load_source(f"imagefolder:{tmp_path}", "train")
    assert (source.num_examples, source.num_classes) == (12, 3)
    builder = tfds.folder_dataset.ImageFolder(str(tmp_path))
    test = data.tfds_builder_source(builder, "test")
    x, labels = data.numpy_arrays(data.eval_pipeline(test, image_size=8, batch_size=8))
    assert x.shape == (6, 8, 8, 3) and sorted(labels.tolist()) == [0, 0, 1, 1, 2, 2]
    ds = data.train_pipeline(source, image_size=8, batch_size=4, epochs=2)
    assert sum(1 for _ in ds) == 6


def test_unprepared_tfds_dataset_fails_fast_with_instructions(tmp_path):
    with pytest.raises(FileNotFoundError, match="--data-dir") as err:
        data.load_source("tfds:mnist", data_dir=str(tmp_path))
    assert "tfds build mnist" in str(err.value)
    with pytest.raises(ValueError, match="dataset must be"):
        data.load_source("cifar10")
