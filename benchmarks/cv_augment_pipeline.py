"""What keras-cv augmentations cost in the recipes' `tf.data` pipeline, per layer, on this backend.

For each `--augment` entry (a keras-cv layer by name, or a Keras one for comparison) builds the
recipes' training pipeline on digits (`keras_vit.data.train_pipeline`: random resized
crop, then the augmentation, then the scaling to [-1, 1]) at `--image-size` and `--batch-size`,
reads `--warmup` batches, then times `--batches` batches, and prints images per second and the
ratio to the same pipeline without augmentation, measured in the same process (repeats
alternate the entries; medians). It also prints the mean absolute change of the pixels against
the un-augmented batch (same crops: the pipeline's randomness is keyed by seed), a check that the
layer did something.

Command (about 5 minutes on 2 shared CPU cores):

    KERAS_BACKEND=jax python benchmarks/cv_augment_pipeline.py
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402

from keras_vit.training import augment, data  # noqa: E402

DEFAULT_SPECS = (
    "randaugment",
    "keras_cv.RandAugment(magnitude=0.3)",
    "keras_cv.GridMask",
    "keras_cv.RandomCutout(0.3, 0.3)",
    "keras_cv.JitteredResize(scale_factor=(0.8, 1.25))",
    "mixup",
    "keras_cv.MixUp",
)


def pipeline(source, spec, args):
    specs = [] if spec == "none" else [spec]
    return data.train_pipeline(
        source,
        image_size=args.image_size,
        batch_size=args.batch_size,
        epochs=1,
        steps_per_epoch=args.warmup + args.batches,
        seed=0,
        augmenters=augment.build_augmenters(specs, seed=0, image_size=args.image_size),
    )


def images_per_second(source, spec, args):
    iterator = iter(pipeline(source, spec, args))
    for _ in range(args.warmup):
        next(iterator)
    start = time.perf_counter()
    for _ in range(args.batches):
        next(iterator)
    return args.batches * args.batch_size / (time.perf_counter() - start)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--augment", nargs="*", default=list(DEFAULT_SPECS))
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    source = data.load_source("digits")
    specs = ["none", *args.augment]
    plain = next(iter(pipeline(source, "none", args)))[0].numpy()
    change = {}
    for spec in specs:
        x = next(iter(pipeline(source, spec, args)))[0].numpy()
        change[spec] = float(np.abs(x - plain).mean())
    rates = {spec: [] for spec in specs}
    for _ in range(args.repeats):
        for spec in specs:
            rates[spec].append(images_per_second(source, spec, args))
    base = statistics.median(rates["none"])
    print(
        f"digits, {args.image_size} px, batch {args.batch_size}, {args.batches} batches x "
        f"{args.repeats} repeats, Keras backend {keras.backend.backend()}\n"
    )
    print("| augmentation | images/s (median) | vs none | mean abs pixel change |")
    print("|---|---:|---:|---:|")
    for spec in specs:
        rate = statistics.median(rates[spec])
        print(f"| `{spec}` | {rate:,.0f} | {rate / base:.2f}x | {change[spec]:.3f} |")


if __name__ == "__main__":
    main()
