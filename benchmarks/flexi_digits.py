"""FlexiViT against fixed-patch ViTs PI-resized after training, on digits (issue 31; the
FlexiViT paper's Figure 3 in small).

For each seed:
1. trains one ViT per patch size in `--patch-sizes` (fixed patch, the usual training), for
   `--epochs` or for each value of `--fixed-epochs` (the baseline trained as long as FlexiViT);
2. trains one `keras_vit.FlexiViT` per value of `--flexi-epochs` (default: the same epochs as
   the fixed models) on the same data and batch, drawing a patch size from `--patch-sizes` at
   every step (base kernel `--base-patch`, base position-embedding grid
   `image-size / base-patch`); with epochs x 3 it sees each of 3 sizes as often as a fixed model
   sees its one;
3. evaluates every model at every patch size on the held-out split: each model is turned into a
   plain ViT at that size with `keras_vit.with_patch_size` (bilinear PI-resize of the kernel,
   antialiased bicubic position embedding), so a fixed model away from its own size is "PI-resized
   after training".

Data: scikit-learn's 8x8 digits (offline), zoomed bilinearly to `--image-size` px, one gray
channel in [-1, 1], a stratified 70/30 split fixed by the seed. Model: width 32, 2 layers,
MLP 64, 2 heads, GAP pooling (the "mu" size); AdamW (1e-3, weight decay 0.05), batch 64, one
`fit` call over all epochs with a light shift augmentation (each image rolled by a random
+-2 px, drawn anew per epoch). Every run of a seed starts from `keras.utils.set_random_seed(seed)`.

Prints a Markdown table (mean and standard deviation over the seeds, and each seed) and writes
the numbers as JSON with `--out`. Command (JAX, about 35 minutes on 2 shared CPU cores):

    KERAS_BACKEND=jax python benchmarks/flexi_digits.py --seeds 0,1,2 --flexi-epochs 20,60 \
        --out benchmarks/results/flexi_digits.json
    KERAS_BACKEND=jax python benchmarks/flexi_digits.py --seeds 0,1,2 --fixed-epochs 60 \
        --flexi-epochs 0 --out benchmarks/results/flexi_digits_fixed60.json
"""

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402

import keras_vit  # noqa: E402

ARCH = dict(num_layers=2, hidden_dim=32, mlp_dim=64, num_heads=2, num_channels=1, pooling="gap")


def parse_ints(text, flag, minimum=1):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < minimum:
        raise ValueError(f"{flag} takes comma-separated ints >= {minimum}. Received: {text!r}")
    return values


def digits(image_size, seed):
    """(x_train, y_train), (x_test, y_test): digits zoomed to `image_size`, in [-1, 1]."""
    import scipy.ndimage
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    zoom = image_size / 8
    images = scipy.ndimage.zoom(data.images, (1, zoom, zoom), order=1)
    images = (np.clip(images, 0, 16) / 8.0 - 1.0).astype("float32")[..., None]
    x_train, x_test, y_train, y_test = train_test_split(
        images, data.target, test_size=0.3, random_state=seed, stratify=data.target
    )
    return (x_train, y_train), (x_test, y_test)


def shifted(images, rng, max_shift=2):
    """Each image rolled by a random integer shift (the background is -1 at the borders)."""
    out = np.empty_like(images)
    for i, shift in enumerate(rng.integers(-max_shift, max_shift + 1, (len(images), 2))):
        out[i] = np.roll(images[i], tuple(shift), axis=(0, 1))
    return out


def train(model, data, epochs, batch_size, seed):
    model.compile(
        keras.optimizers.AdamW(1e-3, weight_decay=0.05),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    rng = np.random.default_rng(seed)
    n = len(data[1])
    # All epochs in one fit call: a new shift of every image per epoch, shuffled within it.
    images = np.concatenate([shifted(data[0], rng) for _ in range(epochs)])
    labels = np.concatenate([data[1]] * epochs)
    order = np.concatenate([i * n + rng.permutation(n) for i in range(epochs)])
    start = time.perf_counter()
    model.fit(images[order], labels[order], batch_size=batch_size, shuffle=False, verbose=0)
    return time.perf_counter() - start


def accuracy(model, data):
    logits = model.predict(data[0], batch_size=256, verbose=0)
    return float((np.asarray(logits).argmax(-1) == data[1]).mean())


def run_seed(seed, args):
    keras.utils.set_random_seed(seed)
    train_data, test_data = digits(args.image_size, seed)
    results, seconds = {}, {}
    plain = args.fixed_epochs == [args.epochs]  # the original table's names
    runs = [
        (f"fixed {p}" if plain else f"fixed {p}, {e} epochs", p, e)
        for e in args.fixed_epochs
        for p in args.patch_sizes
    ]
    runs += [(f"FlexiViT, {e} epochs", None, e) for e in args.flexi_epochs]
    for name, patch, epochs in runs:
        keras.utils.set_random_seed(seed)
        backbone = keras_vit.ViT(
            "mu/4",
            image_size=args.image_size,
            num_classes=10,
            patch_size=patch or args.base_patch,
            **ARCH,
        )
        model = backbone
        if patch is None:
            model = keras_vit.FlexiViT(backbone, args.patch_sizes, seed=seed)
        seconds[name] = train(model, train_data, epochs, args.batch_size, seed)
        results[name] = {
            str(p): accuracy(keras_vit.with_patch_size(model, p), test_data)
            for p in args.patch_sizes
        }
        print(f"seed {seed} {name}: {results[name]} ({seconds[name]:.0f} s)", flush=True)
    return results, seconds


def table(per_seed, patch_sizes):
    names = list(per_seed[0][0])
    lines = [
        "| model | " + " | ".join(f"patch {p}" for p in patch_sizes) + " |",
        "|---|" + "---:|" * len(patch_sizes),
    ]
    for name in names:
        cells = []
        for p in patch_sizes:
            values = np.array([results[name][str(p)] for results, _ in per_seed])
            each = " / ".join(f"{100 * v:.1f}" for v in values)
            cells.append(f"{100 * values.mean():.1f} +- {100 * values.std():.1f} ({each})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--patch-sizes", default="4,8,16")
    parser.add_argument("--base-patch", type=int, default=8, help="FlexiViT's base kernel")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument(
        "--flexi-epochs",
        default=None,
        help="comma list: one FlexiViT run per value (default: --epochs; epochs x the number "
        "of patch sizes gives each size as many steps as its fixed model)",
    )
    parser.add_argument(
        "--fixed-epochs",
        default=None,
        help="comma list: the fixed-patch models' runs, one per value and patch size "
        "(default: --epochs; 0 alone: none, to add FlexiViT runs to an earlier table)",
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--out", default=None, help="JSON file for the numbers")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    seeds = parse_ints(args.seeds, "--seeds", minimum=0)
    args.patch_sizes = parse_ints(args.patch_sizes, "--patch-sizes")
    args.flexi_epochs = parse_ints(args.flexi_epochs or str(args.epochs), "--flexi-epochs", 0)
    args.fixed_epochs = parse_ints(args.fixed_epochs or str(args.epochs), "--fixed-epochs", 0)
    args.flexi_epochs = [e for e in args.flexi_epochs if e]  # 0: no run of that kind
    args.fixed_epochs = [e for e in args.fixed_epochs if e]
    if not args.flexi_epochs and not args.fixed_epochs:
        raise ValueError("--fixed-epochs and --flexi-epochs are both 0: nothing to train.")
    for p in [*args.patch_sizes, args.base_patch]:
        if args.image_size % p:
            raise ValueError(
                f"Every patch size must divide --image-size {args.image_size}. Received: {p}"
            )
    print(f"keras {keras.__version__}, backend {keras.backend.backend()}, {os.cpu_count()} CPUs")
    per_seed = [run_seed(seed, args) for seed in seeds]
    print(
        f"\nHeld-out accuracy (%) at each patch size, mean +- std over seeds {seeds} "
        f"(each seed in brackets); {args.epochs} epochs, batch {args.batch_size}, "
        f"{args.image_size} px\n"
    )
    print(table(per_seed, args.patch_sizes))
    if args.out:
        record = dict(
            command=" ".join(sys.argv),
            backend=keras.backend.backend(),
            keras=keras.__version__,
            seeds=seeds,
            settings={k: v for k, v in vars(args).items() if k != "out"},
            accuracy=[results for results, _ in per_seed],
            seconds=[seconds for _, seconds in per_seed],
        )
        with open(args.out, "w") as f:
            json.dump(record, f, indent=1)
    return per_seed


if __name__ == "__main__":
    main()
