"""Per-step host overhead of keras_vit beside timm and KerasHub, measured on a CPU (issue 32).

ViT-B/16's graph (12 blocks, 12 heads, AdamW) at a width so small that the arithmetic is
negligible (96 wide, MLP 384, 32 px images, batch 2, 10 classes): what a step costs is then
framework overhead (Python dispatch, layer calls, optimizer loops, conversions), the cost that
decides a fast GPU's speed once the kernels are quick.

One process, one Keras backend (`KERAS_BACKEND`). Every contestant is built and warmed up, then
the timed rounds run each contestant's step once in turn (alternating, so load from other jobs
falls on all of them alike), and the median ms per step is reported:

- keras_vit (`keras_vit.ViT`, the current backend):
  `train_on_batch`, `fit` (over an in-memory dataset of `--fit-steps` batches, ms per batch,
  `fit (1 step)` for its fixed per-call cost; with `--runner-callbacks` also with the recipe
  runner's callbacks), `predict_on_batch`, the model called directly
  (`model(x)`), `predict` (over the same in-memory batches, ms per batch); on PyTorch also a
  `direct step` (forward, loss, `backward()`, `optimizer.apply`: the step without Keras' trainer);
- KerasHub's `ViTBackbone` + a Dense head (`--peers keras_hub`): `train_on_batch`,
  `predict_on_batch`, on the same backend;
- timm's `VisionTransformer` in eager PyTorch (`--peers timm`): forward, loss, backward,
  `AdamW.step()`; inference under `torch.inference_mode()`; `timm_compile`: the same under
  `torch.compile` (inductor; compiles for a minute or more on 2 cores).

Ratios are keras_vit over the peer (lower is better): `train_on_batch` over the peer's training
step, `predict_on_batch` over its inference, `fit` over `train_on_batch`.

    KERAS_BACKEND=torch python benchmarks/bench_overhead.py                 # the issue's table
    KERAS_BACKEND=jax python benchmarks/bench_overhead.py --peers keras_hub timm
    KERAS_BACKEND=torch python benchmarks/bench_overhead.py --profile cprofile --rounds 20
    KERAS_BACKEND=torch python benchmarks/bench_overhead.py --explain       # torch.compile breaks
    KERAS_BACKEND=torch python benchmarks/bench_overhead.py --optimizer-apply   # AdamW alone
    KERAS_BACKEND=torch python benchmarks/bench_overhead.py --width 768 --mlp 3072 --image-size 224

`--threads` (default 1) pins the process to that many cores with one intra-op thread each in
every framework, so that a shared machine's other jobs disturb the measurement less; the
overhead being measured is single-threaded Python anyway. `--portable` runs keras_vit's
portable `keras.ops` path on PyTorch (`KERAS_VIT_TORCH_KERNELS=0`) instead of its fast path,
`--compare-portable` both, alternated, as two contestants (`keras_vit` and
`keras_vit_portable`, two models with the same weights). keras_vit trains with
`keras_vit.training.FusedAdamW` (what `build_optimizer` returns; `--optimizer keras` for
`keras.optimizers.AdamW`, which `VisionTransformer.compile` gives the same fused update since
issue 46; `--optimizer keras-own` for Keras' own update, `compile(fused_optimizer=False)`),
`--compare-optimizer` adds `keras-own` (or `fused` beside it) as `keras_vit_<name>`.
`--compare-layer-calls` adds `keras_vit_layer_calls`: the model's graph walk calling every
layer through Keras' `Layer.__call__` (as before `VisionTransformer.call`'s PyTorch walk),
the blocks on their fast path (the A/B of that walk).
"""

import argparse
import cProfile
import io
import os
import platform
import pstats
import statistics
import sys
import time

from _reference_imports import import_timm

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS = ("timm", "timm_compile", "keras_hub")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, default=96, help="hidden_dim")
    parser.add_argument("--depth", type=int, default=12, help="num_layers")
    parser.add_argument("--heads", type=int, default=12, help="num_heads")
    parser.add_argument("--mlp", type=int, default=384, help="mlp_dim")
    parser.add_argument("--patch", type=int, default=16)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=30, help="timed rounds (steps per row)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed rounds first")
    parser.add_argument("--fit-steps", type=int, default=10, help="batches per fit/predict call")
    parser.add_argument("--tasks", nargs="+", choices=("train", "infer"),
                        default=["train", "infer"])
    parser.add_argument("--peers", nargs="*", choices=PEERS, default=None,
                        help="default: timm on every backend, keras_hub on JAX and TensorFlow")
    parser.add_argument("--no-fit", action="store_true", help="skip fit / predict rows")
    parser.add_argument("--runner-callbacks", action="store_true",
                        help="also fit with the recipe runner's callbacks (CSV log, "
                        "TensorBoard, throughput; no checkpoints or backup)")
    parser.add_argument("--jit-compile", choices=("auto", "true", "false"), default="auto",
                        help="keras_vit's and KerasHub's compile(jit_compile=...)")
    parser.add_argument("--optimizer", choices=("fused", "keras", "keras-own"), default="fused",
                        help="keras_vit's AdamW: keras_vit.training.FusedAdamW (what "
                        "build_optimizer returns), keras.optimizers.AdamW (fused by "
                        "VisionTransformer.compile on PyTorch) or keras-own (Keras' update: "
                        "compile(fused_optimizer=False))")
    parser.add_argument("--compare-optimizer", action="store_true",
                        help="also keras_vit with the other AdamW (keras_vit_<optimizer>), "
                        "same weights, alternated")
    parser.add_argument("--optimizer-apply", action="store_true",
                        help="time optimizer.apply alone (FusedAdamW against Keras' AdamW on "
                        "the model's variables, clipnorm 1, weight decay 0.05, with and "
                        "without EMA), then exit")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--gelu", choices=("tanh", "exact"), default="tanh",
                        help="keras_vit's MLP GELU: tanh (the official checkpoints', keras_vit's "
                        "default) or exact erf (timm's and KerasHub's)")
    parser.add_argument("--portable", action="store_true",
                        help="keras_vit's portable keras.ops path on PyTorch")
    parser.add_argument("--compare-portable", action="store_true",
                        help="PyTorch: fast path and portable path side by side")
    parser.add_argument("--compare-layer-calls", action="store_true",
                        help="PyTorch: also keras_vit with Keras' own per-layer calls in the "
                        "model's graph walk (keras_vit_layer_calls: the blocks' fast path "
                        "without run_graph), same weights, alternated")
    parser.add_argument("--profile", choices=("cprofile", "torch"),
                        help="profile keras_vit's train_on_batch and predict_on_batch after timing")
    parser.add_argument("--profile-top", type=int, default=25)
    parser.add_argument("--explain", action="store_true",
                        help="PyTorch: torch._dynamo.explain of keras_vit's train and predict "
                        "steps (graph breaks), then exit")
    return parser.parse_args(argv)


# --- set-up ------------------------------------------------------------------------------------


def limit_threads(threads, backend):
    """This process on `threads` cores, one intra-op pool of that size in every framework."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:threads])
    os.environ["OMP_NUM_THREADS"] = os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
    if threads == 1:
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = flags + " --xla_cpu_multi_thread_eigen=false"
    try:
        import torch

        torch.set_num_threads(threads)
        torch.set_num_interop_threads(1)
    except (ImportError, RuntimeError):
        pass
    if backend == "tensorflow":
        import tensorflow as tf

        try:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(1)
        except RuntimeError:  # TensorFlow already initialised (a second run in one process)
            pass


def sync(value):
    """Waits for an asynchronously dispatched result (JAX); a no-op elsewhere."""
    leaves = value if isinstance(value, (list, tuple)) else [value]
    for leaf in leaves:
        if hasattr(leaf, "block_until_ready"):
            leaf.block_until_ready()
    return value


def batches(args, count):
    """`count` batches of random images `(B, H, W, 3)` and integer labels, as NumPy."""
    import numpy as np

    rng = np.random.default_rng(0)
    size = args.image_size
    x = rng.uniform(-1, 1, (count * args.batch, size, size, 3)).astype("float32")
    y = rng.integers(0, args.classes, count * args.batch).astype("int32")
    return x, y


def build_keras_vit(args):
    import keras_vit

    return keras_vit.ViT(
        f"B/{args.patch}", image_size=args.image_size, num_classes=args.classes,
        num_layers=args.depth, hidden_dim=args.width, mlp_dim=args.mlp, num_heads=args.heads,
        approximate_gelu=args.gelu == "tanh",
    )


def build_keras_hub(args):
    import keras
    import keras_hub

    backbone = keras_hub.models.ViTBackbone(
        image_shape=(args.image_size, args.image_size, 3), patch_size=args.patch,
        num_layers=args.depth, num_heads=args.heads, hidden_dim=args.width, mlp_dim=args.mlp,
    )
    inputs = keras.Input((args.image_size, args.image_size, 3))
    logits = keras.layers.Dense(args.classes)(backbone(inputs)[:, 0])
    return keras.Model(inputs, logits)


def compile_keras(model, args, optimizer="keras"):
    """`model` compiled with AdamW (lr 1e-4, Keras' default weight decay 0.004, no clipping):
    `optimizer="fused"` is keras_vit's `FusedAdamW`, `"keras"` Keras' own `AdamW` (a keras_vit
    model fuses it on PyTorch), `"keras-own"` Keras' `AdamW` with Keras' own update."""
    import keras

    from keras_vit.training.optimizers import FusedAdamW

    jit = {"auto": "auto", "true": True, "false": False}[args.jit_compile]
    cls = FusedAdamW if optimizer == "fused" else keras.optimizers.AdamW
    own = {"fused_optimizer": False} if optimizer == "keras-own" else {}  # keras_vit models only
    model.compile(
        optimizer=cls(learning_rate=1e-4),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=jit,
        **own,
    )
    return model


# --- contestants: name -> (task, step function, batches per call) -------------------------------


def keras_steps(lib, model, args, fit=True):
    import keras

    x_np, y_np = batches(args, 1)
    x, y = keras.ops.convert_to_tensor(x_np), keras.ops.convert_to_tensor(y_np)
    steps = {}
    if "train" in args.tasks:
        steps[f"{lib} train_on_batch"] = ("train", lambda: model.train_on_batch(x, y), 1)
        if keras.backend.backend() == "torch" and lib.startswith("keras_vit"):
            steps[f"{lib} direct step"] = ("train", torch_direct_step(model, x, y), 1)
    if "infer" in args.tasks:
        steps[f"{lib} predict_on_batch"] = ("infer", lambda: model.predict_on_batch(x), 1)
        steps[f"{lib} model(x)"] = ("infer", lambda: sync(model(x, training=False)), 1)
    if fit and not args.no_fit:
        n = args.fit_steps
        xs, ys = batches(args, n)
        if "train" in args.tasks:
            steps[f"{lib} fit"] = ("train", lambda: model.fit(
                xs, ys, batch_size=args.batch, epochs=1, shuffle=False, verbose=0), n)
            steps[f"{lib} fit (1 step)"] = ("train", lambda: model.fit(
                xs[: args.batch], ys[: args.batch], batch_size=args.batch, epochs=1,
                shuffle=False, verbose=0), 1)
            if args.runner_callbacks:
                callbacks = runner_callbacks(args)
                steps[f"{lib} fit+callbacks"] = ("train", lambda: model.fit(
                    xs, ys, batch_size=args.batch, epochs=1, shuffle=False, verbose=0,
                    callbacks=callbacks), n)
                steps[f"{lib} fit+callbacks (1 step)"] = ("train", lambda: model.fit(
                    xs[: args.batch], ys[: args.batch], batch_size=args.batch, epochs=1,
                    shuffle=False, verbose=0, callbacks=callbacks), 1)
        if "infer" in args.tasks:
            steps[f"{lib} predict"] = ("infer", lambda: model.predict(
                xs, batch_size=args.batch, verbose=0), n)
    return steps


def runner_callbacks(args):
    """The recipe runner's `fit` callbacks (keras_vit.runner.callbacks), checkpoints off.

    Without the backup: it restores a finished run at the next `fit` call, which would then
    train nothing (it saves per epoch and has no per-step hook).
    """
    import tempfile
    import types

    from keras_vit.runner.backup import AtomicBackupAndRestore
    from keras_vit.runner.callbacks import ThroughputLogger, training_callbacks

    out = tempfile.mkdtemp(prefix="bench_overhead_")
    setup = types.SimpleNamespace(
        out=out, backup_dir=os.path.join(out, "backup"), epochs=1, splits=None,
        throughput=ThroughputLogger(args.batch, args.fit_steps),
    )
    callbacks = training_callbacks(setup, {"checkpoints": False}, validation=False)
    return [c for c in callbacks if not isinstance(c, AtomicBackupAndRestore)]


def torch_direct_step(model, x, y):
    """PyTorch backend: forward, loss, backward, `optimizer.apply` without Keras' trainer."""
    variables = model.trainable_variables
    loss_fn = model.loss

    def step():
        for variable in variables:
            variable.value.grad = None
        logits = model(x, training=True)
        loss = loss_fn(y, logits)
        loss.backward()
        model.optimizer.apply([v.value.grad for v in variables], variables)
        return float(loss.detach())

    return step


def timm_steps(args, compiled=False):
    import torch

    timm = import_timm()
    torch.manual_seed(0)
    model = timm.models.vision_transformer.VisionTransformer(
        img_size=args.image_size, patch_size=args.patch, embed_dim=args.width, depth=args.depth,
        num_heads=args.heads, mlp_ratio=args.mlp / args.width, num_classes=args.classes,
    )
    x_np, y_np = batches(args, 1)
    x = torch.from_numpy(x_np).permute(0, 3, 1, 2).contiguous()
    y = torch.from_numpy(y_np).long()
    forward = torch.compile(model) if compiled else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    lib = "timm_compile" if compiled else "timm"

    def train():
        model.train()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(forward(x), y)
        loss.backward()
        optimizer.step()
        return loss.item()

    def infer():
        model.eval()
        with torch.inference_mode():
            return forward(x)

    steps = {}
    if "train" in args.tasks:
        steps[f"{lib} train"] = ("train", train, 1)
    if "infer" in args.tasks:
        steps[f"{lib} infer"] = ("infer", infer, 1)
    return steps


def on_portable_path(step):
    """`step` run with keras_vit's layers on their portable `keras.ops` path."""
    from keras_vit.layers.attention import portable_path

    def run():
        with portable_path():
            return step()

    return run


def with_keras_layer_calls(step):
    """`step` run with the model's graph walk calling each layer through Keras' `__call__`
    (what `keras.Model` does), the blocks still on the fast path: the walk's A/B."""
    from unittest import mock

    from keras_vit.layers import _torch_kernels

    def run():
        with mock.patch.object(_torch_kernels, "run_graph", lambda *args: None):
            return step()

    return run


def optimizer_apply_steps(model):
    """`optimizer.apply` alone on `model`'s variables: FusedAdamW and Keras' AdamW, with and
    without EMA, each on its own copy of the variables, fixed random gradients."""
    import keras
    import numpy as np

    from keras_vit.training.optimizers import FusedAdamW

    rng = np.random.default_rng(0)
    grads = [keras.ops.convert_to_tensor(rng.normal(size=v.shape).astype("float32"))
             for v in model.trainable_variables]
    steps = {}
    for ema in (False, True):
        for name, cls in (("FusedAdamW", FusedAdamW), ("keras AdamW", keras.optimizers.AdamW)):
            variables = [keras.Variable(keras.ops.convert_to_numpy(v))
                         for v in model.trainable_variables]
            optimizer = cls(learning_rate=1e-3, weight_decay=0.05, global_clipnorm=1.0,
                            use_ema=ema, ema_momentum=0.999)
            optimizer.build(variables)
            label = f"{name} apply" + (" (ema)" if ema else "")
            steps[label] = ("train", lambda o=optimizer, v=variables: o.apply(grads, v), 1)
    return steps


# --- measuring ---------------------------------------------------------------------------------


def measure(steps, rounds, warmup, clock=time.perf_counter):
    """Alternates the steps: `rounds` timed rounds of one call each; ms per batch per step."""
    for _ in range(warmup):
        for _, step, _ in steps.values():
            step()
    times = {name: [] for name in steps}
    for _ in range(rounds):
        for name, (_, step, per_call) in steps.items():
            start = clock()
            step()
            times[name].append((clock() - start) * 1e3 / per_call)
    return times


def summarise(times, steps):
    """Rows `{name, task, median, low, high}` (ms per batch; low/high: the 25th/75th centiles)."""
    rows = []
    for name, values in times.items():
        q = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
        rows.append({"name": name, "task": steps[name][0], "median": statistics.median(values),
                     "low": q[0], "high": q[-1], "runs": len(values)})
    return rows


def fit_overheads(rows, fit_steps):
    """`fit`'s per-call fixed cost and marginal per-step cost, from `fit` and `fit (1 step)`."""
    by_name = {row["name"]: row["median"] for row in rows}
    out = {}
    for name, per_batch in by_name.items():
        if not name.endswith((" fit", " fit+callbacks")):
            continue
        one = by_name.get(name + " (1 step)")
        if one is None or fit_steps < 2:
            continue
        marginal = (per_batch * fit_steps - one) / (fit_steps - 1)
        out[name] = {"marginal": marginal, "fixed": one - marginal}
    return out


RATIOS = (
    # (numerator suffix, denominator suffixes in order of preference, label)
    ("train_on_batch", ("timm train", "keras_hub train_on_batch"), "train step"),
    ("predict_on_batch", ("timm infer", "keras_hub predict_on_batch"), "inference"),
)


def ratios(rows):
    """keras_vit rows over each peer of the same task, and fit over train_on_batch."""
    by_name = {row["name"]: row["median"] for row in rows}
    out = []
    for lib in sorted({row["name"].split(" ")[0] for row in rows if "keras_vit" in row["name"]}):
        for suffix, peers, _label in RATIOS:
            mine = by_name.get(f"{lib} {suffix}")
            if mine is None:
                continue
            for peer in peers + tuple(p.replace("timm ", "timm_compile ") for p in peers[:1]):
                if peer in by_name:
                    out.append((f"{lib} {suffix}", peer, mine / by_name[peer]))
        for a, b in ((f"{lib} fit", f"{lib} train_on_batch"),
                     (f"{lib} fit+callbacks", f"{lib} train_on_batch"),
                     (f"{lib} predict", f"{lib} predict_on_batch"),
                     (f"{lib} train_on_batch", f"{lib} direct step"),
                     (f"{lib} train_on_batch", "keras_vit_portable train_on_batch"),
                     (f"{lib} train_on_batch", "keras_vit_keras train_on_batch"),
                     (f"{lib} direct step", "keras_vit_keras direct step"),
                     (f"{lib} predict_on_batch", "keras_vit_portable predict_on_batch"),
                     (f"{lib} train_on_batch", "keras_vit_layer_calls train_on_batch"),
                     (f"{lib} predict_on_batch", "keras_vit_layer_calls predict_on_batch")):
            if a in by_name and b in by_name and a != b:
                out.append((a, b, by_name[a] / by_name[b]))
    return out


def format_table(rows):
    lines = ["| task | contestant | ms per batch (median) | 25-75% |", "|---|---|---:|---|"]
    for row in sorted(rows, key=lambda r: (r["task"] != "train", r["name"])):
        lines.append(f"| {row['task']} | {row['name']} | {row['median']:.2f} | "
                     f"{row['low']:.2f}-{row['high']:.2f} |")
    return "\n".join(lines)


def machine_line(backend):
    import keras

    model = platform.processor() or platform.machine()
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    flags = ",".join(f for f in ("avx2", "avx512f", "amx_tile") if f in have)
                    break
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else ()
    versions = [f"keras {keras.__version__}"]
    for module in ("torch", "jax", "tensorflow", "timm", "keras_hub"):
        if module in sys.modules:
            versions.append(f"{module} {getattr(sys.modules[module], '__version__', '?')}")
    return (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; backend {backend}; "
            f"{model} ({flags}), {os.cpu_count()} CPUs; load average "
            f"{' '.join(f'{v:.2f}' for v in load)}; " + ", ".join(versions))


# --- profiles ----------------------------------------------------------------------------------


def cprofile(step, calls, top):
    """The `top` functions of `calls` calls of `step` by cumulative time, and by own time."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        step()
    profiler.disable()
    text = []
    for key in ("tottime", "cumulative"):
        stream = io.StringIO()
        pstats.Stats(profiler, stream=stream).sort_stats(key).print_stats(top)
        text.append(stream.getvalue())
    return "\n".join(text)


def torch_profile(step, calls, top):
    import torch

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            step()
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top)


def explain(model, args):
    """torch._dynamo.explain of keras_vit's forward and of Keras' train step: graph breaks.

    One eager `train_on_batch` first, so that Keras' loss and metric containers are built (their
    first call builds them, which dynamo fails to resume after: "exception table entry start
    instruction has no offset", torch 2.13).
    """
    import keras
    import torch

    x_np, y_np = batches(args, 1)
    x, y = keras.ops.convert_to_tensor(x_np), keras.ops.convert_to_tensor(y_np)
    model.train_on_batch(x, y)
    targets = {
        "forward, model(x, training=False)": (lambda t: model(t, training=False), (x,)),
        "forward, model(x, training=True)": (lambda t: model(t, training=True), (x,)),
        "Keras train_step((x, y))": (model.train_step, ((x, y),)),
        "Keras predict_step(x)": (model.predict_step, (x,)),
    }
    results = {}
    for name, (fn, fn_args) in targets.items():
        torch._dynamo.reset()
        try:
            result = torch._dynamo.explain(fn)(*fn_args)
        except Exception as error:  # noqa: BLE001 - reported, not hidden
            print(f"\n## {name}: dynamo failed: {type(error).__name__}: "
                  f"{str(error).splitlines()[0][:200]}")
            continue
        results[name] = result
        print(f"\n## {name}: {result.graph_count} graphs, "
              f"{result.graph_break_count} graph breaks, {result.op_count} ops")
        reasons = {}
        for item in result.break_reasons:
            frames = [f for f in item.user_stack or [] if "/torch/" not in f.filename]
            frame = frames[-1] if frames else None
            where = f"{frame.filename.split('site-packages/')[-1]}:{frame.lineno}" if frame else "?"
            key = (item.reason.splitlines()[0][:200], where)
            reasons[key] = reasons.get(key, 0) + 1
        for (reason, where), count in sorted(reasons.items(), key=lambda kv: -kv[1]):
            print(f"- {count}x at {where}: {reason}")
        sys.stdout.flush()
    return results


# --- main --------------------------------------------------------------------------------------


def main(argv=None):
    args = parse_args(argv)
    if args.portable:
        os.environ["KERAS_VIT_TORCH_KERNELS"] = "0"
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    limit_threads(args.threads, backend)
    sys.path.insert(0, REPO)
    import keras

    backend = keras.backend.backend()
    peers = args.peers
    if peers is None:
        peers = ["timm"] + (["keras_hub"] if backend in ("jax", "tensorflow") else [])
    keras.utils.set_random_seed(0)
    model = compile_keras(build_keras_vit(args), args, args.optimizer)
    if args.explain:
        if backend != "torch":
            raise SystemExit("--explain needs KERAS_BACKEND=torch")
        explain(model, args)
        return None
    if args.optimizer_apply:
        steps = optimizer_apply_steps(model)
        print(f"# {machine_line(backend)}")
        rows = summarise(measure(steps, args.rounds, args.warmup), steps)
        print(format_table(rows))
        return rows
    steps = keras_steps("keras_vit", model, args)
    # PyTorch twins of the model (same weights) whose steps run wrapped: (flag, name, wrapper).
    twins = (("compare_portable", "keras_vit_portable", on_portable_path),
             ("compare_layer_calls", "keras_vit_layer_calls", with_keras_layer_calls))
    for flag, lib, wrap in twins:
        if not getattr(args, flag):
            continue
        if backend != "torch":
            raise SystemExit(f"--{flag.replace('_', '-')} needs KERAS_BACKEND=torch")
        twin = compile_keras(build_keras_vit(args), args, args.optimizer)
        twin.set_weights(model.get_weights())
        steps.update({
            name: (task, wrap(step), n)
            for name, (task, step, n) in keras_steps(lib, twin, args, fit=False).items()
        })
    if args.compare_optimizer:
        other = "keras-own" if args.optimizer != "keras-own" else "fused"
        twin = compile_keras(build_keras_vit(args), args, other)
        twin.set_weights(model.get_weights())
        steps.update(keras_steps(f"keras_vit_{other}", twin, args, fit=False))
    for peer in peers:
        if peer == "keras_hub":
            hub = compile_keras(build_keras_hub(args), args)
            steps.update(keras_steps("keras_hub", hub, args, fit=False))
        else:
            steps.update(timm_steps(args, compiled=peer == "timm_compile"))
    print(f"# {machine_line(backend)}")
    print(f"# width {args.width}, depth {args.depth}, heads {args.heads}, mlp {args.mlp}, "
          f"{args.image_size} px, patch {args.patch}, batch {args.batch}, "
          f"{args.threads} thread(s), "
          f"{args.rounds} rounds after {args.warmup}; keras_vit jit_compile={args.jit_compile}, "
          f"{args.gelu} GELU"
          + (", portable path" if args.portable else ""))
    times = measure(steps, args.rounds, args.warmup)
    rows = summarise(times, steps)
    print(format_table(rows))
    print()
    for a, b, ratio in ratios(rows):
        print(f"{a} / {b}: {ratio:.2f}x")
    for lib, cost in fit_overheads(rows, args.fit_steps).items():
        print(f"{lib}: {cost['marginal']:.2f} ms per step + {cost['fixed']:.1f} ms per call")
    print(f"# load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    if args.profile:
        profile = cprofile if args.profile == "cprofile" else torch_profile
        for name in ("keras_vit train_on_batch", "keras_vit predict_on_batch"):
            if name in steps:
                print(f"\n## profile: {name}, {args.rounds} calls\n")
                print(profile(steps[name][1], args.rounds, args.profile_top))
    return rows


if __name__ == "__main__":
    main()
