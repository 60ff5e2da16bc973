"""NaFlex models in the export formats: their three inputs, SavedModel signatures, calibration.

- SavedModel (`keras_vit.export.saved_model` writes them): `serving_default` takes the NaFlex
  dict batch (`patches`, `patch_coord`, `patch_valid`); `serve_bytes` takes encoded images of any
  size and patchifies them in the graph (`keras_vit.data.naflex_tf.naflex_example`) under a
  patch budget, `max_patches`;
- ONNX (`export_onnx`) and LiteRT (`export_litert`): the same three named inputs
  (`naflex_inputs`), with a free sequence length in ONNX and `max_patches` rows in LiteRT;
  `representative_naflex` makes the calibration batches of LiteRT's `quantize="int8"`.
"""

import os

import numpy as np

INPUT_NAMES = ("patches", "patch_coord", "patch_valid")
_RANGE_TOLERANCE = 1e-3


def check_max_patches(max_patches, grid_size):
    """`max_patches` of a NaFlex export (default: the position table's grid, `rows * cols`)."""
    if max_patches is None:
        return int(grid_size[0] * grid_size[1])
    if isinstance(max_patches, bool) or not isinstance(max_patches, int) or max_patches < 1:
        raise ValueError(
            "max_patches must be a positive int (the patch budget: patches per image at most, "
            f"and the padded sequence length). "
            f"Received: max_patches={max_patches!r}"
        )
    return max_patches


def naflex_config(model):
    """The `ViTConfig` of a NaFlex model, or None for an image model."""
    config = getattr(model, "config", None)
    return config if getattr(config, "naflex", False) else None


def naflex_endpoints(tf, heads, spec):
    """A NaFlex model's signatures: the dict batch, and encoded images patchified in the graph
    (`keras_vit.data.naflex_tf.naflex_example`: decode, scale by the model's input spec,
    aspect-preserving resize under
    `max_patches`, patches + coordinates + validity)."""
    from keras_vit.data.naflex_tf import naflex_example
    from keras_vit.data.pipelines import scale

    (ph, pw), budget, channels = spec["naflex"], spec["max_patches"], spec["num_channels"]
    own = spec.get("preprocessing")  # the model's mean, std and scale (None: [-1, 1])

    def serving_default(patches, patch_coord, patch_valid):
        return heads({"patches": patches, "patch_coord": patch_coord, "patch_valid": patch_valid})

    def patchify(image_bytes):
        image = tf.io.decode_image(
            image_bytes, channels=channels, dtype=tf.uint8, expand_animations=False
        )
        image.set_shape((None, None, channels))
        example = naflex_example(image, (ph, pw), budget, preprocess=lambda x: scale(x, own))
        return example["patches"], example["patch_coord"], example["patch_valid"]

    def serve_bytes(image_bytes):
        patches, coords, valid = tf.map_fn(
            patchify,
            image_bytes,
            fn_output_signature=(
                tf.TensorSpec((budget, ph * pw * channels), tf.float32),
                tf.TensorSpec((budget, 2), tf.int32),
                tf.TensorSpec((budget,), tf.bool),
            ),
        )
        return heads({"patches": patches, "patch_coord": coords, "patch_valid": valid})

    batch_specs = [
        tf.TensorSpec((None, *shape), dtype, name=name)
        for name, shape, dtype in naflex_inputs((ph, pw), channels)
    ]
    return {
        "serving_default": (serving_default, batch_specs),
        "serve_bytes": (serve_bytes, [tf.TensorSpec((None,), tf.string)]),
    }


def naflex_inputs(patch_size, channels, num_patches=None):
    """`(name, shape without the batch, dtype)` of a NaFlex model's three inputs.

    Args:
        patch_size: `(ph, pw)`.
        channels: int. The image channels.
        num_patches: optional int. The sequence length N; None leaves it free.

    Example:

    >>> naflex_inputs((4, 4), 3, 16)[0]
    ('patches', (16, 48), 'float32')
    """
    ph, pw = patch_size
    return [
        ("patches", (num_patches, ph * pw * channels), "float32"),
        ("patch_coord", (num_patches, 2), "int32"),
        ("patch_valid", (num_patches,), "bool"),
    ]


def _check_batch(batch, patch_size, max_patches, channels):
    """Checks a NaFlex dict batch of `max_patches` rows; returns it as NumPy arrays."""
    missing = [name for name in INPUT_NAMES if name not in batch]
    if missing:
        raise ValueError(
            f"A NaFlex calibration batch needs the arrays {list(INPUT_NAMES)}. "
            f"Received: {sorted(batch)}"
        )
    arrays = {name: np.asarray(batch[name]) for name in INPUT_NAMES}
    expected = {name: shape for name, shape, _ in naflex_inputs(patch_size, channels, max_patches)}
    count = arrays["patches"].shape[0] if arrays["patches"].ndim else 0
    for name, array in arrays.items():
        if array.shape != (count, *expected[name]) or count == 0:
            raise ValueError(
                f"A NaFlex calibration batch's {name} must have the shape (B, "
                f"{', '.join(map(str, expected[name]))}) with B >= 1 (max_patches="
                f"{max_patches}). Received: {name} of shape {array.shape}"
            )
    patches = arrays["patches"]
    if not np.issubdtype(patches.dtype, np.floating) or not np.all(np.isfinite(patches)):
        raise ValueError(
            "A NaFlex calibration batch's patches must be finite floats in [-1, 1] "
            f"(keras_vit.data.naflex_batch of preprocessed images). Received: dtype {patches.dtype}"
        )
    if not np.issubdtype(arrays["patch_coord"].dtype, np.integer):
        raise ValueError(
            "A NaFlex calibration batch's patch_coord must hold integers. "
            f"Received: dtype {arrays['patch_coord'].dtype}"
        )
    return dict(
        patches=patches.astype("float32"),
        patch_coord=arrays["patch_coord"].astype("int32"),
        patch_valid=arrays["patch_valid"].astype(bool),
    )


def _scaled_image(image, index, preprocessing=None):
    """One calibration image as the model's input (uint8 pixels are scaled by its spec)."""
    from keras_vit.preprocessing import input_range, scaled_pixels

    if image.dtype == np.uint8:
        return scaled_pixels(image, preprocessing)
    lowest, highest = input_range(preprocessing)
    low, high = (float(np.min(image)), float(np.max(image))) if image.size else (0.0, 0.0)
    if not np.issubdtype(image.dtype, np.floating) or not (
        lowest - _RANGE_TOLERANCE <= low and high <= highest + _RANGE_TOLERANCE
    ):
        raise ValueError(
            "Calibration images of a NaFlex model must be uint8 pixels (0..255) or floats in "
            f"[{lowest:g}, {highest:g}] (keras_vit.preprocess_input(images, model=model)). "
            f"Received: image {index} of dtype {image.dtype} with values in [{low:g}, {high:g}]"
        )
    return image.astype("float32")


def representative_naflex(data, patch_size, max_patches, channels, preprocessing=None):
    """Calibration batches for LiteRT's `quantize="int8"` of a NaFlex model.

    Args:
        data: one of
            - images of any sizes: a sequence of `(H, W, C)` arrays (or one
              `(B, H, W, C)` array), uint8 pixels or floats in [-1, 1],
              patchified by `keras_vit.data.naflex_batch` under `max_patches`;
            - a NaFlex dict batch (`patches`, `patch_coord`, `patch_valid`) of
              `max_patches` rows, or the path of a `.npz` file holding one.
        patch_size: `(ph, pw)`. The model's patch size.
        max_patches: int. The `.tflite`'s sequence length.
        channels: int. The model's image channels.
        preprocessing: optional `PreprocessingConfig` (the model's): uint8 pixels are scaled
            by it and floats checked against its range. Defaults to None ([-1, 1]).

    Returns:
        dict of NumPy arrays: `patches` float32 `(B, max_patches, ph * pw * C)`,
        `patch_coord` int32 `(B, max_patches, 2)`, `patch_valid` bool `(B, max_patches)`.

    Raises:
        ValueError: a dataset spec (NaFlex calibration needs images of their own
            sizes), arrays of the wrong shape, dtype or range, or no images.
        FileNotFoundError: a missing `.npz` file.

    Example:

    >>> pixels = [np.zeros((8, 16, 3), "uint8"), np.zeros((12, 4, 3), "uint8")]
    >>> batch = representative_naflex(pixels, (4, 4), 16, 3)
    >>> batch["patches"].shape, batch["patch_valid"].sum(axis=1).tolist()
    ((2, 16, 48), [15, 12])
    """
    from keras_vit.data.naflex import naflex_batch

    if isinstance(data, (str, os.PathLike)):
        path = os.fspath(data)
        if not path.lower().endswith(".npz"):
            raise ValueError(
                "Calibration data of a NaFlex model is images of any sizes, a NaFlex batch "
                "(keras_vit.data.naflex_batch) or a .npz file of one (patches, patch_coord, "
                f"patch_valid); dataset specs and .npy files are not read. Received: {path!r}"
            )
        if not os.path.exists(path):
            raise FileNotFoundError(f"Representative data file not found: {path!r}")
        with np.load(path, allow_pickle=False) as loaded:
            data = {name: loaded[name] for name in loaded.files}
    if isinstance(data, dict):
        return _check_batch(data, patch_size, max_patches, channels)
    images = list(data)
    if not images:
        raise ValueError("Calibration images must hold at least one image. Received: none")
    for index, image in enumerate(images):
        image = np.asarray(image)
        if image.ndim != 3 or image.shape[-1] != channels:
            raise ValueError(
                f"Calibration images of a NaFlex model must be (H, W, {channels}) arrays. "
                f"Received: image {index} of shape {image.shape}"
            )
        images[index] = _scaled_image(image, index, preprocessing)
    batch = naflex_batch(images, patch_size, max_patches)
    return _check_batch(batch, patch_size, max_patches, channels)
