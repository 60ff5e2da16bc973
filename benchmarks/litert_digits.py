"""LiteRT export of the quickstart digits model: accuracy, size and CPU latency per mode.

1. trains the quickstart model (`keras_vit.runner.quickstart.train`: 16 px gray digits, 4x4 patches,
   4 layers, width 64; about a minute with JAX on 2 cores), or loads `--model PATH`;
2. exports it with `keras_vit.export_litert` four times: float32, `float16`, `dynamic_int8` and
   `int8` (full integer, calibrated on `--calibration-samples` shuffled *training* digits);
3. evaluates the Keras model and every `.tflite` file (LiteRT interpreter of `ai-edge-litert`,
   signature runner, one call on the whole test split: the batch size is free) on the fixed
   stratified 30% test split (540 digits), and reports the largest logit difference to Keras;
4. times one image at a time (batch 1) in the same process: Keras `predict_on_batch` on this
   backend and each `.tflite` in the interpreter (`--threads` threads), medians over
   `--repeats` calls after warm-up.

Prints a Markdown table (and writes it with the raw numbers to `--out`/results.json).

Command (about 2-3 minutes on 2 shared CPU cores, most of it training):

    KERAS_BACKEND=jax python benchmarks/litert_digits.py --out runs/bench_litert
"""

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402

import keras_vit  # noqa: E402
from keras_vit import data  # noqa: E402
from keras_vit.runner import quickstart  # noqa: E402

MODES = (None, "float16", "dynamic_int8", "int8")


def test_split(model):
    """The digits test split as the recipes evaluate it: float32 images in [-1, 1], int labels."""
    _, height, width, channels = model.inputs[0].shape
    source = data.load_source("digits", "test", num_channels=channels)
    return data.numpy_arrays(
        data.eval_pipeline(source, image_size=(height, width), batch_size=256)
    )


def median_seconds(call, repeats, warmup=10):
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/bench_litert")
    parser.add_argument("--model", help="a trained .keras model (default: train the quickstart)")
    parser.add_argument("--calibration-samples", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args(argv)
    from ai_edge_litert.interpreter import Interpreter

    os.makedirs(args.out, exist_ok=True)
    if args.model:
        model_path = args.model
        train_seconds = None
    else:
        result = quickstart.train(
            os.path.join(args.out, "quickstart"), verbose=0, overwrite=True
        )
        model_path, train_seconds = result["model_path"], result["seconds"]
    model = keras_vit.load_model(model_path)
    images, labels = test_split(model)
    logits = keras.ops.convert_to_numpy(model.predict(images, batch_size=256, verbose=0))
    one = images[:1]
    rows = [
        dict(
            mode="Keras (" + keras.backend.backend() + ")",
            accuracy=float((logits.argmax(-1) == labels).mean()),
            size=os.path.getsize(model_path),
            max_logit_diff=0.0,
            ms_per_image=1e3
            * median_seconds(lambda: model.predict_on_batch(one), args.repeats),
        )
    ]
    for mode in MODES:
        path = os.path.join(args.out, f"digits_{mode or 'float32'}.tflite")
        start = time.perf_counter()
        keras_vit.export_litert(
            model_path,
            path,
            quantize=mode,
            representative_data="digits" if mode == "int8" else None,
            representative_samples=args.calibration_samples,
            overwrite=True,
            verbose=False,
        )
        export_seconds = time.perf_counter() - start
        runner = Interpreter(model_path=path, num_threads=args.threads).get_signature_runner()
        out = runner(images=images)["logits"]
        single = Interpreter(model_path=path, num_threads=args.threads).get_signature_runner()
        rows.append(
            dict(
                mode=f"LiteRT {mode or 'float32'}",
                accuracy=float((out.argmax(-1) == labels).mean()),
                size=os.path.getsize(path),
                max_logit_diff=float(np.abs(out - logits).max()),
                ms_per_image=1e3 * median_seconds(lambda r=single: r(images=one), args.repeats),
                export_seconds=export_seconds,
            )
        )
    keras_row = rows[0]
    lines = [
        f"digits test split: {len(labels)} images {tuple(images.shape[1:])}; model "
        f"{model_path} ({model.count_params():,} parameters"
        + (f", trained in {train_seconds:.0f} s" if train_seconds else "")
        + f"); interpreter threads: {args.threads}",
        "",
        "| model | test accuracy | delta vs Keras (points) | max abs logit diff | file size "
        "| size vs float32 .tflite | ms / image (batch 1) | speed vs Keras |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    float_size = rows[1]["size"]
    for row in rows:
        lines.append(
            f"| {row['mode']} | {100 * row['accuracy']:.2f}% "
            f"| {100 * (row['accuracy'] - keras_row['accuracy']):+.2f} "
            f"| {row['max_logit_diff']:.2g} | {row['size'] / 1024:.0f} KiB "
            f"| {row['size'] / float_size:.2f}x | {row['ms_per_image']:.3f} "
            f"| {keras_row['ms_per_image'] / row['ms_per_image']:.1f}x |"
        )
    table = "\n".join(lines)
    print(table)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(dict(rows=rows, table=table, versions=versions()), f, indent=2)


def versions():
    import ai_edge_litert
    import tensorflow as tf

    return dict(
        keras=keras.__version__,
        tensorflow=tf.__version__,
        ai_edge_litert=getattr(ai_edge_litert, "__version__", "?"),
        backend=keras.backend.backend(),
    )


if __name__ == "__main__":
    main()
