"""The calibration images of a full-integer LiteRT export (`representative_images`).

From an array, a `.npy` / `.npz` file, or any dataset spec the recipes read (`"digits"`,
`"folder:PATH"`, `"imagefolder:PATH"`, `"tfds:NAME"`), resized and scaled as the recipes'
evaluation pipeline does. `keras_vit.export.litert` (which re-exports these) calibrates
`quantize="int8"` on them.
"""

import dataclasses
import os

import numpy as np

from keras_vit.export import _checks
from keras_vit.preprocessing import input_range, scaled_pixels

REPRESENTATIVE_SAMPLES = 200
_RANGE_TOLERANCE = 1e-3
_NPZ_KEYS = ("images", "x")


def _load_array_file(path):
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"Representative data file not found: {path!r}")
    try:
        loaded = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as error:
        raise ValueError(
            f"Representative data file {path!r} is not a readable .npy/.npz array file ({error})."
        ) from None
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        return loaded
    with loaded:
        keys = list(loaded.keys())
        key = next((k for k in _NPZ_KEYS if k in keys), keys[0] if len(keys) == 1 else None)
        if key is None:
            raise ValueError(
                f"Representative data file {path!r} holds several arrays: expected one named "
                f"{' or '.join(repr(k) for k in _NPZ_KEYS)}, or a single array. "
                f"Received: {keys}"
            )
        return loaded[key]


def _from_dataset(spec, image_shape, num_samples, seed, preprocessing=None):
    """`num_samples` training images of a dataset spec, resized and scaled as for evaluation.

    Example `i` is kept when a stateless uniform draw keyed by `(seed, i)` falls under
    `2 * num_samples / num_examples`, until `num_samples` are kept: the same images whatever
    TensorFlow's global seed, spread over (about the first half of) the split, and never more
    than one image in memory (no shuffle buffer of the whole dataset).
    """
    import keras_vit.data as data

    tf = _checks.import_tensorflow()
    height, width, channels = image_shape
    if channels not in (1, 3):
        raise ValueError(
            "Representative images from a dataset spec need a model with 1 or 3 channels. "
            f"Received: {channels} channels; pass an array instead."
        )
    source = data.load_source(spec, "train", num_channels=channels)
    rate = min(1.0, 2.0 * num_samples / max(1, source.num_examples))

    def keep(index, example):
        draw = tf.random.stateless_uniform([], seed=tf.stack([tf.constant(seed, "int64"), index]))
        return draw < rate

    picked = source.dataset.enumerate().filter(keep).map(lambda index, example: example)
    source = dataclasses.replace(
        source,
        dataset=picked.take(num_samples),
        num_examples=min(num_samples, source.num_examples),
    )
    images, _ = data.numpy_arrays(
        data.eval_pipeline(
            source, image_size=(height, width), batch_size=64, preprocessing=preprocessing
        )
    )
    return images.astype("float32")


def representative_images(
    data, image_shape, *, num_samples=REPRESENTATIVE_SAMPLES, seed=0, preprocessing=None
):
    """Calibration images for `quantize="int8"`: float32 `(N, H, W, C)` in [-1, 1].

    With `preprocessing` (the model's `PreprocessingConfig`, which `export_litert` passes):
    uint8 pixels and dataset images are scaled (and dataset images resized and cropped) by it,
    and float images are checked against its range instead of [-1, 1].

    Args:
        data: one of
            - an array `(N, H, W, C)` of the model's image size: uint8 pixels
              (0..255, scaled `x / 127.5 - 1` as `keras_vit.preprocess_input`)
              or floats already in [-1, 1]; all N images are used;
            - the path of a `.npy` file, or of a `.npz` file holding one array
              (or one named `images` or `x`), read with `allow_pickle=False`;
            - a dataset spec (`"digits"`, `"folder:PATH"`,
              `"imagefolder:PATH"`, `"tfds:NAME[:SPLIT]"`): `num_samples`
              training images picked at random (stateless, keyed by `seed`)
              from about the first half of the split, resized to `(H, W)` and
              scaled as the recipes' evaluation pipeline does (needs
              TensorFlow). It reads about half the split: for a large dataset
              give a folder or a `.npz` of calibration images instead.
        image_shape: `(H, W, C)`, the model's input without the batch.
        num_samples: int. Images drawn from a dataset spec. Defaults to 200.
        seed: int. Picks the images of a dataset spec. Defaults to 0.
        preprocessing: optional `PreprocessingConfig`. Defaults to None ([-1, 1]).

    Returns:
        float32 NumPy array `(N, H, W, C)` with values in the model's input range.

    Raises:
        ValueError: a wrong shape or dtype, float values outside [-1, 1]
            (pixels in 0..255 must be uint8 or preprocessed), no images, or an
            unreadable file or unknown spec.
        FileNotFoundError: a missing file or folder.

    Example:

    >>> import numpy as np
    >>> pixels = np.full((2, 8, 8, 3), 255, dtype="uint8")
    >>> images = representative_images(pixels, (8, 8, 3))
    >>> images.shape, float(images.max())
    ((2, 8, 8, 3), 1.0)
    """
    image_shape = tuple(int(d) for d in image_shape)
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(
            f"num_samples must be a positive int. Received: num_samples={num_samples!r}"
        )
    if isinstance(data, (str, os.PathLike)):
        text = os.fspath(data)
        if text.lower().endswith((".npy", ".npz")):
            data = _load_array_file(text)
        else:
            return _from_dataset(text, image_shape, num_samples, seed, preprocessing)
    array = np.asarray(data)
    if array.ndim != 4 or array.shape[1:] != image_shape or array.shape[0] == 0:
        raise ValueError(
            "Representative images must be an array (N, H, W, C) of the model's image shape "
            f"with N >= 1: expected (N, {', '.join(map(str, image_shape))}). "
            f"Received: shape {array.shape}"
        )
    if array.dtype == np.uint8:
        return scaled_pixels(array, preprocessing)
    lowest, highest = input_range(preprocessing)
    if not np.issubdtype(array.dtype, np.floating):
        raise ValueError(
            "Representative images must be uint8 pixels (0..255) or floats in "
            f"[{lowest:g}, {highest:g}]. Received: dtype {array.dtype}"
        )
    low, high = float(np.min(array)), float(np.max(array))
    if (
        not (np.isfinite(low) and np.isfinite(high))
        or low < lowest - _RANGE_TOLERANCE
        or (high > highest + _RANGE_TOLERANCE)
    ):
        raise ValueError(
            "Representative float images must be preprocessed to the model's input range "
            f"[{lowest:g}, {highest:g}] (keras_vit.preprocess_input(images, model=model)), or "
            f"given as uint8 pixels. Received: values in [{low:g}, {high:g}]"
        )
    return array.astype("float32")
