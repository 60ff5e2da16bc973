import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
pytest.importorskip("tensorflow_datasets")

from keras_vit.training import data  # noqa: E402


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


def test_digits_split_and_pipelines():
    train = data.load_source("digits", "train")
    test = data.load_source("digits", "test")
    assert (train.num_examples, test.num_examples) == (1257, 540)  # 30% held out
    assert train.num_classes == 10 and not train.default_flip
    x, labels = data.numpy_arrays(data.eval_pipeline(test, image_size=16, batch_size=128))
    assert x.shape == (540, 16, 16, 3) and x.min() >= -1 and x.max() <= 1
    np.testing.assert_array_equal(x[..., 0], x[..., 2])  # gray replicated
    assert np.bincount(labels, minlength=10).min() >= 50  # stratified
    gray = data.load_source("digits", "test", num_channels=1)
    x1, _ = data.numpy_arrays(data.eval_pipeline(gray, image_size=16, batch_size=540))
    assert x1.shape[-1] == 1


def test_padded_eval_pipeline_counts_each_image_once():
    """pad=True (several processes): whole batches, blank images of weight 0, the real ones of
    weight padded/real, so that Keras' sum-over-batch-size loss is the mean over real images."""
    test = data.load_source("digits", "test")
    plain = data.numpy_arrays(data.eval_pipeline(test, image_size=8, batch_size=200))
    batches = list(data.eval_pipeline(test, image_size=8, batch_size=200, pad=True))
    assert [tuple(x.shape) for x, _, _ in batches] == [(200, 8, 8, 3)] * 3  # 540 -> 600
    x = np.concatenate([b[0] for b in batches])
    y = np.concatenate([b[1] for b in batches])
    w = np.concatenate([b[2] for b in batches])
    np.testing.assert_array_equal(x[:540], plain[0])
    np.testing.assert_array_equal(y[:540].argmax(-1), plain[1])
    np.testing.assert_allclose(w[:540], 600 / 540, rtol=1e-6)
    assert (w[540:] == 0).all() and (x[540:] == 0).all() and (y[540:] == 0).all()
    losses = np.random.default_rng(0).uniform(size=600)  # Keras: sum(w * loss) / batch size
    np.testing.assert_allclose((w * losses).sum() / 600, losses[:540].mean(), rtol=1e-6)


def test_synthetic_dataset_is_deterministic_learnable_and_feeds_the_pipelines():
    train = data.load_source("synthetic:3:12:16")
    test = data.load_source("synthetic:3:12:16", "test")
    assert (train.num_examples, test.num_examples, train.num_classes) == (12, 3, 3)
    assert train.image_shape == (16, 16, 3) and train.default_flip
    x, y = (np.stack(a) for a in zip(*train.dataset.as_numpy_iterator(), strict=True))
    assert x.shape == (12, 16, 16, 3) and x.dtype == np.uint8
    np.testing.assert_array_equal(y, np.arange(12) % 3)  # balanced classes
    again = np.stack([image for image, _ in data.load_source("synthetic:3:12:16").dataset])
    np.testing.assert_array_equal(x, again)  # a fixed function of the spec
    assert len({image.tobytes() for image in x}) == 12  # no two images alike
    x_test = np.stack([image for image, _ in test.dataset.as_numpy_iterator()])
    assert not any(np.array_equal(a, b) for a in x_test for b in x)  # the splits differ
    # Learnable: images of one class are closer to each other than to other classes'.
    means = x.reshape(4, 3, -1).astype("float32").mean(0)  # per-class mean over 4 images
    own = np.abs(x_test.reshape(3, -1) - means).mean(-1)
    other = np.abs(x_test.reshape(3, -1) - np.roll(means, 1, axis=0)).mean(-1)
    assert (own < other).all(), (own, other)
    assert data.load_source("synthetic").image_shape == (224, 224, 3)  # the defaults
    assert data.load_source("synthetic", num_channels=1).image_shape == (224, 224, 1)
    # Shuffled by index (make_example), deterministically: one epoch holds every image once.
    kwargs = dict(image_size=16, batch_size=4, epochs=2, seed=3, crop_scale=(1, 1),
                  crop_ratio=(1, 1))
    epochs = [(x.numpy(), y.numpy()) for x, y in data.train_pipeline(train, **kwargs)]
    assert len(epochs) == 6 and epochs[0][0].shape == (4, 16, 16, 3)
    first = np.concatenate([b for b, _ in epochs[:3]])
    assert -1 <= first.min() and first.max() <= 1
    assert np.bincount(np.concatenate([y for _, y in epochs[:3]]).argmax(-1)).tolist() == [4] * 3
    resumed = next(iter(data.train_pipeline(train, start_epoch=1, **kwargs)))[0].numpy()
    np.testing.assert_array_equal(resumed, epochs[3][0])


def test_train_pipeline_resumes_deterministically():
    source = data.load_source("digits")
    kwargs = dict(image_size=16, batch_size=32, epochs=3, steps_per_epoch=5, seed=4)
    full = [x.numpy() for x, _ in data.train_pipeline(source, **kwargs)]
    resumed = [x.numpy() for x, _ in data.train_pipeline(source, start_epoch=2, **kwargs)]
    assert len(full) == 15 and len(resumed) == 5
    for a, b in zip(full[10:], resumed, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(full[0], full[5])  # each epoch is a new shuffle / crop


def test_tf_random_resized_crop_sizes_and_ranges():
    scale, ratio = (0.25, 0.9), (0.75, 1.25)
    keys = [tf.constant([1, i], "int64") for i in range(300)]
    boxes = np.array(
        [[float(v) for v in data.sample_crop_box(30, 30, key, scale, ratio)] for key in keys]
    )
    y0, x0, h, w = boxes.T
    area = h * w / 900
    assert area.min() >= scale[0] - 1e-5 and area.max() <= scale[1] + 1e-5
    assert (w / h).min() >= ratio[0] - 1e-4 and (w / h).max() <= ratio[1] + 1e-4
    assert (y0 + h <= 30 + 1e-3).all() and (x0 + w <= 30 + 1e-3).all()
    image = tf.zeros((30, 20, 3), "uint8")
    out = data.random_resized_crop(image, (16, 8), tf.constant([0, 1], "int64"))
    assert tuple(out.shape) == (16, 8, 3)


def test_tf_random_resized_crop_resamples_like_the_eval_resize():
    # A box covering the whole image gives exactly the evaluation pipeline's resize (same pixel
    # centres): a model trained on crops is not evaluated on a shifted resampling grid.
    image = np.random.default_rng(0).integers(0, 256, (8, 8, 1), dtype="uint8")
    key = tf.constant([0, 1], "int64")
    full = data.random_resized_crop(image, (24, 24), key, scale=(1.0, 1.0), ratio=(1.0, 1.0))
    resized = tf.image.resize(tf.cast(image, "float32"), (24, 24), method="bilinear")
    np.testing.assert_allclose(full.numpy(), resized.numpy(), atol=1e-3)
    # A smaller box samples inside it: on a horizontal ramp the output spans the box's columns.
    ramp = np.tile(np.arange(32, dtype="uint8")[None, :, None], (32, 1, 1))
    y0, x0, h, w = (float(v) for v in data.sample_crop_box(32, 32, key, (0.25, 0.25), (1, 1)))
    row = data.random_resized_crop(ramp, (16, 16), key, (0.25, 0.25), (1, 1)).numpy()[0, :, 0]
    step = w / 16
    np.testing.assert_allclose(row, x0 + step * (np.arange(16) + 0.5) - 0.5, atol=1e-3)


def test_tf_random_resized_crop_rotation():
    # A horizontal ramp rotated by theta about the centre has gradient (cos theta, sin theta).
    ramp = np.tile(np.arange(32, dtype="uint8")[None, :, None], (32, 1, 1))
    angles = []
    for i in range(4):
        key = tf.constant([2, i], "int64")
        out = data.random_resized_crop(ramp, (32, 32), key, (1, 1), (1, 1), rotation=30).numpy()
        centre = out[12:20, 12:20, 0]  # away from the repeated borders
        along_x = np.diff(centre, axis=1).mean()
        along_y = np.diff(centre, axis=0).mean()
        np.testing.assert_allclose(along_x**2 + along_y**2, 1.0, atol=1e-3)
        angles.append(np.degrees(np.arctan2(along_y, along_x)))
    assert max(abs(a) for a in angles) <= 30 + 1e-3
    assert np.ptp(angles) > 1  # a new angle per key
    with pytest.raises(ValueError, match="rotation"):
        data.train_pipeline(data.load_source("digits"), image_size=8, batch_size=8, epochs=1,
                            rotation=-5)


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
