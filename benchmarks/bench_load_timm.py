"""Times `keras_vit.from_timm` on a ViT-B/16 timm checkpoint (issue 19), beside the `.npz` path.

Writes a random checkpoint with the names and shapes of timm's `vit_base_patch16_224`
(152 arrays, 86,567,656 parameters, a 1000-way head, ~330 MiB of float32) as `.safetensors`
to a temporary folder (timm is not needed), the same weights as an official-layout `.npz`
(`keras_vit.save_npz`), then reports the median wall time of a few runs of:

- `build`: `from_timm("vit_base_patch16_224")` without a checkpoint (random init; baseline);
- `from_timm`: `from_timm("vit_base_patch16_224.augreg2_in21k_ft_in1k", path)` (what a user calls);
- `read`: `read_state_dict(path)` alone (the safetensors file into NumPy);
- `load into built`: `load_timm_weights(model, name, path)` into an already built model;
- `ViTB16(weights=npz)`: the peer, the same weights through the official `.npz` loader.

Usage (one backend per run):

    KERAS_BACKEND=jax python benchmarks/bench_load_timm.py --runs 3
"""

import argparse
import os
import platform
import sys
import tempfile
import time

import keras
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root

from benchmarks.bench_load_npz import timed  # noqa: E402  (after the sys.path line)
from keras_vit.models.config import ViTConfig
from keras_vit.models.vit import ViTB16
from keras_vit.weights.npz.checkpoints import save_npz
from keras_vit.weights.state_dict import read_state_dict, write_safetensors
from keras_vit.weights.timm.reader import from_timm, load_timm_weights, timm_name_table

NAME = "vit_base_patch16_224.augreg2_in21k_ft_in1k"


def write_checkpoint(path, model, seed=0):
    """A random timm-layout state dict for `model`'s architecture (timm's names and shapes)."""
    variables = {v.path: tuple(v.shape) for v in model.weights}
    rng = np.random.default_rng(seed)
    arrays = {}
    for key, (paths, transform) in timm_name_table(ViTConfig.from_model(model)).items():
        paths = (paths,) if isinstance(paths, str) else paths
        shape = transform.source_shape(tuple(variables[p] for p in paths))
        arrays[key] = 0.02 * rng.standard_normal(shape, dtype=np.float32)
    write_safetensors(arrays, path)
    return sum(a.size for a in arrays.values()), len(arrays)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per measurement (median)")
    parser.add_argument("--dir", default=None, help="folder for the files (default: a temp dir)")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = os.path.join(tmp, "model.safetensors")
        npz = os.path.join(tmp, "ViT-B_16.npz")
        start = time.perf_counter()
        model = from_timm(NAME)
        params, count = write_checkpoint(path, model)
        save_npz(load_timm_weights(model, NAME, path), npz)
        print(
            f"wrote {path}: {count} arrays, {params:,} parameters, "
            f"{os.path.getsize(path) / 2**20:.0f} MiB (and {npz}) in "
            f"{time.perf_counter() - start:.1f} s"
        )
        rows = [
            ("build (from_timm, no checkpoint)", timed(lambda: from_timm(NAME), args.runs)),
            ("from_timm(name, path)", timed(lambda: from_timm(NAME, path), args.runs)),
            ("read_state_dict(path)", timed(lambda: read_state_dict(path), args.runs)),
            (
                "load_timm_weights into built model",
                timed(lambda: load_timm_weights(model, NAME, path), args.runs),
            ),
            ("peer: ViTB16(weights=npz)", timed(lambda: ViTB16(weights=npz), args.runs)),
        ]

    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",)
    print(
        f"\nbackend={keras.backend.backend()} keras={keras.__version__} "
        f"cpus={os.cpu_count()} machine={platform.machine()} runs={args.runs} "
        f"loadavg(1m)={load[0]:.1f}"
    )
    print(f"| {'measurement':<36} | median s | min s | max s |")
    print(f"|{'-' * 38}|---------:|------:|------:|")
    for name, (median, low, high) in rows:
        print(f"| {name:<36} | {median:8.2f} | {low:5.2f} | {high:5.2f} |")
    ratio = rows[1][1][0] / rows[4][1][0]
    print(f"\nfrom_timm / ViTB16(weights=npz) (same weights, same run): {ratio:.2f}x")


if __name__ == "__main__":
    main()
