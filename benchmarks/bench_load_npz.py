"""Times loading an official ViT-B/16 `.npz` checkpoint (issue 4: under 10 s on 2 CPU cores).

Writes a random checkpoint with the exact layout and size of the official
imagenet21k `ViT-B_16.npz` (202 arrays: 86M encoder parameters plus `pre_logits`
768x768 and a 21843-way head, ~412 MB of float32) to a temporary folder, then
reports the median wall time of a few runs of:

- `build`: `ViTB16(num_classes=21843, representation_size=768)` (no weights; baseline);
- `build + weights=`: the same with `weights=path` (what a user calls);
- `load_npz`: `load_npz(model, path)` into an already built model;
- `fine-tune set-up`: `ViTB16(num_classes=37, image_size=384, weights=path)`
  (position embedding resampled 14x14 -> 24x24, head kept zero, pre_logits dropped).

Usage (one backend per run):

    KERAS_BACKEND=jax python benchmarks/bench_load_npz.py --runs 3
"""

import argparse
import gc
import os
import platform
import statistics
import sys
import tempfile
import time

import keras
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root

from keras_vit.models.vit import ViTB16
from keras_vit.weights.npz.checkpoints import load_npz

HIDDEN, LAYERS, HEADS, MLP, PATCH, GRID = 768, 12, 12, 3072, 16, 14
REPRESENTATION, CLASSES = 768, 21843


def official_b16_shapes():
    """Name -> shape of the official imagenet21k ViT-B_16.npz (REFERENCE.md)."""
    dh = HIDDEN // HEADS
    shapes = {
        "cls": (1, 1, HIDDEN),
        "embedding/kernel": (PATCH, PATCH, 3, HIDDEN),
        "embedding/bias": (HIDDEN,),
        "Transformer/posembed_input/pos_embedding": (1, 1 + GRID * GRID, HIDDEN),
    }
    for i in range(LAYERS):
        b = f"Transformer/encoderblock_{i}"
        mha = f"{b}/MultiHeadDotProductAttention_1"
        shapes.update({f"{b}/LayerNorm_0/scale": (HIDDEN,), f"{b}/LayerNorm_0/bias": (HIDDEN,)})
        for proj in ("query", "key", "value"):
            shapes[f"{mha}/{proj}/kernel"] = (HIDDEN, HEADS, dh)
            shapes[f"{mha}/{proj}/bias"] = (HEADS, dh)
        shapes[f"{mha}/out/kernel"] = (HEADS, dh, HIDDEN)
        shapes[f"{mha}/out/bias"] = (HIDDEN,)
        shapes.update({f"{b}/LayerNorm_2/scale": (HIDDEN,), f"{b}/LayerNorm_2/bias": (HIDDEN,)})
        shapes[f"{b}/MlpBlock_3/Dense_0/kernel"] = (HIDDEN, MLP)
        shapes[f"{b}/MlpBlock_3/Dense_0/bias"] = (MLP,)
        shapes[f"{b}/MlpBlock_3/Dense_1/kernel"] = (MLP, HIDDEN)
        shapes[f"{b}/MlpBlock_3/Dense_1/bias"] = (HIDDEN,)
    shapes["Transformer/encoder_norm/scale"] = (HIDDEN,)
    shapes["Transformer/encoder_norm/bias"] = (HIDDEN,)
    shapes["pre_logits/kernel"] = (HIDDEN, REPRESENTATION)
    shapes["pre_logits/bias"] = (REPRESENTATION,)
    shapes["head/kernel"] = (REPRESENTATION, CLASSES)
    shapes["head/bias"] = (CLASSES,)
    return shapes


def write_checkpoint(path, seed=0):
    rng = np.random.default_rng(seed)
    arrays = {
        name: (0.02 * rng.standard_normal(shape, dtype=np.float32))
        for name, shape in official_b16_shapes().items()
    }
    arrays["head/kernel"][:] = 0  # zeros in the official imagenet21k files
    arrays["head/bias"][:] = 0
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return sum(a.size for a in arrays.values()), len(arrays)


def timed(fn, runs):
    times = []
    for _ in range(runs):
        keras.backend.clear_session()
        gc.collect()
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
        del result
    return statistics.median(times), min(times), max(times)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per measurement (median)")
    parser.add_argument(
        "--dir", default=None, help="folder for the checkpoint (default: a temp dir)"
    )
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = os.path.join(tmp, "ViT-B_16.npz")
        start = time.perf_counter()
        params, count = write_checkpoint(path)
        print(
            f"wrote {path}: {count} arrays, {params:,} parameters, "
            f"{os.path.getsize(path) / 2**20:.0f} MiB in {time.perf_counter() - start:.1f} s"
        )

        def build():
            return ViTB16(num_classes=CLASSES, representation_size=REPRESENTATION)

        def build_and_load():
            return ViTB16(num_classes=CLASSES, representation_size=REPRESENTATION, weights=path)

        model = build()

        def load_only():
            return load_npz(model, path)

        def finetune():
            return ViTB16(num_classes=37, image_size=384, weights=path)

        rows = [
            ("build (no weights)", timed(build, args.runs)),
            ("build + weights=path", timed(build_and_load, args.runs)),
            ("load_npz into built model", timed(load_only, args.runs)),
            ("fine-tune set-up (384 px, 37 classes)", timed(finetune, args.runs)),
        ]

    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",)
    print(
        f"\nbackend={keras.backend.backend()} keras={keras.__version__} "
        f"cpus={os.cpu_count()} machine={platform.machine()} runs={args.runs} "
        f"loadavg(1m)={load[0]:.1f}"
    )
    print(f"| {'measurement':<40} | median s | min s | max s |")
    print(f"|{'-' * 42}|---------:|------:|------:|")
    for name, (median, low, high) in rows:
        print(f"| {name:<40} | {median:8.2f} | {low:5.2f} | {high:5.2f} |")


if __name__ == "__main__":
    main()
