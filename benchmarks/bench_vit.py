"""Speed of keras_vit beside timm, HF transformers and KerasHub, measured in one run (issues 9, 17).

Workloads (224 px, 1,000 classes, random data unless set otherwise):

- `infer`: forward pass, ViT-B/16 at batch 8 by default (Keras: `model.predict_on_batch`,
  compiled on JAX and TensorFlow; PyTorch peers: `model(x)` under `torch.inference_mode()`);
- `train`: one training step, ViT-S/16 at batch 16 by default, AdamW, softmax cross-entropy
  (Keras: `model.train_on_batch`, what `model.fit` runs; PyTorch peers: forward, loss,
  backward, step);
- `fit` (Keras libraries only): `model.fit` end to end through the fine-tuning recipe
  (`keras_vit.runner.finetune`, the paper preset: SGD momentum, clipping, cosine schedule) on
  `--dataset synthetic` images (random, made in the `tf.data` graph: crop, flip, batching,
  prefetch as for any dataset), against the bare `train_on_batch` step of the same compiled
  model on a batch already on the device, in the same process. Without TensorFlow (no
  `tf.data`), or with `--fit-input arrays`, `fit` reads the same kind of images from in-memory
  NumPy arrays instead. The issue's bar: fit >= 90% of the bare step's images/s.

`--model CODE` picks the model of every workload (any plain variant code: `B/16`, `mu/8`, ...);
`--batch-infer` / `--batch-train` take several sizes (one row each). Inputs live on the default
device (the GPU where there is one) before timing, for Keras rows and PyTorch peers alike.

Every (workload, batch, library, backend) runs in its own Python process: the model is built,
warmed up (`--warmup` steps, which include compilation), then `--runs` steps are timed one by
one and the median is reported. FLOPs are counted analytically (2 per multiply-add; the patch
embedding, the linear layers, the two attention matmuls and the head; a training step counts 3x
the forward pass). The % column is the share of a matmul roofline measured in the same run (the
best GFLOP/s of a large matmul in NumPy, PyTorch, JAX and TensorFlow, whichever are installed),
or, with `--peak-tflops` (default 989, the H100/H200 dense bf16 peak, when a GPU is found and
`--precision bf16`), model FLOPs utilisation (MFU) against that peak. Memory: the process's peak
RSS, and on a GPU the framework's own peak (`jax` `device.memory_stats()["peak_bytes_in_use"]`,
`torch.cuda.max_memory_allocated()`, `tf.config.experimental.get_memory_info("GPU:0")["peak"]`).

`--budget-s SECONDS` (or `--deadline UNIX_TIME`, shared by several runs of one script) keeps a
run inside a time limit, a lent GPU's lease say: a worker is started only when it is expected to
end in time (1.25x the longest worker of the same library, backend and task seen so far in the
run, else `FIRST_ROW_ESTIMATE_S`), one still running at the limit is killed with the processes
it started, and the rows left out say `skipped: out of time`. `--json` is rewritten after
every row, so a run cut short still leaves what it measured. The `process s` column is each
row's worker wall time (import, build, compile, steps, profile): what a row costs a lease.

`--profile DIR` profiles `--profile-steps` more steps of every row after the timed ones
(`jax.profiler` with a Perfetto trace and `tf.profiler`, whose traces go to DIR, and
`torch.profiler`) and prints each row's top kernels (device kernels on a GPU, XLA / ATen /
TensorFlow ops on a CPU) by self time per step.

Rows for a library or backend that is not installed say `skipped: X not installed`. The peers
are not dependencies of keras_vit (timm and transformers are test dependencies, so `.[all]`
has them). README's torch / torchvision pair imports timm as it is (`_reference_imports.py`
keeps a fallback for a mismatched torchvision), so the project's environment runs every row:

    pip install "torch==2.14.1" "torchvision==0.29.1" -e ".[all,bench]"  # bench: keras_hub
    python benchmarks/bench_vit.py --repeats 3         # everything, ~20 min on 2 CPU cores
    python benchmarks/bench_vit.py --tasks train --backends jax --libs keras_vit keras_hub
    python benchmarks/bench_vit.py --tasks train --libs keras_vit keras_vit_remat  # remat memory
    python benchmarks/bench_vit.py --tasks fit --model mu/8 --image-size 32 --batch-train 64

The GPU commands of issue 17 (ViT-B/16, bf16, batches 128/256 and 128/1024) are in
benchmarks/GPU.md.

One process's figure varies by up to 10-20% from process to process, even on a quiet machine
(a JAX inference run measured 7.5 and then 9.5 images/s): use `--repeats 3` or more, which runs
the processes in turn and reports the median of their medians with the range, and compare
ratios within one run.
"""

import argparse
import collections
import contextlib
import glob
import gzip
import importlib.util
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from _reference_imports import import_torchvision

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Default model and batch of each workload (the CPU benchmark of issue 9).
TASK_DEFAULTS = {"infer": ("B/16", 8), "train": ("S/16", 16), "fit": ("S/16", 16)}
TASKS = tuple(TASK_DEFAULTS)
IMAGE_SIZE = 224
CLASSES = 1000
LIBRARIES = ("keras_vit", "keras_hub", "timm", "hf")
# keras_vit_remat: keras_vit with `remat=True` (gradient checkpointing), for its memory column;
# not run unless named in --libs.
KERAS_LIBRARIES = ("keras_vit", "keras_vit_remat", "keras_hub")
BACKENDS = ("tensorflow", "jax", "torch")
MODULES = {"keras_hub": "keras_hub", "timm": "timm", "hf": "transformers"}
H100_BF16_TFLOPS = 989.0  # dense bf16 peak of an H100 SXM; the H200 is the same chip
PROFILE_TOP = 15


def _variants():
    """keras_vit's variant table, loaded from its file (no Keras import in this driver)."""
    path = os.path.join(REPO, "keras_vit", "models", "variants.py")
    spec = importlib.util.spec_from_file_location("_keras_vit_variants", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def model_spec(code):
    """`{"variant", "hidden", "layers", "heads", "mlp", "patch"}` of a plain variant code."""
    parsed = _variants().parse_variant(code)
    if parsed.get("resnet_units") is not None:
        raise ValueError(f"--model takes a plain ViT code such as B/16 or mu/8. Received: {code!r}")
    return dict(
        variant=code,
        hidden=parsed["hidden_dim"],
        layers=parsed["num_layers"],
        heads=parsed["num_heads"],
        mlp=parsed["mlp_dim"],
        patch=parsed["patch_size"],
    )


def forward_flops(hidden, layers, mlp, patch, image_size=IMAGE_SIZE, classes=CLASSES, channels=3):
    """FLOPs (2 per multiply-add) of one image's forward pass through a plain ViT."""
    patches = (image_size // patch) ** 2
    tokens = patches + 1
    embed = 2 * patches * patch * patch * channels * hidden
    linear = 2 * tokens * (4 * hidden * hidden + 2 * hidden * mlp)  # qkv, out, 2 MLP layers
    attention = 2 * 2 * tokens * tokens * hidden  # q k^T and attention x v
    head = 2 * hidden * classes
    return embed + layers * (linear + attention) + head


def workload_flops(task, spec, image_size=IMAGE_SIZE, classes=CLASSES):
    """FLOPs of one image in `task`: the forward pass, or 3x it for a training step."""
    fwd = forward_flops(spec["hidden"], spec["layers"], spec["mlp"], spec["patch"],
                        image_size, classes)
    return fwd * (1 if task == "infer" else 3)


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


def _device_peak_mib(framework):
    """Peak accelerator memory of this process in MiB (the framework's own count); None on CPU."""
    peak = None
    if framework == "jax":
        import jax

        device = jax.devices()[0]
        if device.platform != "cpu":
            peak = (device.memory_stats() or {}).get("peak_bytes_in_use")
    elif framework == "torch":
        import torch

        if torch.cuda.is_available():
            peak = torch.cuda.max_memory_allocated()
    else:
        import tensorflow as tf

        if tf.config.list_physical_devices("GPU"):
            peak = tf.config.experimental.get_memory_info("GPU:0")["peak"]
    return None if peak is None else peak / 2**20


def _keras_model(lib, spec, args):
    import keras

    if lib.startswith("keras_vit"):
        import keras_vit

        return keras_vit.ViT(
            spec["variant"],
            image_size=args.image_size,
            num_classes=args.num_classes,
            remat=lib == "keras_vit_remat",
        )
    import keras_hub

    backbone = keras_hub.models.ViTBackbone(
        image_shape=(args.image_size, args.image_size, 3),
        patch_size=spec["patch"],
        num_layers=spec["layers"],
        num_heads=spec["heads"],
        hidden_dim=spec["hidden"],
        mlp_dim=spec["mlp"],
    )
    inputs = keras.Input((args.image_size, args.image_size, 3))
    features = backbone(inputs)
    logits = keras.layers.Dense(args.num_classes)(features[:, 0])
    return keras.Model(inputs, logits)


def _random_batch(args, one_hot=False):
    """A device-resident `(images, labels)` batch (NumPy would be copied again at every step)."""
    import keras
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (args.batch, args.image_size, args.image_size, 3)).astype("float32")
    labels = rng.integers(0, args.num_classes, args.batch)
    y = np.eye(args.num_classes, dtype="float32")[labels] if one_hot else labels.astype("int32")
    return keras.ops.convert_to_tensor(x), keras.ops.convert_to_tensor(y)


def _run_keras(lib, spec, args):
    import keras

    if args.precision == "bf16":
        keras.config.set_dtype_policy("mixed_bfloat16")
    x, y = _random_batch(args)
    model = _keras_model(lib, spec, args)
    compile_kwargs = {} if args.jit_compile is None else {"jit_compile": args.jit_compile}
    if args.task == "infer":
        model.compile(**compile_kwargs)
        step = lambda: model.predict_on_batch(x)  # noqa: E731
    else:
        model.compile(
            optimizer=keras.optimizers.AdamW(learning_rate=1e-4),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            **compile_kwargs,
        )
        step = lambda: model.train_on_batch(x, y)  # noqa: E731
    times = _time_steps(step, args.warmup, args.runs)
    backend = keras.backend.backend()
    info = {"keras": keras.__version__, "params": model.count_params(),
            "peak_device_mib": _device_peak_mib(backend)}
    if args.profile:
        info["profile"] = _profile(backend, step, args)
    return times, info


def _run_fit(lib, spec, args):
    """`model.fit` through the fine-tuning recipe on synthetic data, then the bare step."""
    import keras

    from keras_vit.runner import finetune
    from keras_vit.runner.callbacks import ThroughputLogger
    from keras_vit.runner.compile import compile_model

    fit_input = args.fit_input
    if fit_input == "auto":
        fit_input = "recipe" if importlib.util.find_spec("tensorflow") else "arrays"
    steps, epochs = args.fit_steps, args.fit_epochs
    images = steps * args.batch
    out = tempfile.mkdtemp(prefix="bench_fit_")
    config = finetune.get_config("paper")
    config.update(
        model=spec["variant"], model_overrides={}, image_size=args.image_size,
        dataset=f"synthetic:{args.num_classes}:{images}:{args.image_size}",
        batch_size=args.batch, steps=None, epochs=epochs, steps_per_epoch=steps, warmup_steps=0,
        validation_freq=0, eval_batch_size=args.batch, out=out, overwrite=True, verbose=0,
        mixed_precision="mixed_bfloat16" if args.precision == "bf16" else None,
        steps_per_execution=args.steps_per_execution,
        # Per-epoch artefacts cost wall time but not the measured steps; a .keras checkpoint of
        # a ViT-B is 350 MB per epoch, so they are off (the backup is written once, at the end).
        checkpoints=False, backup_every=epochs,
    )
    if args.jit_compile is not None:
        config["jit_compile"] = args.jit_compile
    holder = {}

    class Grab(keras.callbacks.Callback):
        async_safe = True

        def on_train_end(self, logs=None):
            holder["model"] = self.model

    if fit_input == "recipe":
        metrics = finetune.run(config, callbacks=[Grab()])
        throughput = metrics["throughput"]
        model = holder["model"]
    else:  # the same model and compile, fed from in-memory NumPy arrays
        import numpy as np

        if config["mixed_precision"]:
            keras.config.set_dtype_policy(config["mixed_precision"])
        keras.utils.set_random_seed(0)
        rng = np.random.default_rng(0)
        x = rng.uniform(-1, 1, (images, args.image_size, args.image_size, 3)).astype("float32")
        y = np.eye(args.num_classes, dtype="float32")[np.arange(images) % args.num_classes]
        model, _ = finetune.build_model(args.num_classes, config)
        total = epochs * steps
        compile_model(model, config, total, 0)
        logger = ThroughputLogger(args.batch, steps)
        logger.async_safe = True
        model.fit(x, y, batch_size=args.batch, epochs=epochs, steps_per_epoch=steps,
                  callbacks=[logger], verbose=0)
        throughput = logger.summary()
    xb, yb = _random_batch(args, one_hot=True)
    times = _time_steps(lambda: model.train_on_batch(xb, yb), args.warmup, args.runs)
    backend = keras.backend.backend()
    info = {
        "keras": keras.__version__,
        "params": model.count_params(),
        "fit_input": fit_input,
        "fit_images_per_s": throughput.get("images_per_second"),
        "fit_epoch_seconds": throughput.get("epoch_seconds"),
        "fit_plan": f"{epochs} epochs x {steps} steps",
        "peak_device_mib": _device_peak_mib(backend),
    }
    return times, info


def _torch_model(lib, spec, args):
    import_torchvision()  # timm and transformers import torchvision (see _reference_imports.py)
    if lib == "timm":
        from timm.models.vision_transformer import VisionTransformer

        # The class behind timm.create_model("vit_base_patch16_224") etc., at any size.
        return VisionTransformer(
            img_size=args.image_size,
            patch_size=spec["patch"],
            embed_dim=spec["hidden"],
            depth=spec["layers"],
            num_heads=spec["heads"],
            mlp_ratio=spec["mlp"] / spec["hidden"],
            num_classes=args.num_classes,
        )
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(
        image_size=args.image_size,
        patch_size=spec["patch"],
        hidden_size=spec["hidden"],
        num_hidden_layers=spec["layers"],
        num_attention_heads=spec["heads"],
        intermediate_size=spec["mlp"],
        num_labels=args.num_classes,
        attn_implementation="sdpa",  # PyTorch's fused scaled_dot_product_attention
    )
    return ViTForImageClassification(config)


def _run_torch(lib, spec, args):
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    size = args.image_size
    x = (torch.rand(args.batch, 3, size, size) * 2 - 1).to(device)
    y = torch.randint(0, args.num_classes, (args.batch,)).to(device)
    model = _torch_model(lib, spec, args).to(device)
    compiled = args.jit_compile is True if args.peer_compile is None else args.peer_compile
    forward = torch.compile(model) if compiled else model

    def autocast():
        if args.precision == "bf16":
            return torch.autocast(device, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def logits_of(out):
        return out.logits if hasattr(out, "logits") else out

    if args.task == "infer":
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

    times = _time_steps(step, args.warmup, args.runs)
    info = {"torch": torch.__version__, "params": sum(p.numel() for p in model.parameters()),
            "peak_device_mib": _device_peak_mib("torch")}
    if args.profile:
        info["profile"] = _profile("torch", step, args)
    return times, info


# --- profiles ----------------------------------------------------------------------------------


def _profile(framework, step, args):
    """Profiles `--profile-steps` calls of `step`; returns the top ops by self time per step."""
    name = f"{args.task}_b{args.batch}_{args.lib}_{args.backend}"
    out = os.path.join(args.profile, name)
    os.makedirs(out, exist_ok=True)
    steps = args.profile_steps
    if framework == "jax":
        import jax

        with jax.profiler.trace(out, create_perfetto_trace=True):
            for _ in range(steps):
                step()
        paths = glob.glob(os.path.join(out, "**", "perfetto_trace.json.gz"), recursive=True)
        with gzip.open(sorted(paths)[-1], "rt") as f:
            trace = json.load(f)
        return top_trace_events(trace, steps)
    if framework == "torch":
        import torch

        activities = [torch.profiler.ProfilerActivity.CPU]
        cuda = torch.cuda.is_available()
        if cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=activities) as prof:
            for _ in range(steps):
                step()
            if cuda:
                torch.cuda.synchronize()
        return top_torch_events(prof.key_averages(), steps, cuda)
    import tensorflow as tf

    tf.profiler.experimental.start(out)
    for _ in range(steps):
        step()
    tf.profiler.experimental.stop()
    return top_xplane_events(out, steps)


def _top(totals, counts, steps, source):
    total = sum(totals.values()) or 1.0
    return {
        "source": source,
        "total_ms_per_step": total / 1e3 / steps,
        "top": [
            {"name": name, "ms_per_step": us / 1e3 / steps, "share": us / total,
             "calls_per_step": counts[name] / steps}
            for name, us in totals.most_common(PROFILE_TOP)
        ],
    }


# Perfetto threads that repeat the kernels or ops of other threads (XLA's annotations).
_ANNOTATION_THREADS = ("XLA Modules", "XLA Ops", "Source code", "TensorFlow Name Scope",
                       "Framework Name Scope", "Framework Ops", "Steps", "XLA TraceMe")


# Runtime events that enclose the ops (XLA's CPU thunk executor, TensorFlow's executor).
_WRAPPERS = ("ThunkExecutor::", "ExecutorState::", "ExecutorDoneCallback")


def top_trace_events(trace, steps):
    """Top events by total duration in a JAX Perfetto trace (`jax.profiler`, Chrome JSON).

    On a GPU: the kernels on the device's stream threads. On a CPU: XLA's ops on its runtime
    threads (Python's own thread and XLA's annotation threads left out).
    """
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    processes, threads = {}, {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            processes[e.get("pid")] = e["args"]["name"]
        elif e.get("ph") == "M" and e.get("name") == "thread_name":
            threads[(e.get("pid"), e.get("tid"))] = e["args"]["name"]
    streams = {
        key for key, thread in threads.items()
        if thread.startswith("Stream") and processes.get(key[0], "").startswith("/device:")
    }

    def counted(key):
        if streams:
            return key in streams
        thread = threads.get(key, "")
        return thread != "python" and not thread.startswith(_ANNOTATION_THREADS)

    totals, counts = collections.Counter(), collections.Counter()
    for e in events:
        if e.get("name", "").startswith(_WRAPPERS):
            continue
        if e.get("ph") == "X" and counted((e.get("pid"), e.get("tid"))):
            totals[e["name"]] += float(e.get("dur", 0.0))
            counts[e["name"]] += 1
    return _top(totals, counts, steps, "GPU stream kernels" if streams else "XLA CPU ops")


def top_torch_events(averages, steps, cuda):
    """Top ops of `torch.profiler` `key_averages()` by self device (GPU) or CPU time."""
    totals, counts = collections.Counter(), collections.Counter()
    for event in averages:
        if cuda:
            us = getattr(event, "self_device_time_total", None)
            if us is None:
                us = getattr(event, "self_cuda_time_total", 0.0)
        else:
            us = event.self_cpu_time_total
        if us:
            totals[event.key] += us
            counts[event.key] += event.count
    return _top(totals, counts, steps, "CUDA kernels" if cuda else "ATen ops (CPU)")


def top_xplane_events(folder, steps):
    """Top ops of a `tf.profiler` trace (`.xplane.pb`): device planes, else host op lines."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    totals, counts = collections.Counter(), collections.Counter()
    paths = glob.glob(os.path.join(folder, "**", "*.xplane.pb"), recursive=True)
    space = xplane_pb2.XSpace()
    with open(sorted(paths)[-1], "rb") as f:
        space.ParseFromString(f.read())
    device = [p for p in space.planes if p.name.startswith("/device:GPU")]
    for plane in device or [p for p in space.planes if p.name.startswith("/host:CPU")]:
        names = {k: v.name for k, v in plane.event_metadata.items()}
        for line in plane.lines:
            if not device and "Op" not in line.name and "tf_" not in line.name:
                continue
            if device and not line.name.startswith("Stream"):
                continue
            for event in line.events:
                name = names.get(event.metadata_id, "?")
                if name.startswith(_WRAPPERS):
                    continue
                totals[name] += event.duration_ps / 1e6
                counts[name] += 1
    return _top(totals, counts, steps, "GPU stream kernels" if device else "TensorFlow CPU ops")


# --- roofline ----------------------------------------------------------------------------------


def _roofline(framework, size=2048, runs=7, precision="fp32"):
    """`(median GFLOP/s of a size^3 matmul, device)` in fp32, or bf16 for `precision="bf16"`."""
    import numpy as np

    a = np.random.default_rng(0).standard_normal((size, size), dtype=np.float32)
    device = "cpu"
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

        device = jax.devices()[0].platform
        t = jax.device_put(a)
        if precision == "bf16":
            t = t.astype(jnp.bfloat16)
        f = jax.jit(lambda m: m @ m)
        step = lambda: f(t).block_until_ready()  # noqa: E731
    else:
        import tensorflow as tf

        device = "gpu" if tf.config.list_physical_devices("GPU") else "cpu"
        t = tf.constant(a)
        if precision == "bf16":
            t = tf.cast(t, tf.bfloat16)
        f = tf.function(lambda m: tf.matmul(m, m), jit_compile=True)
        step = lambda: f(t).numpy()  # noqa: E731
    times = _time_steps(step, 2, runs)
    return 2 * size**3 / statistics.median(times) / 1e9, device


def with_flash_attention(attention, flash):
    """`attention` (`keras.ops.dot_product_attention`) with its `flash_attention` argument
    set, for an A/B of the attention kernel (`--flash-attention`): on JAX, True asks for cuDNN's
    fused attention (an error says why it cannot run), False for XLA's own; None, Keras'
    default, lets Keras choose. keras_vit calls the op through `keras.ops`, so the worker
    replaces it there, in its own process only."""

    def call(*args, **kwargs):
        kwargs["flash_attention"] = flash
        return attention(*args, **kwargs)

    return call


def worker(args):
    global CLOCK
    if importlib.util.find_spec("keras_vit") is None:  # not installed: this checkout's copy
        sys.path.append(REPO)
    if args.clock == "process":
        CLOCK = time.process_time
    if args.threads:
        _limit_threads(args.threads, args.backend)
    if args.lib == "roofline":
        gflops, device = _roofline(args.backend, args.roofline_size, precision=args.precision)
        print("RESULT " + json.dumps({"gflops": gflops, "device": device}), flush=True)
        return
    spec = model_spec(args.model)
    if args.flash_attention != "auto" and args.lib in KERAS_LIBRARIES:
        import keras

        keras.ops.dot_product_attention = with_flash_attention(
            keras.ops.dot_product_attention, args.flash_attention == "true")
    if args.task == "fit":
        times, info = _run_fit(args.lib, spec, args)
    elif args.lib in KERAS_LIBRARIES:
        times, info = _run_keras(args.lib, spec, args)
    else:
        times, info = _run_torch(args.lib, spec, args)
    import resource

    # Peak resident memory of the whole process (model, activations, framework), in MiB.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps({"times": times, "peak_rss_mib": peak, **info}), flush=True)


# --------------------------------------------------------------------------------------------
# Driver


def _worker_command(lib, backend, task, model, batch, args):
    cmd = [
        sys.executable, os.path.abspath(__file__), "--worker",
        "--lib", lib, "--backend", backend, "--tasks", task, "--model", model,
        "--batch", str(batch), "--image-size", str(args.image_size),
        "--num-classes", str(args.num_classes),
        "--warmup", str(args.warmup), "--runs", str(args.runs),
        "--clock", args.clock, "--precision", args.precision,
        "--roofline-size", str(args.roofline_size),
        "--steps-per-execution", str(args.steps_per_execution),
        "--fit-input", args.fit_input, "--fit-epochs", str(args.fit_epochs),
        "--fit-steps", str(args.fit_steps),
    ]
    if args.jit_compile is not None:
        cmd += ["--jit-compile", str(args.jit_compile).lower()]
    if args.flash_attention != "auto":
        cmd += ["--flash-attention", args.flash_attention]
    if args.peer_compile is not None:
        cmd += ["--peer-compile", str(args.peer_compile).lower()]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if args.profile:
        cmd += ["--profile", os.path.abspath(args.profile),
                "--profile-steps", str(args.profile_steps)]
    return cmd


def _spawn(lib, backend, task, args, model="B/16", batch=1, timeout=None):
    """Runs one worker process: `(result or None, error or None, wall seconds)`.

    With `timeout` (seconds), the worker and every process it started (torch.compile's
    compile workers, say) are killed when it runs out, and the error says so."""
    env = dict(os.environ)
    if lib in KERAS_LIBRARIES:
        env["KERAS_BACKEND"] = backend
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    cmd = _worker_command(lib, backend, task, model, batch, args)
    start = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=REPO, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        seconds = time.monotonic() - start
        return None, f"killed at the deadline after {seconds:.0f} s", seconds
    seconds = time.monotonic() - start
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):]), None, seconds
    return None, error_summary(stderr or stdout) or f"exit code {proc.returncode}", seconds


_EXCEPTION_LINE = re.compile(r"^[\w.]*(Error|Exception|Exit|Interrupt)(:|$)")


def error_summary(text):
    """What a failed worker's output says went wrong, in one line: when Keras wrapped the error
    of a layer's call, the reason it gives (the lines before "Arguments received by") first,
    then the last exception line of the traceback; else the output's last three lines."""
    lines = [line.strip() for line in re.sub(r"\x1b\[[0-9;]*m", "", text).splitlines()]
    lines = [line for line in lines if line]
    exception = [line for line in lines if _EXCEPTION_LINE.match(line)]
    if not exception:
        return " | ".join(lines[-3:])
    parts = []
    calls = [i for i, line in enumerate(lines) if "Exception encountered when calling" in line]
    if calls:
        reason = []
        for line in lines[calls[-1] + 1:]:
            if line.startswith("Arguments received by"):
                break
            reason.append(line)
        parts += reason
    return " | ".join(parts + [exception[-1][:200]])


# A worker's wall time before anything is known of it in this run (import, build, compile and
# the steps): the Keras rows' own processes took 6-13 s and timm's torch.compiled ones 22-27 s
# for ViT-B/16 on a 2-core CPU (2026-11-27); a GPU adds autotuning and kernel compilation.
FIRST_ROW_ESTIMATE_S = {"keras_vit": 60.0, "keras_vit_remat": 60.0, "keras_hub": 60.0,
                        "timm": 90.0, "hf": 90.0}


def row_estimate(seen, lib, backend, task, batch):
    """Seconds a worker is expected to take: 1.25x the longest this run has seen of the same
    library, backend and task (at any batch; times the square root of the batch ratio when this
    batch is larger), else `FIRST_ROW_ESTIMATE_S`."""
    same = [(key[3], s) for key, s in seen.items() if key[:3] == (lib, backend, task)]
    if not same:
        return FIRST_ROW_ESTIMATE_S.get(lib, 60.0)
    return 1.25 * max(s * max(1.0, batch / seen_batch) ** 0.5 for seen_batch, s in same)


def _left(deadline):
    """Seconds until `deadline` (a Unix time), or None without one."""
    return None if deadline is None else deadline - time.time()


def _installed(module):
    return importlib.util.find_spec(module) is not None


def _jobs(args):
    """(lib, backend) pairs: Keras libraries on each backend, PyTorch peers on torch only."""
    jobs = []
    for lib in args.libs:
        if lib in KERAS_LIBRARIES:
            jobs += [(lib, backend) for backend in args.backends]
        elif "torch" in args.backends:
            jobs.append((lib, "torch"))
    return jobs


def missing_module(lib, backend):
    """The module a (library, backend) job needs and this Python lacks, or None."""
    for module in (MODULES.get(lib), backend):
        if module and not _installed(module):
            return module
    return None


def _fmt_seconds(value):
    """A row's worker wall time (import, build, compile, steps, profile): the longest process."""
    return "" if not value else f"{max(value):.0f}"


def _fmt_mib(value):
    return "" if value is None else f"{value:.0f}"


def format_table(rows, roofline, label="% roofline"):
    head = (
        f"| workload | library | backend | images/s | GFLOP/s | {label} "
        "| keras_vit / best peer (same backend) | keras_vit / timm | peak RSS MiB "
        "| peak device MiB | process s | note |"
    )
    lines = [head, "|" + "---|" * 12]
    for row in rows:
        prefix = f"| {row['task']} | {row['lib']} | {row['backend']} "
        if row.get("skipped") or row.get("error"):
            note = row.get("skipped") or f"failed: {row['error'][:160]}"
            lines.append(prefix + "| | | | | | | | | " + note + " |")
            continue
        lines.append(
            prefix + f"| {row['images_per_s']:.2f}{_range(row)} "
            f"| {row['gflops']:.1f} | {100 * row['gflops'] / roofline:.1f}% "
            f"| {row.get('vs_best_peer', '')} | {row.get('vs_timm', '')} "
            f"| {row.get('peak_rss_mib', 0):.0f} | {_fmt_mib(row.get('peak_device_mib'))} "
            f"| {_fmt_seconds(row.get('process_s'))} | {row.get('note', '')} |"
        )
    return "\n".join(lines)


def _range(row):
    low, high = row.get("images_per_s_range") or (None, None)
    return f" [{low:.2f}-{high:.2f}]" if low is not None and high > low else ""


def _ratios(rows):
    ok = [r for r in rows if "images_per_s" in r]
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


def _summarise(row, runs, task, batch, flops):
    """Fills a row from its processes' results: median of medians, range, GFLOP/s, notes."""
    per_process = [statistics.median(r["times"]) for r in runs]
    median = statistics.median(per_process)
    row.update({k: v for k, v in runs[0].items() if k not in ("times", "profile")})
    row["times"] = [r["times"] for r in runs]
    row["process_s"] = [r["process_s"] for r in runs if r.get("process_s") is not None]
    row["peak_rss_mib"] = max(r["peak_rss_mib"] for r in runs)
    devices = [r["peak_device_mib"] for r in runs if r.get("peak_device_mib") is not None]
    row["peak_device_mib"] = max(devices) if devices else None
    bare = batch / median
    if task == "fit":
        fits = [r["fit_images_per_s"] for r in runs if r.get("fit_images_per_s")]
        row["bare_images_per_s"] = bare
        row["images_per_s"] = statistics.median(fits) if fits else float("nan")
        row["images_per_s_range"] = [min(fits), max(fits)] if fits else None
        row["note"] = (
            f"model.fit ({row['fit_input']}, {row['fit_plan']}, epochs after the first) / "
            f"bare train_on_batch {bare:.2f} img/s = {row['images_per_s'] / bare:.2f}"
        )
    else:
        row["images_per_s"] = bare
        row["images_per_s_range"] = [batch / max(per_process), batch / min(per_process)]
    row["median_s"] = batch / row["images_per_s"]
    row["gflops"] = flops * row["images_per_s"] / 1e9
    row["profiles"] = [r["profile"] for r in runs if r.get("profile")]


def merged_table(paths):
    """One Markdown table of the rows of several `--json` files, the keras_vit / peer ratios
    recomputed over all of them; files that do not exist (a run that never started) are named."""
    rows, peaks, missing = [], set(), []
    for path in paths:
        if not os.path.exists(path):
            missing.append(path)
            continue
        with open(path) as f:
            data = json.load(f)
        peaks.add(data.get("peak_tflops"))
        for row in data["rows"]:
            row = {k: v for k, v in row.items() if k not in ("vs_best_peer", "vs_timm")}
            rows.append(row)
    peaks.discard(None)
    if len(peaks) > 1:
        raise ValueError(f"the files were measured against different peaks: {sorted(peaks)}")
    _ratios(rows)
    lines = []
    if peaks:
        peak = peaks.pop()
        lines.append(f"MFU: model FLOPs / {peak:g} TFLOP/s")
        lines.append(format_table(rows, peak * 1000, "MFU"))
    else:
        measured = [r["gflops"] for r in rows if "gflops" in r]
        lines.append("no peak in these files: % of the fastest row")
        lines.append(format_table(rows, max(measured, default=1.0), "% of fastest"))
    lines += [f"(not found: {path})" for path in missing]
    return "\n".join(lines)


def format_profile(row):
    """The top kernels of a row's first profiled process, as a Markdown table."""
    profile = row["profiles"][0]
    lines = [
        f"Top {len(profile['top'])} by self time, {row['task']} {row['lib']} {row['backend']} "
        f"({profile['source']}, {profile['total_ms_per_step']:.2f} ms per step in all):",
        "| op / kernel | ms per step | share | calls per step |",
        "|---|---|---|---|",
    ]
    for item in profile["top"]:
        lines.append(f"| `{item['name'][:90]}` | {item['ms_per_step']:.3f} "
                     f"| {100 * item['share']:.1f}% | {item['calls_per_step']:.0f} |")
    return "\n".join(lines)


def _parse_jit(text):
    return {"true": True, "false": False, "auto": "auto"}[text.lower()]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["infer", "train"], choices=list(TASKS),
                        help="workloads (default: infer train; fit is asked for by name)")
    parser.add_argument("--libs", nargs="+", default=list(LIBRARIES),
                        choices=[*LIBRARIES, "keras_vit_remat"])
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=list(BACKENDS))
    parser.add_argument("--model", default=None,
                        help="variant code of every workload, e.g. B/16 or mu/8 (default: "
                        "infer B/16, train and fit S/16)")
    parser.add_argument("--train-variant", default=None,
                        help="model of the train and fit workloads only (default S/16)")
    parser.add_argument("--image-size", type=int, default=IMAGE_SIZE)
    parser.add_argument("--num-classes", type=int, default=CLASSES)
    parser.add_argument("--batch-infer", type=int, nargs="+", default=None,
                        help="inference batch sizes, one row each (default 8)")
    parser.add_argument("--batch-train", type=int, nargs="+", default=None,
                        help="training (and fit) batch sizes, one row each (default 16)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps (include compiling)")
    parser.add_argument("--runs", type=int, default=5, help="timed steps; the median is reported")
    parser.add_argument("--repeats", type=int, default=1,
                        help="processes per row, run in turn; the median of their medians is "
                        "reported, with the range")
    parser.add_argument("--jit-compile", type=_parse_jit, default=None,
                        help="passed to Keras' model.compile (default: Keras' own, 'auto'); "
                        "true also torch.compiles the PyTorch peers")
    parser.add_argument("--peer-compile", type=lambda t: _parse_jit(t) is True, default=None,
                        help="torch.compile the PyTorch peers (true/false; default: when "
                        "--jit-compile is true)")
    parser.add_argument("--flash-attention", choices=("auto", "true", "false"), default="auto",
                        help="Keras rows: the flash_attention argument of every "
                        "keras.ops.dot_product_attention call (auto: Keras' choice; on JAX, true "
                        "is cuDNN's fused attention, false XLA's; keras_vit on PyTorch calls "
                        "F.scaled_dot_product_attention and is not affected)")
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
    parser.add_argument("--skip-roofline", action="store_true",
                        help="measure no roofline (the %% column then needs --peak-tflops)")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="the accelerator's spec peak: the %% column becomes model FLOPs "
                        f"utilisation (MFU) against it (default on a GPU with bf16: "
                        f"{H100_BF16_TFLOPS:g}, an H100/H200's dense bf16 peak)")
    parser.add_argument("--steps-per-execution", type=int, default=1,
                        help="fit: Keras' steps_per_execution (the recipe's flag)")
    parser.add_argument("--fit-input", choices=("auto", "recipe", "arrays"), default="auto",
                        help="fit: the recipe's tf.data pipeline on --dataset synthetic "
                        "(recipe), in-memory NumPy arrays (arrays), or recipe when TensorFlow "
                        "is installed (auto)")
    parser.add_argument("--fit-epochs", type=int, default=3,
                        help="fit: epochs (the first, with compilation, is not counted)")
    parser.add_argument("--fit-steps", type=int, default=20, help="fit: steps per epoch")
    parser.add_argument("--profile", metavar="DIR", default=None,
                        help="profile every row after its timed steps; traces go to DIR and "
                        "each row's top kernels are printed")
    parser.add_argument("--profile-steps", type=int, default=3)
    parser.add_argument("--json", help="also write the rows to this JSON file (rewritten after "
                        "every row, so that a run cut short leaves what it measured)")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="seconds this run may take: no worker is started that is not "
                        "expected to end in time (`row_estimate`), a running one is killed "
                        "when the time is up, and the rows left out say so")
    parser.add_argument("--deadline", type=float, default=None,
                        help="the same as an absolute Unix time (several runs of one script "
                        "sharing one limit); the earlier of the two applies")
    parser.add_argument("--from-json", nargs="+", metavar="FILE", default=None,
                        help="run nothing: print one table of the rows of these --json files "
                        "(earlier runs of one session), ratios recomputed across them")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--lib", help=argparse.SUPPRESS)
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        args.task = args.tasks[0]
        return worker(args)
    if args.from_json:
        return print(merged_table(args.from_json))
    deadline = args.deadline
    if args.budget_s is not None:
        deadline = min(deadline or float("inf"), time.time() + args.budget_s)
    if args.runs < 5:
        print(f"note: --runs {args.runs} < 5; the issue asks for medians of at least 5 runs")

    roofs, devices = {}, set()
    if not args.skip_roofline:
        frameworks = [f for f in ("numpy", "torch", "jax", "tensorflow") if _installed(f)]
        if args.precision == "bf16":
            frameworks.remove("numpy")
        for framework in frameworks:
            result, error, _ = _spawn("roofline", framework, "infer", args,
                                      timeout=_left(deadline))
            if result:
                roofs[framework] = result["gflops"]
                devices.add(result["device"])
            else:
                print(f"roofline {framework} failed: {error}")
        if roofs:
            print(f"matmul roofline ({args.roofline_size}^3 {args.precision}, GFLOP/s): "
                  + ", ".join(f"{k} {v:.1f}" for k, v in roofs.items())
                  + f" -> {max(roofs.values()):.1f}; devices: {', '.join(sorted(devices))}")
    gpu = bool(devices - {"cpu"})
    peak = args.peak_tflops
    if peak is None and gpu and args.precision == "bf16":
        peak = H100_BF16_TFLOPS
    if peak is None and not roofs:
        parser.error("--skip-roofline needs --peak-tflops (the %% column's reference)"
                     if args.skip_roofline else
                     "the roofline measured nothing (above: why); give --peak-tflops")
    reference = peak * 1000 if peak else max(roofs.values())

    rows, seen = [], {}

    def save():
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"roofline": roofs, "peak_tflops": peak, "rows": rows}, f, indent=1)

    for task in args.tasks:
        default_model, default_batch = TASK_DEFAULTS[task]
        model = args.model or (args.train_variant if task != "infer" else None) or default_model
        spec = model_spec(model)
        batches = (args.batch_infer if task == "infer" else args.batch_train) or [default_batch]
        flops = workload_flops(task, spec, args.image_size, args.num_classes)
        jobs = _jobs(args)
        if task == "fit":
            jobs = [(lib, backend) for lib, backend in jobs if lib in KERAS_LIBRARIES]
        for batch in batches:
            name = f"{task} {model} b{batch}"
            results = {job: [] for job in jobs}
            errors = {}
            for job in jobs:
                missing = missing_module(*job)
                if missing:
                    errors[job] = f"skipped: {missing} not installed"
            # Repeats go round the jobs in turn, so that a slow spell of the machine hits every
            # library alike instead of one library's processes.
            for repeat in range(args.repeats):
                for lib, backend in jobs:
                    if (lib, backend) in errors:
                        continue
                    need = row_estimate(seen, lib, backend, task, batch)
                    left = _left(deadline)
                    if left is not None and left < need:
                        reason = (f"out of time (expected {need:.0f} s, "
                                  f"{max(left, 0):.0f} s left)")
                        if results[(lib, backend)]:  # the row keeps the processes it ran
                            print(f"  {name:<16} {lib:<15} {backend:<11} {repeat + 1}/"
                                  f"{args.repeats} not run: {reason}", flush=True)
                        else:
                            errors[(lib, backend)] = f"skipped: {reason}"
                        continue
                    result, error, seconds = _spawn(lib, backend, task, args, model, batch,
                                                    timeout=left)
                    seen[(lib, backend, task, batch)] = max(
                        seconds, seen.get((lib, backend, task, batch), 0.0))
                    if result:
                        result["process_s"] = seconds
                    if error:
                        errors[(lib, backend)] = error
                        status = error
                    elif task == "fit":
                        status = (f"fit {result.get('fit_images_per_s')} img/s, bare "
                                  f"{batch / statistics.median(result['times']):.2f} img/s")
                        results[(lib, backend)].append(result)
                    else:
                        results[(lib, backend)].append(result)
                        status = f"{batch / statistics.median(result['times']):.2f} img/s"
                    print(f"  {name:<16} {lib:<15} {backend:<11} {repeat + 1}/{args.repeats} "
                          f"{status} ({seconds:.0f} s)", flush=True)
            for lib, backend in jobs:
                row = {"task": name, "lib": lib, "backend": backend}
                error = errors.get((lib, backend))
                if error and error.startswith("skipped:"):
                    row["skipped"] = error
                    print(f"  {name:<16} {lib:<15} {backend:<11} {error}")
                elif error:
                    row["error"] = error
                else:
                    _summarise(row, results[(lib, backend)], task, batch, flops)
                rows.append(row)
                save()
    _ratios(rows)
    print()
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
          f"medians of {args.runs} steps after {args.warmup} warm-up steps, "
          f"{args.repeats} process(es) each (median of medians; range in brackets); "
          f"{args.precision}, {args.image_size} px, {args.num_classes} classes")
    label = "% roofline"
    if peak:
        label = "MFU"
        print(f"MFU: model FLOPs / {peak:g} TFLOP/s")
    print(format_table(rows, reference, label))
    for row in rows:
        if row.get("profiles"):
            print()
            print(format_profile(row))
    save()


if __name__ == "__main__":
    main()
