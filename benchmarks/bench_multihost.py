"""One process against two: `keras-vit pretrain` on local JAX processes (images/s, same weights).

Runs the same pre-training (offline digits, deterministic preprocessing) in one process without a
distribution, then in two processes on 127.0.0.1 (`--job-addresses`, `--num-processes`,
`--process-id`; gloo collectives) for each `--modes` entry, and prints one row per run: training
images/s (process 0's `metrics.json`, epochs after the first), the ratio to one process, the wall
time, and the largest difference of the final weights from the one-process run (relative to the
largest weight).

    KERAS_BACKEND=jax python benchmarks/bench_multihost.py
    KERAS_BACKEND=jax python benchmarks/bench_multihost.py --modes data_parallel --epochs 4

On one machine the processes share its cores (and on this 2-core VM other jobs too): the speed
says what the extra process and its collectives cost here, not what several machines gain.
"""

import argparse
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DETERMINISTIC = ["--crop-scale", "1,1", "--crop-ratio", "1,1", "--rotation", "0", "--no-flip",
                 "--dropout", "0"]


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(commands, logs, timeout):
    """Runs `commands` at once, each in its own process group; kills what is left at the end."""
    env = {**os.environ, "PYTHONPATH": ROOT, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "3"}
    procs, files = [], []
    start = time.monotonic()
    try:
        for argv, log in zip(commands, logs, strict=True):
            files.append(open(log, "w"))
            procs.append(subprocess.Popen(argv, env=env, stdout=files[-1],
                                          stderr=subprocess.STDOUT, start_new_session=True))
        for proc in procs:
            proc.wait(timeout=max(1.0, timeout - (time.monotonic() - start)))
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for f in files:
            f.close()
    for proc, log in zip(procs, logs, strict=True):
        if proc.returncode != 0:
            with open(log) as f:
                raise RuntimeError(f"{log} (exit {proc.returncode}):\n{f.read()[-3000:]}")
    return time.monotonic() - start


def weight_vector(path):
    import keras

    from keras_vit.saving import load_model

    return np.concatenate(
        [np.ravel(keras.ops.convert_to_numpy(w)) for w in load_model(path).weights]
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default="data_parallel,model_parallel",
                        help="distributions of the two-process runs (comma list)")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--steps-per-epoch", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=64, help="global batch")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per run")
    parser.add_argument("--out", default=None, help="folder for the runs (default: a temp dir)")
    args = parser.parse_args()
    os.environ["KERAS_BACKEND"] = "jax"
    out = args.out or tempfile.mkdtemp(prefix="bench_multihost_")
    os.makedirs(out, exist_ok=True)
    common = [sys.executable, "-m", "keras_vit", "pretrain", "--epochs", str(args.epochs),
              "--steps-per-epoch", str(args.steps_per_epoch), "--batch-size",
              str(args.batch_size), "--warmup-steps", "10", "--verbose", "0", *DETERMINISTIC]
    runs = [("1 process", "none", None)]
    runs += [(f"2 processes, {mode}", mode, 2) for mode in args.modes.split(",") if mode]
    rows = []
    for name, mode, processes in runs:
        folder = os.path.join(out, name.replace(" ", "_").replace(",", ""))
        base = [*common, "--distribution", mode, "--out", folder]
        if processes is None:
            seconds = launch([base], [folder + ".log"], args.timeout)
        else:
            port = free_port()
            seconds = launch(
                [[*base, "--job-addresses", f"127.0.0.1:{port}", "--num-processes",
                  str(processes), "--process-id", str(i)] for i in range(processes)],
                [f"{folder}.{i}.log" for i in range(processes)], args.timeout,
            )
        with open(os.path.join(folder, "metrics.json")) as f:
            metrics = json.load(f)
        rows.append((name, folder, metrics, seconds))
    reference = weight_vector(os.path.join(rows[0][1], "model.keras"))
    base_speed = rows[0][2]["throughput"]["images_per_second"]
    import jax
    import keras

    print(f"keras {keras.__version__}, jax {jax.__version__}, {platform.machine()}, "
          f"os.cpu_count()={os.cpu_count()}; global batch {args.batch_size}, "
          f"{args.epochs} epochs x {args.steps_per_epoch} steps; runs in {out}")
    print("| run | processes, devices | images/s | vs 1 process | wall s | test accuracy "
          "| max weight difference |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, folder, metrics, seconds in rows:
        weights = weight_vector(os.path.join(folder, "model.keras"))
        difference = float(np.abs(weights - reference).max() / np.abs(reference).max())
        speed = metrics["throughput"]["images_per_second"]
        print(f"| {name} | {metrics['num_processes']}, {metrics['num_devices']} | {speed:.0f} "
              f"| {speed / base_speed:.2f} | {seconds:.0f} | {metrics['test_accuracy']:.4f} "
              f"| {difference:.1e} |")


if __name__ == "__main__":
    main()
