"""keras_vit/data/pipelines.py: the training and evaluation pipelines (on digits and synthetic)."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
pytest.importorskip("tensorflow_datasets")

from keras_vit import data  # noqa: E402


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


@pytest.mark.parametrize("repeats", [1, 3])
def test_repeated_augmentation_copies_each_image_under_its_own_crop(repeats):
    source = data.load_source("synthetic:3:12:16")
    ds = data.train_pipeline(source, image_size=16, batch_size=6, epochs=1, steps_per_epoch=2,
                             seed=0, crop_scale=(0.3, 1.0), rotation=10.0,
                             repeated_augmentation=repeats)
    for images, labels in ds:
        images, labels = images.numpy(), labels.numpy()
        assert images.shape == (6, 16, 16, 3)
        if repeats == 1:
            continue
        # copies first: rows c * 2 + i are copy c of image i (2 images, 3 copies each)
        copies = images.reshape(3, 2, 16, 16, 3)
        for i in range(2):
            np.testing.assert_array_equal(labels.reshape(3, 2, -1)[:, i], labels[[i] * 3])
            assert not np.allclose(copies[0, i], copies[1, i])  # their own crops


def test_repeated_augmentation_checks():
    source = data.load_source("synthetic:3:12:16")
    with pytest.raises(ValueError, match="must divide the batch size. Received: batch_size=4"):
        data.train_pipeline(source, image_size=16, batch_size=4, epochs=1,
                            repeated_augmentation=3)
    with pytest.raises(ValueError, match="must be a positive integer"):
        data.train_pipeline(source, image_size=16, batch_size=4, epochs=1,
                            repeated_augmentation=0)
