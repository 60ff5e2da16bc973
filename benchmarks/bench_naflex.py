"""NaFlex training throughput against the square-resized pipeline at the same patch budget
(issue 31: within 1.2x). A benchmark, not a test.

A folder of mixed-size images is made offline (scikit-image's sample photos, or random noise
without scikit-image, each resized to a random aspect ratio between 1:3 and 3:1 and a random
longer side of 64-320 px, written as PNG files, labels from the file index). Both pipelines
read and decode the same files with `tf.data`, scale to [-1, 1], and feed `model.fit`:

- NaFlex: `keras_vit.data.naflex_dataset` (each image at its own aspect ratio, at most
  `--budget` patches, padded to `--budget`) into `ViT(..., naflex=True)`;
- square: `tf.image.resize` (antialiased bilinear) to `patch * sqrt(budget)` px squares (exactly
  `--budget` patches) into the same plain `ViT` (same width, depth, pooling).

Epochs alternate between the two (so load from other jobs falls on both alike); the first
epoch of each compiles and is left out; images/s is the median over the other epochs. One Keras
backend per run (`KERAS_BACKEND`); the shared machine's load average is printed with the row:
read the ratio, not the absolute numbers.

    KERAS_BACKEND=jax python benchmarks/bench_naflex.py
    KERAS_BACKEND=torch python benchmarks/bench_naflex.py --rounds 5 --images 256
    python benchmarks/bench_naflex.py --pipeline-only     # the tf.data pipelines alone
"""

import argparse
import datetime
import math
import os
import platform
import statistics
import tempfile
import time

import numpy as np


def make_folder(folder, count, seed=0):
    """`count` PNG images of random aspect ratios and sizes in `folder`; their paths."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    try:
        from skimage import data

        names = (
            "astronaut",
            "chelsea",
            "coffee",
            "rocket",
            "hubble_deep_field",
            "immunohistochemistry",
        )
        sources = [np.asarray(getattr(data, n)())[..., :3] for n in names]
    except ImportError:
        sources = [rng.integers(0, 256, (256, 256, 3), dtype="uint8")]
    paths = []
    for i in range(count):
        ratio = math.exp(rng.uniform(math.log(1 / 3), math.log(3)))  # width / height
        longer = int(rng.integers(64, 321))
        if ratio >= 1:
            height, width = max(8, int(longer / ratio)), longer
        else:
            height, width = longer, max(8, int(longer * ratio))
        image = tf.image.resize(sources[i % len(sources)], (height, width), antialias=True)
        path = os.path.join(folder, f"{i:05d}.png")
        tf.io.write_file(path, tf.io.encode_png(tf.cast(tf.round(image), tf.uint8)))
        paths.append(path)
    return paths


def decoded(paths, num_classes):
    """`tf.data` of (uint8 image of its own size, label): the folder as a recipe reads it."""
    import tensorflow as tf

    labels = [i % num_classes for i in range(len(paths))]
    ds = tf.data.Dataset.from_tensor_slices((paths, labels))
    return ds.map(
        lambda path, label: (tf.io.decode_png(tf.io.read_file(path), channels=3), label),
        num_parallel_calls=tf.data.AUTOTUNE,
    )


def pipelines(paths, args):
    """The NaFlex and the square `tf.data` pipelines, repeated, batched, prefetched."""
    import tensorflow as tf

    from keras_vit.data import naflex_dataset
    from keras_vit.preprocessing import scale_pixels

    source = decoded(paths, args.classes).cache().repeat()
    naflex = naflex_dataset(source, args.patch, args.budget, args.batch,
                            preprocess=scale_pixels, drop_remainder=True)  # fmt: skip
    side = args.patch * int(math.isqrt(args.budget))

    def square(image, label):
        image = scale_pixels(tf.cast(image, "float32"))
        return tf.image.resize(image, (side, side), antialias=True), label

    square_ds = source.map(square, num_parallel_calls=tf.data.AUTOTUNE)
    square_ds = square_ds.batch(args.batch, drop_remainder=True)
    return naflex.prefetch(tf.data.AUTOTUNE), square_ds.prefetch(tf.data.AUTOTUNE), side


def models(args, side):
    import keras

    import keras_vit

    common = dict(image_size=side, num_layers=args.layers, num_classes=args.classes,
                  pooling="gap", class_token=False)  # fmt: skip
    built = {
        "naflex": keras_vit.ViT(args.variant, naflex=True, **common),
        "square": keras_vit.ViT(args.variant, **common),
    }
    for model in built.values():
        model.compile(
            keras.optimizers.AdamW(1e-3),
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    return built


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=128)
    parser.add_argument("--budget", type=int, default=64, help="patches per image (a square)")
    parser.add_argument("--patch", type=int, default=16)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--variant", default="Ti/16")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=4, help="timed epochs of each (+1 warm-up)")
    parser.add_argument(
        "--pipeline-only",
        action="store_true",
        help="iterate the two tf.data pipelines without a model (where the input time goes)",
    )
    args = parser.parse_args(argv)
    if math.isqrt(args.budget) ** 2 != args.budget:
        parser.error(
            f"--budget must be a square (the square pipeline's grid). Received: {args.budget}"
        )

    import keras

    with tempfile.TemporaryDirectory() as folder:
        paths = make_folder(folder, args.images)
        naflex_ds, square_ds, side = pipelines(paths, args)
        data = {"naflex": naflex_ds, "square": square_ds}
        steps = args.images // args.batch
        seconds = {name: [] for name in data}
        if not args.pipeline_only:
            built = models(args, side)
        for _ in range(args.rounds + 1):
            for name in data:
                start = time.perf_counter()
                if args.pipeline_only:  # a fresh iterator: nothing read ahead in the meantime
                    for _ in zip(range(steps), data[name], strict=False):
                        pass
                else:
                    built[name].fit(data[name], epochs=1, steps_per_epoch=steps, verbose=0)
                seconds[name].append(time.perf_counter() - start)
    rate = {n: steps * args.batch / statistics.median(s[1:]) for n, s in seconds.items()}
    load = os.getloadavg()
    print(
        f"backend {keras.backend.backend()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}, "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC"
    )
    print(f"{args.variant} x {args.layers} layers, batch {args.batch}, patch {args.patch}, "
          f"budget {args.budget} patches (square: {side} px), {args.images} images, "
          f"{args.rounds} timed epochs")  # fmt: skip
    what = "pipelines alone, no model" if args.pipeline_only else keras.backend.backend()
    print("| run | NaFlex images/s | square images/s | square / NaFlex |")
    print("|---|---|---|---|")
    ratio = rate["square"] / rate["naflex"]
    print(f"| {what} | {rate['naflex']:.1f} | {rate['square']:.1f} | {ratio:.2f} |")
    return rate


if __name__ == "__main__":
    main()
