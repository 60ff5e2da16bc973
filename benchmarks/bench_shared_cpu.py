"""The quickstart's training and `predict` per backend, idle and beside busy processes.

Issue 46: on a 2-core machine PyTorch slowed down far more than JAX and TensorFlow when another
process held a core. This runs, in fresh subprocesses, `keras-vit quickstart` (the CLI's own
`main`, so its thread settings apply) for a few epochs and then `model.predict` on the saved
model, on each backend, with 0, 1 and 2 single-threaded busy processes beside it (a Python
`while True: pass` that the benchmark starts and kills itself), and reports the seconds, the
slowdown against idle, and the counters that show the mechanism: the process's CPU seconds per
wall second (all threads; `getrusage`), its voluntary / involuntary context switches and its
thread count.

Variants are environment settings of the child process (A/B in one sitting, interleaved):

- `auto`: what the CLI does now (keras_vit/runner/threads.py);
- `off`: `KERAS_VIT_THREADS=0`, the CLI leaves every thread setting alone (as before issue 46);
- `passive`: `off` plus `OMP_WAIT_POLICY=PASSIVE` (OpenMP workers sleep instead of spinning);
- `omp1`: `off` plus `OMP_NUM_THREADS=1` (one intra-op thread for PyTorch);
- `tf1`: `off` plus TensorFlow's pools at one thread (`TF_NUM_INTRAOP_THREADS`,
  `TF_NUM_INTEROP_THREADS`): the quickstart's tf.data runs in the same process.

Usage (a quiet machine, about 15 minutes; the table for benchmarks/RESULTS.md):

    python benchmarks/bench_shared_cpu.py --backends torch,jax,tensorflow --variants off,auto \
        --busy 0,1,2 --epochs 3 --repeats 1 --budget-s 1500

Each row's load average (`os.getloadavg()`) at its start is printed: figures taken while other
jobs shared the machine say so.
"""

import argparse
import itertools
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

VARIANTS = {
    "auto": {},
    "off": {"KERAS_VIT_THREADS": "0"},
    "passive": {"KERAS_VIT_THREADS": "0", "OMP_WAIT_POLICY": "PASSIVE"},
    "omp1": {"KERAS_VIT_THREADS": "0", "OMP_NUM_THREADS": "1"},
    "tf1": {"KERAS_VIT_THREADS": "0", "TF_NUM_INTRAOP_THREADS": "1",
            "TF_NUM_INTEROP_THREADS": "1"},
}
# Settings of the parent's environment that would change what a variant measures.
CLEARED = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "KERAS_VIT_THREADS", "TF_NUM_INTRAOP_THREADS",
           "TF_NUM_INTEROP_THREADS", "GOMP_SPINCOUNT", "MKL_NUM_THREADS")


def _usage():
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process
    return usage.ru_utime + usage.ru_stime, usage.ru_nvcsw, usage.ru_nivcsw


def _threads():
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return -1


def _measure(function):
    cpu0, vol0, invol0 = _usage()
    start = time.perf_counter()
    function()
    wall = time.perf_counter() - start
    cpu1, vol1, invol1 = _usage()
    return {"s": wall, "cpu_s": cpu1 - cpu0, "cpu_per_wall": (cpu1 - cpu0) / wall,
            "voluntary": vol1 - vol0,
            "involuntary": invol1 - invol0}


def child(args):
    """One run: the quickstart through the CLI, then `predict`; prints one JSON line."""
    sys.path.insert(0, ROOT)
    from keras_vit.cli import main

    out = os.path.join(args.out, "run")
    code = []
    result = {"train": _measure(lambda: code.append(main(
        ["quickstart", "--epochs", str(args.epochs), "--out", out, "--verbose", "0"]
    )))}
    if code[0] != 0:
        raise SystemExit(f"quickstart failed with exit code {code[0]}")
    import keras
    import numpy as np

    model = keras.saving.load_model(os.path.join(out, "model.keras"))
    images = np.random.default_rng(0).uniform(
        -1, 1, (512,) + tuple(model.input_shape[1:])
    ).astype("float32")
    model.predict(images[:64], batch_size=64, verbose=0)  # warm-up

    def predict():
        for _ in range(args.predict_repeats):
            model.predict(images, batch_size=64, verbose=0)

    result["predict"] = _measure(predict)
    result["threads"] = _threads()
    import torch  # noqa: F401  (present in every environment of this project)

    result["torch_threads"] = sys.modules["torch"].get_num_threads()
    print("RESULT " + json.dumps(result), flush=True)


def _busy(count):
    return [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)
    ]


def run_one(backend, variant, busy, args, deadline):
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    env.update(VARIANTS[variant], KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=ROOT)
    load = os.getloadavg()[0]
    timeout = max(1.0, deadline - time.monotonic())
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, os.path.abspath(__file__), "--child", "--out", out,
                   "--epochs", str(args.epochs), "--predict-repeats", str(args.predict_repeats)]
        others = _busy(busy)
        start = time.monotonic()
        try:
            proc = subprocess.run(command, env=env, capture_output=True, text=True,
                                  timeout=timeout, cwd=ROOT)
        except subprocess.TimeoutExpired:
            return {"backend": backend, "variant": variant, "busy": busy, "load": load,
                    "timeout_s": time.monotonic() - start}
        finally:
            for other in others:
                other.kill()
                other.wait()
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        return {"backend": backend, "variant": variant, "busy": busy, "load": load,
                "error": (proc.stderr or proc.stdout)[-800:]}
    return {"backend": backend, "variant": variant, "busy": busy, "load": load,
            **json.loads(lines[-1][len("RESULT "):])}


def _cell(rows, phase, key):
    values = [row[phase][key] for row in rows if phase in row]
    return statistics.median(values) if values else None


def table(results, busy_levels):
    lines = ["| backend | variant | phase | " + " | ".join(
        f"{b} busy: s (x idle), CPU s, invol. cs" for b in busy_levels) + " | load |",
        "|---|---|---|" + "---|" * len(busy_levels) + "---|"]
    keys = sorted({(r["backend"], r["variant"]) for r in results})
    for backend, variant in keys:
        rows = [r for r in results if (r["backend"], r["variant"]) == (backend, variant)]
        loads = [r["load"] for r in rows]
        for phase in ("train", "predict"):
            idle = _cell([r for r in rows if r["busy"] == 0], phase, "s")
            cells = []
            for busy in busy_levels:
                at = [r for r in rows if r["busy"] == busy]
                seconds = _cell(at, phase, "s")
                if seconds is None:
                    timed_out = [r["timeout_s"] for r in at if "timeout_s" in r]
                    cells.append(f"> {max(timed_out):.0f} (timeout)" if timed_out else "-")
                    continue
                factor = f" (x{seconds / idle:.2f})" if idle else ""
                cells.append(f"{seconds:.1f}{factor}, {_cell(at, phase, 'cpu_s'):.1f}, "
                             f"{_cell(at, phase, 'involuntary'):.0f}")
            lines.append(f"| {backend} | {variant} | {phase} | " + " | ".join(cells)
                         + f" | {min(loads):.1f}-{max(loads):.1f} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="torch,jax,tensorflow")
    parser.add_argument("--variants", default="off,auto")
    parser.add_argument("--busy", default="0,1,2", help="busy processes beside each run")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--predict-repeats", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--budget-s", type=float, default=1500.0,
                        help="stop starting runs after this many seconds (a run past it is "
                             "stopped and reported as a timeout)")
    parser.add_argument("--json", help="also write every row to this file")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)
    # A SIGTERM (or a SIGINT where a background shell ignores it) stops the run through the
    # `finally` that kills the busy processes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    for variant in args.variants.split(","):
        if variant not in VARIANTS:
            parser.error(f"--variants must name some of {sorted(VARIANTS)}. "
                         f"Received: {variant!r}")
    busy_levels = [int(b) for b in args.busy.split(",")]
    deadline = time.monotonic() + args.budget_s
    print(f"cores available: {len(os.sched_getaffinity(0))}, load at start: "
          f"{os.getloadavg()}", flush=True)
    results = []
    plan = itertools.product(range(args.repeats), busy_levels, args.backends.split(","),
                             args.variants.split(","))
    for _, busy, backend, variant in plan:
        if time.monotonic() >= deadline:
            print("budget spent: the remaining runs are left out", flush=True)
            break
        row = run_one(backend, variant, busy, args, deadline)
        results.append(row)
        print(json.dumps(row), flush=True)
    print(table(results, busy_levels))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
