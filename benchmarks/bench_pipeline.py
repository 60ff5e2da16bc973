"""CPU cost of the recipes' training input pipeline (`tf.data`), per image (issue 17).

Builds `keras_vit.data.train_pipeline` as the recipes do (random resized crop, flip,
scaling to [-1, 1], one-hot labels, batching, prefetch) on a dataset spec, skips one warm-up
epoch, reads `--epochs` more and prints the wall-clock images/s and the process's CPU time per
image (every tf.data thread counted). CPU-ms per image is the figure that transfers to another
machine: `cores x 1000 / cpu_ms` is about what the pipeline can feed when it has the cores.
`--image-shuffle` turns off the index shuffle of sources that can make any example from its
index (`synthetic`), for comparison.

    python benchmarks/bench_pipeline.py --dataset synthetic:10:1024:224 --image-size 224
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from keras_vit import data  # noqa: E402


def measure(args, index_shuffle):
    source = data.load_source(args.dataset)
    if not index_shuffle:
        source.make_example = None
    ds = data.train_pipeline(
        source, image_size=args.image_size, batch_size=args.batch_size, epochs=args.epochs + 1,
        steps_per_epoch=args.steps, seed=0, crop_scale=tuple(args.crop_scale),
    )
    iterator = iter(ds)
    for _ in range(args.steps):  # the first epoch warms tf.data up
        next(iterator)
    wall, cpu = time.perf_counter(), time.process_time()
    images = sum(int(x.shape[0]) for x, _ in iterator)
    return images / (time.perf_counter() - wall), 1e3 * (time.process_time() - cpu) / images


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="synthetic:10:1024:224")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=16, help="batches per epoch")
    parser.add_argument("--epochs", type=int, default=4, help="timed epochs")
    parser.add_argument("--crop-scale", type=float, nargs=2, default=(0.08, 1.0))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--image-shuffle", action="store_true",
                        help="also measure with the images shuffled instead of their indices")
    args = parser.parse_args(argv)
    print(f"{args.dataset} -> {args.image_size} px, batch {args.batch_size}, {args.epochs} epochs "
          f"of {args.steps} batches, {os.cpu_count()} cores")
    print("| shuffle | images/s (wall) | CPU ms per image |")
    print("|---|---|---|")
    modes = [True, False] if args.image_shuffle else [True]
    for _ in range(args.repeats):
        for index_shuffle in modes:
            rate, cpu_ms = measure(args, index_shuffle)
            print(f"| {'indices' if index_shuffle else 'images'} | {rate:.1f} | {cpu_ms:.2f} |",
                  flush=True)


if __name__ == "__main__":
    main()
