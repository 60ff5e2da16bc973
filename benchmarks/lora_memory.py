"""Peak memory and time of one ViT training step: full fine-tuning against LoRA (issue 20, part 1).

Each configuration runs in its own fresh process (peak resident memory is per process): build
the model (`--model`, 224 px, `--num-classes` classes, random weights), optionally
`keras_vit.enable_lora(model, --rank)` on query + value, compile AdamW, then `--steps` training
steps (`train_on_batch`) on a random batch of `--batch` images. Reported per row: trainable
parameters, resident memory after the build, the process's peak resident memory
(`ru_maxrss`), the peak's growth over the build (gradients, optimizer slots, activations,
compiled code), and the median time of the steps after the first (the first compiles).

Command (one backend per run; ViT-B/16 takes a few minutes on 2 CPU cores):

    KERAS_BACKEND=jax python benchmarks/lora_memory.py --model B/16 --batch 8
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def worker(args):
    """One configuration in this process; prints one JSON line."""
    sys.path.insert(0, ROOT)
    import keras
    import numpy as np

    import keras_vit

    keras.utils.set_random_seed(0)
    model = keras_vit.ViT(args.model, image_size=224, num_classes=args.num_classes)
    if args.rank:
        keras_vit.enable_lora(model, args.rank)
    model.compile(
        optimizer=keras.optimizers.AdamW(1e-4),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    trainable = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    build_mib = _rss_mib()
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (args.batch, 224, 224, 3)).astype("float32")
    y = rng.integers(0, args.num_classes, args.batch)
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        loss = model.train_on_batch(x, y)
        times.append(time.perf_counter() - start)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(json.dumps(dict(
        rank=args.rank, trainable=trainable, total=model.count_params(),
        build_mib=round(build_mib), peak_mib=round(peak_mib),
        step_s=round(statistics.median(times[1:]), 3) if len(times) > 1 else None,
        first_step_s=round(times[0], 1), loss=float(loss),
    )))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="B/16")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--num-classes", dest="num_classes", type=int, default=10)
    parser.add_argument("--ranks", default="0,8", help="0 is full fine-tuning.")
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)
    import keras

    rows = []
    for rank in (int(r) for r in args.ranks.split(",")):
        command = [sys.executable, os.path.abspath(__file__), "--worker", "--rank", str(rank),
                   "--model", args.model, "--batch", str(args.batch), "--steps", str(args.steps),
                   "--num-classes", str(args.num_classes)]
        out = subprocess.run(command, capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"done: rank {rank}", file=sys.stderr, flush=True)
    print(f"{keras.backend.backend()}, ViT-{args.model} at 224 px, batch {args.batch}, "
          f"{args.steps} train_on_batch steps, AdamW, each row in a fresh process")
    print()
    print("| run | trainable params | after build MiB | peak MiB | peak - build MiB | "
          "step s (median) | peak / full |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    full = next((r for r in rows if r["rank"] == 0), rows[0])
    for r in rows:
        name = "full fine-tuning" if r["rank"] == 0 else f"LoRA r={r['rank']}, query + value"
        print(f"| {name} | {r['trainable']:,} ({100 * r['trainable'] / r['total']:.2f}%) | "
              f"{r['build_mib']} | {r['peak_mib']} | {r['peak_mib'] - r['build_mib']} | "
              f"{r['step_s']} | {r['peak_mib'] / full['peak_mib']:.2f} |")
    return rows


if __name__ == "__main__":
    main()
