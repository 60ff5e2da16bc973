"""Speed of keras_vit beside timm, HF transformers and KerasHub, measured in one run (issue 9).

Two workloads, as the issue fixes them (fp32, 224 px, 1,000 classes, random data):

- `infer`: ViT-B/16 forward pass, batch 8 (Keras: `model.predict_on_batch`, compiled on JAX and
  TensorFlow; PyTorch peers: `model(x)` under `torch.inference_mode()`);
- `train`: ViT-S/16 training step, batch 16, AdamW, softmax cross-entropy (Keras:
  `model.train_on_batch`, what `model.fit` runs; PyTorch peers: forward, loss, backward, step).

Every (workload, library, backend) runs in its own Python process: the model is built, warmed
up (`--warmup` steps, which include compilation), then `--runs` steps are timed one by one and
the median is reported. A matmul roofline is measured in the same run (the best GFLOP/s of a
large fp32 matmul in NumPy, PyTorch, JAX and TensorFlow, whichever are installed), so the table
can say how close each model gets to what the machine's matmul reaches. FLOPs are counted
analytically (2 per multiply-add; the patch embedding, the linear layers, the two attention
matmuls and the head; a training step counts 3x the forward pass).

The table gives images/s, GFLOP/s, % of the roofline, and two ratios: keras_vit against the best
peer on the same backend (KerasHub on JAX / TensorFlow; the fastest of timm, HF transformers and
KerasHub on PyTorch), and against timm. Peers that are not installed are skipped with a note.

The peers are not dependencies of keras_vit and are never installed in CI. Set up a separate
environment (timm needs torchvision, which does not import beside the torch 2.13 CPU build of
the development machines; torch 2.14.1 + torchvision 0.29.1 do):

    python -m venv .venv-bench && . .venv-bench/bin/activate
    pip install "torch==2.14.1" "torchvision==0.29.1" -e ".[tensorflow,jax,bench]"
    python benchmarks/bench_vit.py --repeats 3         # everything, ~20 min on 2 CPU cores
    python benchmarks/bench_vit.py --tasks train --backends jax --libs keras_vit keras_hub
    python benchmarks/bench_vit.py --tasks train --libs keras_vit keras_vit_remat  # remat memory

One process's figure varies by up to 10-20% from process to process, even on a quiet machine
(a JAX inference run measured 7.5 and then 9.5 images/s): use `--repeats 3` or more, which runs
the processes in turn and reports the median of their medians with the range, and compare
ratios within one run.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TASKS = {
    # name: (variant, hidden, layers, heads, mlp, patch, batch)
    "infer": dict(variant="B/16", hidden=768, layers=12, heads=12, mlp=3072, patch=16, batch=8),
    "train": dict(variant="S/16", hidden=384, layers=12, heads=6, mlp=1536, patch=16, batch=16),
}
SIZES = {  # --train-variant: the GPU item trains ViT-B/16
    "S/16": dict(variant="S/16", hidden=384, layers=12, heads=6, mlp=1536, patch=16),
    "B/16": dict(variant="B/16", hidden=768, layers=12, heads=12, mlp=3072, patch=16),
}
IMAGE_SIZE = 224
CLASSES = 1000
LIBRARIES = ("keras_vit", "keras_hub", "timm", "hf")
# keras_vit_remat: keras_vit with `remat=True` (gradient checkpointing), for its memory column;
# not run unless named in --libs.
KERAS_LIBRARIES = ("keras_vit", "keras_vit_remat", "keras_hub")
BACKENDS = ("tensorflow", "jax", "torch")


def forward_flops(hidden, layers, mlp, patch, image_size=IMAGE_SIZE, classes=CLASSES, channels=3):
    """FLOPs (2 per multiply-add) of one image's forward pass through a plain ViT."""
    patches = (image_size // patch) ** 2
    tokens = patches + 1
    embed = 2 * patches * patch * patch * channels * hidden
    linear = 2 * tokens * (4 * hidden * hidden + 2 * hidden * mlp)  # qkv, out, 2 MLP layers
    attention = 2 * 2 * tokens * tokens * hidden  # q k^T and attention x v
    head = 2 * hidden * classes
    return embed + layers * (linear + attention) + head


def task_flops(task):
    spec = TASKS[task]
    fwd = forward_flops(spec["hidden"], spec["layers"], spec["mlp"], spec["patch"])
    return fwd * (3 if task == "train" else 1)


# --------------------------------------------------------------------------------------------
# Workers (one per process)


CLOCK = time.perf_counter  # --clock process: CPU time of this process (see --threads)


def _time_steps(step, warmup, runs):
    for _ in range(warmup):
        step()
    times = []
    for _ in range(runs):
        start = CLOCK()
        step()
        times.append(CLOCK() - start)
    return times


def _limit_threads(threads, framework):
    """Run this process on `threads` cores, with one intra-op pool of that size."""
    if hasattr(os, "sched_setaffinity"):  # XLA and oneDNN size their pools from the affinity
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:threads])
    os.environ["OMP_NUM_THREADS"] = os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
    if threads == 1:
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false"
        )
    if framework == "tensorflow":
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    if framework == "torch":
        import torch

        torch.set_num_threads(threads)


def _keras_model(lib, task):
    import keras

    spec = TASKS[task]
    if lib.startswith("keras_vit"):
        import keras_vit

        return keras_vit.ViT(
            spec["variant"],
            image_size=IMAGE_SIZE,
            num_classes=CLASSES,
            remat=lib == "keras_vit_remat",
        )
    import keras_hub

    backbone = keras_hub.models.ViTBackbone(
        image_shape=(IMAGE_SIZE, IMAGE_SIZE, 3),
        patch_size=spec["patch"],
        num_layers=spec["layers"],
        num_heads=spec["heads"],
        hidden_dim=spec["hidden"],
        mlp_dim=spec["mlp"],
    )
    inputs = keras.Input((IMAGE_SIZE, IMAGE_SIZE, 3))
    features = backbone(inputs)
    logits = keras.layers.Dense(CLASSES)(features[:, 0])
    return keras.Model(inputs, logits)


def _run_keras(lib, task, warmup, runs, jit_compile, precision="fp32"):
    import keras
    import numpy as np

    if precision == "bf16":
        keras.config.set_dtype_policy("mixed_bfloat16")
    spec = TASKS[task]
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (spec["batch"], IMAGE_SIZE, IMAGE_SIZE, 3)).astype("float32")
    y = rng.integers(0, CLASSES, spec["batch"])
    # Backend tensors on the default device (the GPU where there is one), as the PyTorch peers
    # keep theirs: a NumPy batch would be copied to the device again at every step.
    x, y = keras.ops.convert_to_tensor(x), keras.ops.convert_to_tensor(y, dtype="int32")
    model = _keras_model(lib, task)
    compile_kwargs = {} if jit_compile is None else {"jit_compile": jit_compile}
    if task == "infer":
        model.compile(**compile_kwargs)
        step = lambda: model.predict_on_batch(x)  # noqa: E731
    else:
        model.compile(
            optimizer=keras.optimizers.AdamW(learning_rate=1e-4),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            **compile_kwargs,
        )
        step = lambda: model.train_on_batch(x, y)  # noqa: E731
    times = _time_steps(step, warmup, runs)
    return times, {"keras": keras.__version__, "params": model.count_params()}


def _torch_model(lib, task):
    spec = TASKS[task]
    if lib == "timm":
        import timm

        name = {"B/16": "vit_base_patch16_224", "S/16": "vit_small_patch16_224"}[spec["variant"]]
        return timm.create_model(name, pretrained=False, num_classes=CLASSES)
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(
        image_size=IMAGE_SIZE,
        patch_size=spec["patch"],
        hidden_size=spec["hidden"],
        num_hidden_layers=spec["layers"],
        num_attention_heads=spec["heads"],
        intermediate_size=spec["mlp"],
        num_labels=CLASSES,
        attn_implementation="sdpa",  # PyTorch's fused scaled_dot_product_attention
    )
    return ViTForImageClassification(config)


def _run_torch(lib, task, warmup, runs, jit_compile=None, precision="fp32"):
    import contextlib

    import torch

    spec = TASKS[task]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    x = (torch.rand(spec["batch"], 3, IMAGE_SIZE, IMAGE_SIZE) * 2 - 1).to(device)
    y = torch.randint(0, CLASSES, (spec["batch"],)).to(device)
    model = _torch_model(lib, task).to(device)
    forward = torch.compile(model) if jit_compile is True else model

    def autocast():
        if precision == "bf16":
            return torch.autocast(device, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def logits_of(out):
        return out.logits if hasattr(out, "logits") else out

    if task == "infer":
        model.eval()

        def step():
            with torch.inference_mode(), autocast():
                out = logits_of(forward(x))
            if device == "cuda":
                torch.cuda.synchronize()
            return out

    else:
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        loss_fn = torch.nn.CrossEntropyLoss()

        def step():
            optimizer.zero_grad(set_to_none=True)
            with autocast():
                loss = loss_fn(logits_of(forward(x)), y)
            loss.backward()
            optimizer.step()
            return loss.item()

    times = _time_steps(step, warmup, runs)
    versions = {"torch": torch.__version__, "params": sum(p.numel() for p in model.parameters())}
    return times, versions


def _roofline(framework, size=2048, runs=7, precision="fp32"):
    """Median GFLOP/s of a `size`^3 matmul (fp32, or bf16 for `precision="bf16"`)."""
    import numpy as np

    a = np.random.default_rng(0).standard_normal((size, size), dtype=np.float32)
    if framework == "numpy":
        if precision != "fp32":
            raise ValueError("NumPy has no bf16 matmul")
        step = lambda: a @ a  # noqa: E731
    elif framework == "torch":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
        t = torch.from_numpy(a).to(device)
        if precision == "bf16":
            t = t.to(torch.bfloat16)

        def step():
            out = t @ t
            if device == "cuda":
                torch.cuda.synchronize()
            return out

    elif framework == "jax":
        import jax
        import jax.numpy as jnp

        t = jax.device_put(a)
        if precision == "bf16":
            t = t.astype(jnp.bfloat16)
        f = jax.jit(lambda m: m @ m)
        step = lambda: f(t).block_until_ready()  # noqa: E731
    else:
        import tensorflow as tf

        t = tf.constant(a)
        if precision == "bf16":
            t = tf.cast(t, tf.bfloat16)
        f = tf.function(lambda m: tf.matmul(m, m), jit_compile=True)
        step = lambda: f(t).numpy()  # noqa: E731
    times = _time_steps(step, 2, runs)
    return 2 * size**3 / statistics.median(times) / 1e9


def worker(args):
    global CLOCK
    if args.clock == "process":
        CLOCK = time.process_time
    if args.threads:
        _limit_threads(args.threads, args.backend)
    if args.lib == "roofline":
        gflops = _roofline(args.backend, args.roofline_size, precision=args.precision)
        print("RESULT " + json.dumps({"gflops": gflops}), flush=True)
        return
    if args.lib in KERAS_LIBRARIES:
        times, info = _run_keras(
            args.lib, args.task, args.warmup, args.runs, args.jit_compile, args.precision
        )
    else:
        times, info = _run_torch(
            args.lib, args.task, args.warmup, args.runs, args.jit_compile, args.precision
        )
    import resource

    # Peak resident memory of the whole process (model, activations, framework), in MiB.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps({"times": times, "peak_rss_mib": peak, **info}), flush=True)


# --------------------------------------------------------------------------------------------
# Driver


def _spawn(lib, backend, task, args):
    env = dict(os.environ)
    if lib in KERAS_LIBRARIES:
        env["KERAS_BACKEND"] = backend
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    cmd = [
        sys.executable, os.path.abspath(__file__), "--worker",
        "--lib", lib, "--backend", backend, "--tasks", task,
        "--warmup", str(args.warmup), "--runs", str(args.runs),
    ]
    if args.jit_compile is not None:
        cmd += ["--jit-compile", str(args.jit_compile).lower()]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    cmd += ["--clock", args.clock, "--precision", args.precision,
            "--roofline-size", str(args.roofline_size)]
    for flag, value in (
        ("--train-variant", args.train_variant),
        ("--batch-infer", args.batch_infer),
        ("--batch-train", args.batch_train),
    ):
        if value is not None:
            cmd += [flag, str(value)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):]), None
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return None, " | ".join(tail) or f"exit code {proc.returncode}"


def _installed(module):
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _jobs(args):
    """(lib, backend) pairs to run: Keras libraries on each backend, PyTorch peers on torch."""
    jobs = []
    for lib in args.libs:
        if lib in KERAS_LIBRARIES:
            jobs += [(lib, backend) for backend in args.backends]
        elif "torch" in args.backends:
            jobs.append((lib, "torch"))
    return jobs


def _format_table(rows, roofline):
    head = (
        "| workload | library | backend | images/s | GFLOP/s | % roofline "
        "| keras_vit / best peer (same backend) | keras_vit / timm | peak RSS MiB |"
    )
    lines = [head, "|" + "---|" * 9]
    for row in rows:
        if row.get("error"):
            lines.append(
                f"| {row['task']} | {row['lib']} | {row['backend']} | failed: {row['error'][:80]} "
                "| | | | | |"
            )
            continue
        lines.append(
            f"| {row['task']} | {row['lib']} | {row['backend']} | {row['images_per_s']:.2f}"
            f"{_range(row)} "
            f"| {row['gflops']:.1f} | {100 * row['gflops'] / roofline:.0f}% "
            f"| {row.get('vs_best_peer', '')} | {row.get('vs_timm', '')} "
            f"| {row.get('peak_rss_mib', 0):.0f} |"
        )
    return "\n".join(lines)


def _range(row):
    low, high = row.get("images_per_s_range") or (None, None)
    return f" [{low:.2f}-{high:.2f}]" if low is not None and high > low else ""


def _ratios(rows):
    ok = [r for r in rows if not r.get("error")]
    for row in ok:
        if not row["lib"].startswith("keras_vit"):
            continue
        peers = [
            r for r in ok
            if r["task"] == row["task"] and r["backend"] == row["backend"]
            and not r["lib"].startswith("keras_vit")
        ]
        if peers:
            best = max(peers, key=lambda r: r["images_per_s"])
            ratio = row["images_per_s"] / best["images_per_s"]
            row["vs_best_peer"] = f"{ratio:.2f}x ({best['lib']})"
        timm = [r for r in ok if r["task"] == row["task"] and r["lib"] == "timm"]
        if timm:
            row["vs_timm"] = f"{row['images_per_s'] / timm[0]['images_per_s']:.2f}x"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--libs", nargs="+", default=list(LIBRARIES),
                        choices=[*LIBRARIES, "keras_vit_remat"])
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=list(BACKENDS))
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps (include compiling)")
    parser.add_argument("--runs", type=int, default=5, help="timed steps; the median is reported")
    parser.add_argument("--repeats", type=int, default=1,
                        help="processes per (workload, library, backend), run in turn; the "
                        "median of their medians is reported, with the range")
    parser.add_argument(
        "--jit-compile", type=lambda s: {"true": True, "false": False, "auto": "auto"}[s.lower()],
        default=None, help="passed to Keras' model.compile (default: Keras' own, 'auto')",
    )
    parser.add_argument(
        "--threads", type=int, default=None,
        help="limit every framework to this many intra-op threads (default: theirs, all cores)",
    )
    parser.add_argument(
        "--clock", choices=("wall", "process"), default="wall",
        help="wall time (the benchmark) or this process's CPU time (with --threads 1: a "
        "profile that other jobs on the machine disturb less)",
    )
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                        help="bf16: Keras' mixed_bfloat16 policy, torch.autocast for PyTorch "
                        "peers, and a bf16 roofline matmul")
    parser.add_argument("--roofline-size", type=int, default=2048,
                        help="matmul size of the roofline (8192 fills a GPU)")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="the accelerator's spec peak (e.g. 989 for an H100 SXM in bf16): "
                        "the %% column becomes model FLOPs utilisation (MFU) against it")
    parser.add_argument("--train-variant", choices=sorted(SIZES), default=None,
                        help="model of the training workload (default S/16)")
    parser.add_argument("--batch-infer", type=int, default=None, help="default 8")
    parser.add_argument("--batch-train", type=int, default=None, help="default 16")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--lib", help=argparse.SUPPRESS)
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.train_variant:
        TASKS["train"].update(SIZES[args.train_variant])
    if args.batch_infer:
        TASKS["infer"]["batch"] = args.batch_infer
    if args.batch_train:
        TASKS["train"]["batch"] = args.batch_train
    if args.worker:
        args.task = args.tasks[0]
        return worker(args)
    if args.runs < 5:
        print(f"note: --runs {args.runs} < 5; the issue asks for medians of at least 5 runs")

    frameworks = [f for f in ("numpy", "torch", "jax", "tensorflow") if _installed(f)]
    if args.precision == "bf16":
        frameworks.remove("numpy")
    roofs = {}
    for framework in frameworks:
        result, error = _spawn("roofline", framework, "infer", args)
        if result:
            roofs[framework] = result["gflops"]
    roofline = max(roofs.values())
    print(f"matmul roofline ({args.roofline_size}^3 {args.precision}, GFLOP/s): "
          + ", ".join(f"{k} {v:.1f}" for k, v in roofs.items()) + f" -> {roofline:.1f}")

    available = {
        "keras_vit": True,
        "keras_vit_remat": True,
        "keras_hub": _installed("keras_hub"),
        "timm": _installed("timm"),
        "hf": _installed("transformers"),
    }
    jobs = []
    for lib, backend in _jobs(args):
        if available[lib]:
            jobs.append((lib, backend))
        else:
            print(f"skip {lib}: not installed (pip install -e '.[bench]')")
    rows = []
    for task in args.tasks:
        spec = TASKS[task]
        results = {job: [] for job in jobs}
        errors = {}
        # Repeats go round the jobs in turn, so that a slow spell of the machine hits every
        # library alike instead of one library's processes.
        for repeat in range(args.repeats):
            for lib, backend in jobs:
                if (lib, backend) in errors:
                    continue
                result, error = _spawn(lib, backend, task, args)
                if error:
                    errors[(lib, backend)] = error
                    status = error
                else:
                    results[(lib, backend)].append(result)
                    status = f"{spec['batch'] / statistics.median(result['times']):.2f} img/s"
                print(f"  {task} {spec['variant']:<5} {lib:<15} {backend:<11} "
                      f"{repeat + 1}/{args.repeats} {status}", flush=True)
        for lib, backend in jobs:
            name = f"{task} {spec['variant']} b{spec['batch']}"
            row = {"task": name, "lib": lib, "backend": backend}
            runs = results[(lib, backend)]
            if (lib, backend) in errors:
                row["error"] = errors[(lib, backend)]
            else:
                # Median over processes of each process's median step time.
                per_process = [statistics.median(r["times"]) for r in runs]
                median = statistics.median(per_process)
                row.update({k: v for k, v in runs[0].items() if k != "times"})
                row["times"] = [r["times"] for r in runs]
                row["peak_rss_mib"] = max(r["peak_rss_mib"] for r in runs)
                row["median_s"] = median
                row["images_per_s"] = spec["batch"] / median
                row["images_per_s_range"] = [spec["batch"] / max(per_process),
                                             spec["batch"] / min(per_process)]
                row["gflops"] = task_flops(task) * spec["batch"] / median / 1e9
            rows.append(row)
    _ratios(rows)
    print()
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
          f"medians of {args.runs} steps after {args.warmup} warm-up steps, "
          f"{args.repeats} process(es) each (median of medians; range in brackets)")
    if args.peak_tflops:
        print(f"% column: model FLOPs utilisation against a {args.peak_tflops:g} TFLOP/s peak")
        roofline = args.peak_tflops * 1000
    print(_format_table(rows, roofline))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"roofline": roofs, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
