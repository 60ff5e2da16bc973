"""Peak memory and time of `keras_vit.export_onnx` with and without the tf2onnx adapter.

`keras_vit/export/tf2onnx_memory.py` collects garbage before each of tf2onnx's optimizers (each
deep-copies the graph, weights included; the dropped copies hold cycles). This runs the export
of a timm architecture (random weights, seed 0) in a fresh TensorFlow process per arm, the two
arms alternated, and prints the resident set before the export, its peak during it (sampled
every 0.1 s from /proc/self/status) and the seconds; the ONNX files of the two arms must compute
the same logits (onnxruntime, max difference printed).

    python benchmarks/bench_export_memory.py --models vit_small_patch16_224 vit_base_patch16_224
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import contextlib, json, os, sys, threading, time
os.environ["KERAS_BACKEND"] = "tensorflow"
from keras_vit._import_order import load_triton_before_tensorflow
load_triton_before_tensorflow()
import keras
import keras_vit
from keras_vit.export import onnx as onnx_export

name, arm, path = sys.argv[1:4]
if arm == "without":  # tf2onnx as it is
    onnx_export.collecting_between_optimizers = contextlib.nullcontext
keras.utils.set_random_seed(0)
model = keras_vit.from_timm(name)

def rss_mb():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) / 1024

before, peak = rss_mb(), [0.0]

def watch():
    while True:
        peak[0] = max(peak[0], rss_mb())
        time.sleep(0.1)

threading.Thread(target=watch, daemon=True).start()
start = time.perf_counter()
keras_vit.export_onnx(model, path, verbose=False)
seconds = time.perf_counter() - start
print("RESULT" + json.dumps(dict(before=before, peak=peak[0], seconds=seconds)))
"""


def run_arm(name, arm, path):
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([sys.executable, "-c", CHILD, name, arm, path], env=env,
                         capture_output=True, text=True)  # fmt: skip
    line = [x for x in out.stdout.splitlines() if x.startswith("RESULT")]
    if not line:
        raise RuntimeError(f"{name} {arm}: {out.stderr[-3000:]}")
    return json.loads(line[0][len("RESULT") :])


def logits(path, images):
    import onnxruntime

    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: images})[0]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["vit_small_patch16_224"])
    args = parser.parse_args(argv)
    import numpy as np

    images = np.random.default_rng(0).uniform(-1, 1, (2, 224, 224, 3)).astype("float32")
    print("| model | arm | RSS before MB | peak MB | growth MB | seconds |")
    print("|---|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            outputs = {}
            for arm in ("without", "with"):
                path = os.path.join(tmp, f"{name}_{arm}.onnx")
                r = run_arm(name, arm, path)
                outputs[arm] = logits(path, images)
                growth = r["peak"] - r["before"]
                print(f"| {name} | {arm} adapter | {r['before']:.0f} | {r['peak']:.0f} | "
                      f"{growth:.0f} | {r['seconds']:.1f} |", flush=True)  # fmt: skip
            diff = float(np.abs(outputs["with"] - outputs["without"]).max())
            print(f"|   | max logit difference, with vs without | {diff:.2g} | | | |", flush=True)


if __name__ == "__main__":
    main()
