"""The precisions the exporters write, what the CPU can run fast, and the record an artefact keeps.

- `SAVED_MODEL_PRECISIONS` / `ONNX_PRECISIONS`: what `export_saved_model(precision=...)` and
  `export_onnx(precision=...)` take (LiteRT keeps its own `quantize=`);
- `cpu_flags()` / `native_support(precision)`: whether this machine's CPU has the instructions
  that make a precision fast (`avx512_bf16` / `amx_bf16` for bfloat16; `avx512_vnni`,
  `avx_vnni` or `amx_int8` for int8), read from `/proc/cpuinfo` (None where it cannot be read);
- `warn_if_slow(precision, runtime)`: the warning an export gives, once per process, when it
  writes a precision this CPU has no fast instructions for (it runs, slower);
- `EXPORT_INFO`: the name of the JSON record a SavedModel keeps in its `assets.extra/` folder
  (an ONNX file keeps the same facts in its `metadata_props`), and `read_export_info(path)`.

Nothing here imports TensorFlow or onnxruntime.
"""

import json
import os
import platform
import warnings

SAVED_MODEL_PRECISIONS = ("float32", "bfloat16", "int8")
ONNX_PRECISIONS = ("float32", "float16", "int8")
EXPORT_INFO = "keras_vit_export.json"
INFO_FOLDER = "assets.extra"
ONNX_PREFIX = "keras_vit."

# The x86 / Arm instructions that run each reduced precision natively (Linux `/proc/cpuinfo`).
NATIVE_FLAGS = {
    "bfloat16": ("avx512_bf16", "amx_bf16", "bf16"),
    "int8": ("avx512_vnni", "avx_vnni", "amx_int8", "asimddp", "i8mm"),
}
# What was measured on a CPU without them (benchmarks/bench_serving.py's reduced-precision
# exports: ViT-B/16, 2-core AMD EPYC with AVX2 only), quoted by the warning.
_MEASURED_SLOWER = {
    ("bfloat16", "tensorflow"): "2.4x slower than float32",
    ("int8", "tensorflow"): "2.1x slower than float32",
}
_WARNED = set()


def check_precision(precision, choices, exporter, optional=False):
    """Returns `precision` if it is one of `choices` (or None when `optional`), else raises a
    ValueError naming both."""
    if optional and precision is None:
        return None
    if not isinstance(precision, str) or precision not in choices:
        hint = ""
        if exporter == "export_onnx" and precision == "bfloat16":
            hint = (
                " onnxruntime's CPU provider has no bfloat16 kernels (MatMul, Gemm: "
                "NOT_IMPLEMENTED); use precision='int8' for a fast CPU model, 'float16' for a "
                "half-size file (GPU providers), or export_saved_model(precision='bfloat16')."
            )
        raise ValueError(
            f"{exporter}: precision must be one of {choices}.{hint} Received: "
            f"precision={precision!r}"
        )
    return precision


def cpu_flags(path="/proc/cpuinfo"):
    """The CPU's instruction flags (a frozenset of lower-case names), or None if unknown."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip().lower() in ("flags", "features"):
                    return frozenset(value.lower().split())
    except OSError:
        return None
    return None


def native_support(precision, flags=None):
    """Whether the CPU has instructions for `precision` (True / False), None if unknown.

    float32 and float16 (a size format here) are always True.
    """
    if precision not in NATIVE_FLAGS:
        return True
    flags = cpu_flags() if flags is None else flags
    if flags is None:
        return None
    return any(flag in flags for flag in NATIVE_FLAGS[precision])


def slow_message(precision, runtime, flags=None):
    """The warning text for `precision` on this CPU, or None when it has the instructions."""
    if native_support(precision, flags) is not False:
        return None
    wanted = " / ".join(NATIVE_FLAGS[precision][:3])
    measured = _MEASURED_SLOWER.get((precision, runtime))
    measured = f" (measured {measured} for ViT-B/16 on such a CPU)" if measured else ""
    return (
        f"This CPU ({platform.machine()}) has no {wanted} instructions: a {precision} "
        f"{runtime} model runs on it, but slower than float32{measured}. It is fast on CPUs "
        f"with them (Intel Cooper Lake / Sapphire Rapids or newer, AMD Zen 4 or newer); see "
        "docs/export.md for what was measured."
    )


def warn_if_slow(precision, runtime, flags=None):
    """Warns once per process and `(precision, runtime)` if this CPU runs `precision` slowly.

    Returns the message (also when it was already given), or None.
    """
    if precision is None:
        return None
    message = slow_message(precision, runtime, flags)
    if message is not None and (precision, runtime) not in _WARNED:
        _WARNED.add((precision, runtime))
        warnings.warn(message, RuntimeWarning, stacklevel=3)
    return message


def export_info(precision, fmt, quantization=None, **extra):
    """The record an artefact keeps: format, precision, quantization scheme, keras_vit version."""
    from keras_vit.version import __version__

    info = dict(format=fmt, precision=precision, keras_vit_version=__version__)
    if quantization is not None:
        info["quantization"] = quantization
    info.update({key: value for key, value in extra.items() if value is not None})
    return info


def write_saved_model_info(folder, info):
    """Writes `info` as `folder/assets.extra/keras_vit_export.json` (TF Serving ignores it)."""
    extra = os.path.join(folder, INFO_FOLDER)
    os.makedirs(extra, exist_ok=True)
    with open(os.path.join(extra, EXPORT_INFO), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=1, sort_keys=True)


def read_export_info(path):
    """What a keras_vit export records about itself: `format`, `precision`, ...

    Args:
        path: a SavedModel folder (its `assets.extra/keras_vit_export.json`) or an `.onnx`
            file (its `metadata_props` named `keras_vit.*`).

    Returns:
        dict (empty for an artefact written before keras_vit recorded it, or by another tool).

    Raises:
        FileNotFoundError: `path` does not exist.
        ValueError: `path` is neither a folder nor an `.onnx` file.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"Export not found: {path!r}")
    if os.path.isdir(path):
        record = os.path.join(path, INFO_FOLDER, EXPORT_INFO)
        if not os.path.isfile(record):
            return {}
        with open(record, encoding="utf-8") as f:
            return json.load(f)
    if path.lower().endswith(".onnx"):
        import onnx

        model = onnx.load(path, load_external_data=False)
        return {
            prop.key[len(ONNX_PREFIX) :]: _parse(prop.value)
            for prop in model.metadata_props
            if prop.key.startswith(ONNX_PREFIX)
        }
    raise ValueError(
        "read_export_info reads a SavedModel folder or an .onnx file. Received: "
        f"path={path!r}"
    )


def _parse(value):
    try:
        return json.loads(value)
    except ValueError:
        return value


def onnx_metadata(model_proto, info):
    """Writes `info` into an `onnx.ModelProto`'s `metadata_props` (`keras_vit.<key>`)."""
    keep = [p for p in model_proto.metadata_props if not p.key.startswith(ONNX_PREFIX)]
    del model_proto.metadata_props[:]
    model_proto.metadata_props.extend(keep)
    for key, value in sorted(info.items()):
        prop = model_proto.metadata_props.add()
        prop.key = ONNX_PREFIX + key
        prop.value = value if isinstance(value, str) else json.dumps(value)
    return model_proto
