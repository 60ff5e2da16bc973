"""Corrupt-image scanning: one parallel TensorFlow decoding pass over a list of files, and the
`on_corrupt` policy (an error, or a warning and the files dropped)."""

import warnings

from keras_vit.data._imports import import_tf


def handle_corrupt(files, folder, split, on_corrupt):
    """The corrupt images among `files`: an error, or (`on_corrupt="skip"`) a warning.

    Raises a `ValueError` naming the folder and the count when every image is corrupt.
    """
    bad = find_corrupt_images(files)
    if not bad:
        return bad
    shown = "\n  ".join(bad[:10]) + (f"\n  ... and {len(bad) - 10} more" if len(bad) > 10 else "")
    if len(bad) == len(files):
        raise ValueError(
            f"All {len(bad)} image(s) of split {split!r} in {folder!r} cannot be decoded, so "
            f"nothing is left to load (on_corrupt={on_corrupt!r}):\n  {shown}\n"
            "Check that these are image files (PNG/JPEG/BMP/GIF/WebP) and not empty or truncated."
        )
    if on_corrupt == "error":
        raise ValueError(
            f"{len(bad)} of {len(files)} image(s) in {folder!r} cannot be decoded:\n  {shown}\n"
            "Remove or fix them, or skip them with on_corrupt='skip' (--on-corrupt skip)."
        )
    warnings.warn(f"Skipping {len(bad)} corrupt image(s) in {folder!r}:\n  {shown}", stacklevel=4)
    return bad


def find_corrupt_images(paths):
    """Returns the paths TensorFlow cannot decode (one parallel decoding pass)."""
    tf = import_tf()
    if not paths:
        return []

    def try_decode(i, path):
        image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
        return i, tf.shape(image)[0]

    ds = tf.data.Dataset.from_tensor_slices((tf.range(len(paths), dtype="int64"), list(paths)))
    ds = ds.map(try_decode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
    ds = ds.ignore_errors()
    ok = {int(i) for i, _ in ds.as_numpy_iterator()}
    return [p for i, p in enumerate(paths) if i not in ok]

