"""CPU serving speed of keras_vit's reduced-precision artefacts beside timm (issue 55).

ViT-S/16 and ViT-B/16 at 224 px, 1,000 classes, random weights (timm's initialisation, seed 0;
no download). keras_vit reads the same timm state dict (`keras_vit.from_timm`), so every
artefact computes the same function and its logits are compared to timm's eager float32 ones.

Contestants (`--phase build` writes them once into `--work`, then `--phase time` times them):

- timm float32 eager (`torch.inference_mode()`);
- timm through ONNX (`torch.onnx.export`, opset 17) in onnxruntime: float32, and int8 by the
  very code keras_vit's `export_onnx(precision="int8")` runs after its trace
  (`keras_vit.export.onnx_precision.convert`: `quantize_dynamic`, and `quantize_static` QDQ on
  the same calibration images; per-channel 7-bit weights): the fair peer;
- keras_vit SavedModel (`export_saved_model(precision=...)`: float32, bfloat16, int8) in
  TensorFlow, `serving_default`;
- keras_vit ONNX (`export_onnx`) in onnxruntime: float32, int8 dynamic, int8 static (QDQ,
  calibrated on `--calibration` random images), float16. The float graph is traced once and
  converted by `onnx_precision.convert`, the code `export_onnx(precision=...)` runs after its
  own trace (one tf2onnx trace of ViT-B/16 took 6 minutes on the loaded machine);
- keras_vit LiteRT (`export_litert`): float32, `dynamic_int8`, `int8` (full integer, calibrated
  on the same images), in ai-edge-litert's interpreter (XNNPACK).

Timing: every contestant of one model in one process, called in turn (round-robin) at each batch
size, `--rounds` rounds after 2 warm-up calls; medians with the quartiles. `--threads` threads in
each runtime (torch, onnxruntime, TensorFlow, LiteRT). Clocks: wall time, and the process's CPU
time (`--clock process`, steadier when other jobs share the cores). The CPU's flags and the load
average are printed with the table.

Commands (2 shared cores; building ViT-B/16's artefacts takes 20-40 minutes, once):

    python benchmarks/bench_serving.py --models S/16 B/16 --phase build
    python benchmarks/bench_serving.py --models S/16 B/16 --phase time --batches 1 8 --rounds 7
    python benchmarks/serving_digits.py     # accuracy of the digits model per precision, QAT
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

os.environ["KERAS_BACKEND"] = "tensorflow"  # the exports trace in this process
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _reference_imports

import numpy as np  # noqa: E402

from keras_vit._import_order import load_triton_before_tensorflow  # noqa: E402

load_triton_before_tensorflow()  # before TensorFlow loads, or timm's import crashes

import keras_vit  # noqa: E402

TIMM_NAMES = {"S/16": "vit_small_patch16_224", "B/16": "vit_base_patch16_224"}
IMAGE = 224
FLAGS_SHOWN = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16",
               "amx_int8")  # fmt: skip


def paths(work, code):
    tag = code.replace("/", "")
    return {
        "state_dict": f"{work}/{tag}/timm.pth",
        "timm_onnx": f"{work}/{tag}/timm_float32.onnx",
        "timm_int8_dynamic": f"{work}/{tag}/timm_int8_dynamic.onnx",
        "timm_int8_static": f"{work}/{tag}/timm_int8_static.onnx",
        "sm_float32": f"{work}/{tag}/saved_model_float32",
        "sm_bfloat16": f"{work}/{tag}/saved_model_bfloat16",
        "sm_int8": f"{work}/{tag}/saved_model_int8",
        "onnx_float32": f"{work}/{tag}/keras_vit_float32.onnx",
        "onnx_int8_dynamic": f"{work}/{tag}/keras_vit_int8_dynamic.onnx",
        "onnx_int8_static": f"{work}/{tag}/keras_vit_int8_static.onnx",
        "onnx_float16": f"{work}/{tag}/keras_vit_float16.onnx",
        "litert_float32": f"{work}/{tag}/keras_vit_float32.tflite",
        "litert_dynamic_int8": f"{work}/{tag}/keras_vit_dynamic_int8.tflite",
        "litert_int8": f"{work}/{tag}/keras_vit_int8.tflite",
    }


def calibration_images(count, seed=1):
    return np.random.default_rng(seed).uniform(-1, 1, (count, IMAGE, IMAGE, 3)).astype("float32")


def timm_model(code, state_dict=None):
    from _reference_imports import import_timm

    timm = import_timm()
    import torch

    torch.manual_seed(0)
    model = timm.create_model(TIMM_NAMES[code], pretrained=False).eval()
    if state_dict is not None:
        model.load_state_dict(torch.load(state_dict, weights_only=True))
    return model


def _step(name, target, make, log):
    if os.path.exists(target):
        return
    start = time.perf_counter()
    make()
    log[name] = round(time.perf_counter() - start, 1)
    print(f"  built {name} in {log[name]:.0f} s", flush=True)


def build(code, work, calibration_count):
    """Writes every artefact of `code` that is missing; returns {artefact: build seconds}."""
    import torch

    from keras_vit.export import onnx_precision

    p = paths(work, code)
    os.makedirs(os.path.dirname(p["state_dict"]), exist_ok=True)
    log = {}
    calibration = calibration_images(calibration_count)
    nchw = np.ascontiguousarray(calibration.transpose(0, 3, 1, 2))
    if not os.path.exists(p["state_dict"]):
        torch.save(timm_model(code).state_dict(), p["state_dict"])

    def timm_onnx():
        model = timm_model(code, p["state_dict"])
        torch.onnx.export(
            model, (torch.from_numpy(nchw[:1]),), p["timm_onnx"], input_names=["x"],
            output_names=["logits"], dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}},
            opset_version=17, dynamo=False,
        )  # fmt: skip

    _step("timm_onnx", p["timm_onnx"], timm_onnx, log)
    for name, scheme, data in (
        ("timm_int8_dynamic", "dynamic", None),
        ("timm_int8_static", "static_qdq", nchw),
    ):
        _step(name, p[name], lambda n=name, s=scheme, d=data: onnx_precision.convert(
            p["timm_onnx"], p[n], "int8", s, d), log)  # fmt: skip
    model = None

    def keras_model():
        nonlocal model
        if model is None:
            model = keras_vit.from_timm(TIMM_NAMES[code], checkpoint=p["state_dict"])
        return model

    for precision in ("float32", "bfloat16", "int8"):
        name = f"sm_{precision}"
        _step(name, p[name], lambda n=name, q=precision: keras_vit.export_saved_model(
            keras_model(), p[n], precision=q, verbose=False), log)  # fmt: skip
    _step("onnx_float32", p["onnx_float32"], lambda: keras_vit.export_onnx(
        keras_model(), p["onnx_float32"], verbose=False), log)  # fmt: skip
    for name, precision, scheme, data in (
        ("onnx_int8_dynamic", "int8", "dynamic", None),
        ("onnx_int8_static", "int8", "static_qdq", calibration),
        ("onnx_float16", "float16", None, None),
    ):
        _step(name, p[name], lambda n=name, q=precision, s=scheme, d=data: onnx_precision.convert(
            p["onnx_float32"], p[n], q, s, d), log)  # fmt: skip
    for quantize in ("float32", "dynamic_int8", "int8"):
        name = f"litert_{quantize}"
        def litert(n=name, q=quantize):
            keras_vit.export_litert(
                keras_model(), p[n], quantize=None if q == "float32" else q,
                representative_data=calibration if q == "int8" else None, verbose=False,
            )  # fmt: skip

        _step(name, p[name], litert, log)
    return log


def size_mb(path):
    if os.path.isdir(path):
        files = [os.path.join(root, f) for root, _, names in os.walk(path) for f in names]
        return sum(os.path.getsize(f) for f in files) / 1e6
    return os.path.getsize(path) / 1e6


def contestants(code, work, threads, which):
    """`[(name, runtime, precision, artefact path or None, make(batch) -> call)]`."""
    import onnxruntime
    import torch

    torch.set_num_threads(threads)
    p = paths(work, code)
    model = timm_model(code, p["state_dict"])

    def eager(images):
        x = torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2)))

        def call():
            with torch.inference_mode():
                return model(x).numpy()

        return call

    def ort(path, nchw):
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name

        def make(images):
            x = np.ascontiguousarray(images.transpose(0, 3, 1, 2)) if nchw else images
            return lambda: session.run(None, {name: x})[0]

        return make

    def saved_model(path):
        import tensorflow as tf

        signature = tf.saved_model.load(path).signatures["serving_default"]

        def make(images):
            x = tf.constant(images)
            return lambda: signature(images=x)["logits"].numpy()

        return make

    def litert(path):
        from ai_edge_litert.interpreter import Interpreter

        runners = {}

        def make(images):
            if len(images) not in runners:
                interpreter = Interpreter(model_path=path, num_threads=threads)
                runners[len(images)] = interpreter.get_signature_runner()
            runner = runners[len(images)]
            return lambda: runner(images=images)["logits"]

        return make

    rows = [("timm eager", "torch", "float32", None, eager)]
    rows += [
        ("timm ONNX", "onnxruntime", "float32", p["timm_onnx"], ort(p["timm_onnx"], True)),
        ("timm ONNX int8 dynamic", "onnxruntime", "int8", p["timm_int8_dynamic"],
         ort(p["timm_int8_dynamic"], True)),
        ("timm ONNX int8 static", "onnxruntime", "int8", p["timm_int8_static"],
         ort(p["timm_int8_static"], True)),
    ]  # fmt: skip
    for precision in ("float32", "bfloat16", "int8"):
        path = p[f"sm_{precision}"]
        rows.append((f"keras_vit SavedModel {precision}", "tensorflow", precision, path,
                     saved_model(path)))  # fmt: skip
    for key, label, precision in (
        ("onnx_float32", "keras_vit ONNX", "float32"),
        ("onnx_int8_dynamic", "keras_vit ONNX int8 dynamic", "int8"),
        ("onnx_int8_static", "keras_vit ONNX int8 static", "int8"),
        ("onnx_float16", "keras_vit ONNX float16", "float16"),
    ):
        rows.append((label, "onnxruntime", precision, p[key], ort(p[key], False)))
    for quantize in ("float32", "dynamic_int8", "int8"):
        path = p[f"litert_{quantize}"]
        rows.append((f"keras_vit LiteRT {quantize}", "litert", quantize, path, litert(path)))
    if which:
        rows = [row for row in rows if row[0] == "timm eager" or any(w in row[0] for w in which)]
    return rows


def time_model(code, args):
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    rows = contestants(code, args.work, args.threads, args.only)
    clock = time.process_time if args.clock == "process" else time.perf_counter
    results = {}
    for batch in args.batches:
        images = np.random.default_rng(batch).uniform(-1, 1, (batch, IMAGE, IMAGE, 3))
        images = images.astype("float32")
        calls = {}
        for name, _, _, _, make in rows:
            calls[name] = make(images)
            calls[name]()
            calls[name]()
        reference = np.asarray(calls["timm eager"](), "float64")
        diffs = {name: float(np.abs(np.asarray(call()) - reference).max())
                 for name, call in calls.items()}  # fmt: skip
        times = {name: [] for name in calls}
        load = [os.getloadavg()[0]]
        for _ in range(args.rounds):
            for name, call in calls.items():
                start = clock()
                call()
                times[name].append(clock() - start)
            load.append(os.getloadavg()[0])
        results[batch] = dict(times=times, diffs=diffs, load=load)
        print(f"  {code} batch {batch}: {args.rounds} rounds, load {min(load):.1f}-"
              f"{max(load):.1f}", flush=True)  # fmt: skip
    return rows, results


def table(code, rows, results, batches):
    def quartiles(values):
        q = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
        return q[0], statistics.median(values), q[-1]

    head = ["artefact", "runtime", "precision", "file MB"]
    for batch in batches:
        head += [f"b{batch} ms / batch [q1-q3]", f"b{batch} img/s", f"b{batch} vs timm eager"]
    head += ["max logit diff (b1)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 4 + "---:|" * (3 * len(batches) + 1)]
    base = {b: statistics.median(results[b]["times"]["timm eager"]) for b in batches}
    for name, runtime, precision, path, _ in rows:
        cells = [name, runtime, precision, "" if path is None else f"{size_mb(path):.0f}"]
        for batch in batches:
            low, mid, high = quartiles(results[batch]["times"][name])
            cells += [f"{1e3 * mid:.0f} [{1e3 * low:.0f}-{1e3 * high:.0f}]",
                      f"{batch / mid:.2f}", f"{base[batch] / mid:.2f}x"]  # fmt: skip
        cells.append(f"{results[batches[0]]['diffs'][name]:.2g}")
        lines.append("| " + " | ".join(cells) + " |")
    return f"**{code}**\n\n" + "\n".join(lines)


def machine():
    from keras_vit.export.precision import cpu_flags

    flags = cpu_flags() or frozenset()
    model_name = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            model_name = next(line.split(":", 1)[1].strip() for line in f if "model name" in line)
    except (OSError, StopIteration):
        pass
    shown = ", ".join(f"{flag} {'yes' if flag in flags else 'no'}" for flag in FLAGS_SHOWN)
    return f"{model_name}, {os.cpu_count()} cores; {shown}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["S/16", "B/16"], choices=TIMM_NAMES)
    parser.add_argument("--phase", choices=("build", "time", "all"), default="all")
    parser.add_argument("--work", default="runs/bench_serving")
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--clock", choices=("wall", "process"), default="wall")
    parser.add_argument("--calibration", type=int, default=16, help="calibration images")
    parser.add_argument("--only", nargs="*", help="substrings of the contestants to time")
    parser.add_argument("--json", help="write the raw times here")
    args = parser.parse_args(argv)
    print(f"machine: {machine()}; load {os.getloadavg()}", flush=True)
    report = {}
    for code in args.models:
        if args.phase in ("build", "all"):
            print(f"building {code} into {args.work}", flush=True)
            report[f"build {code}"] = build(code, args.work, args.calibration)
        if args.phase in ("time", "all"):
            rows, results = time_model(code, args)
            print(table(code, rows, results, args.batches), flush=True)
            print(f"(threads {args.threads}, clock {args.clock}, {args.rounds} rounds)\n")
            report[code] = {str(b): r for b, r in results.items()}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(machine=machine(), args=vars(args), report=report), f, indent=1)


if __name__ == "__main__":
    main()
