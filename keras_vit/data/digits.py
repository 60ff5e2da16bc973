"""The offline default dataset: scikit-learn's 8x8 handwritten digits, 30% held out (stratified,
fixed seed)."""

from keras_vit.data._imports import import_tf
from keras_vit.data.source import SPLIT_SEED, TEST_FRACTION, Source


def digits_source(split, carve=None):
    """The digits' `split`; for `"train"` with a `Carve`, its part (stratified by class)."""
    if split not in ("train", "test"):
        raise ValueError(f"digits has splits 'train' and 'test'. Received: split={split!r}")
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    tf = import_tf()
    digits = load_digits()
    images = np.round(digits.images * (255.0 / 16.0)).astype("uint8")[..., None]
    labels = digits.target.astype("int64")
    x_train, x_test, y_train, y_test = train_test_split(
        images, labels, test_size=TEST_FRACTION, random_state=SPLIT_SEED, stratify=labels
    )
    x, y = (x_train, y_train) if split == "train" else (x_test, y_test)
    if carve is not None:
        keep = carve.indices(len(y), labels=y)
        x, y = x[keep], y[keep]
    return Source(
        tf.data.Dataset.from_tensor_slices((x, y)),
        num_examples=len(y),
        num_classes=10,
        name="digits",
        default_flip=False,
        image_shape=(8, 8, 1),
    )

