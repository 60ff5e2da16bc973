"""Every timm name `keras_vit.from_timm` reads, against timm itself: a sweep (not a unit test).

For each name `parse_timm_name` accepts (timm's `list_models()`, optionally `--match` glob and
`--limit`): timm's model built small (`timm.create_model(name, pretrained=False, depth=1,
embed_dim=32, num_heads=2, num_classes=3, img_size=...)`, Sapiens2 with its `num_kv_heads`; its
own width where timm refuses the narrow one), every parameter perturbed
(`tests.weights.timm_cases.perturb`: no bias, norm or scale at its trivial 0 / 1; BatchNorm
running statistics random too), saved as `.safetensors`, read by `keras_vit.from_timm(name,
path, <matching overrides>)`, and both run on the same random images: a 2 x 2 grid of the
model's stride (`--grid ROWSxCOLS`, or `default`: the name's own image size). NaFlex names run
on a NaFlex batch of three images of other sizes and aspect ratios (padding included, as
tests/families/naflex/test_timm_naflex.py). `--depth N`: N blocks. `--resample GRID`: the checkpoint
written at `--grid`, both models read it at GRID (timm through its own pretrained loader and
checkpoint filter, `pretrained_cfg_overlay=dict(file=...)`; ours resampling in `from_timm`).
`--dynamic GRID`: both with a dynamic image size (timm's `dynamic_img_size=True`, our
`dynamic_image_size=True`), run on images of GRID (ok at most 1e-4, as the unit tests).
`--classes 0`: no head (timm's pooled features, ours from a headless checkpoint).

The error is the max absolute difference over the largest magnitude of timm's output
(`tests.weights.timm_cases.assert_close`); ok at most 1e-5. Prints one line per name (name,
status: ok / MISMATCH / LOAD-ERROR / TIMM-CANNOT-SHRINK / TIMM-CANNOT-LOAD / TIMM-NO-DYNAMIC /
TIMM-CANNOT-RUN, max error, seconds) and a summary per family; `--json out.json` writes the
results. A grid counts cells of the name's stride: patch x stem stride (x `merger_size` for the
VLM towers, whose patch grid must be a multiple of it).

    KERAS_BACKEND=torch python benchmarks/timm_sweep.py [--match 'vit_*'] [--limit 10]
        [--sample 3 0.33 --seed 0] [--grid 3x2 | default] [--depth 2] [--resample 3x3]
        [--dynamic 3x4] [--classes 0] [--json out.json]

`--sample FIRST FRACTION`: every family's first FIRST names plus a seeded random FRACTION of the
rest (a faster sweep). Needs timm (the `test` extra) and torch; run from the repository root.
"""

import argparse
import collections
import fnmatch
import json
import os
import random
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root

if __name__ == "__main__":  # the script downloads nothing: fail fast instead (before timm)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tests.weights.references import import_timm, import_torch  # noqa: E402

torch = import_torch()  # torch (and the torchvision shim) before TensorFlow / Keras
timm = import_timm()

import numpy as np  # noqa: E402

import keras_vit  # noqa: E402
from keras_vit.data import naflex_batch  # noqa: E402
from keras_vit.weights.registry import family_of_timm_name  # noqa: E402
from keras_vit.weights.timm import reader as T  # noqa: E402
from keras_vit.weights.timm.names import parse_timm_name  # noqa: E402
from tests.weights.timm_cases import (  # noqa: E402
    perturb,
    random_images,
    randomize_batchnorm_statistics,
    timm_reference,
)

RTOL = 1e-5
DYNAMIC_RTOL = 1e-4  # the position embedding resampled at every call (as the unit tests)
WIDTH = dict(embed_dim=32, num_heads=2)  # timm's names
OURS_WIDTH = dict(hidden_dim=32, num_heads=2)
CLASSES = 3  # timm's num_classes (`--classes`; 0: no head, the pooled features)
# NaFlex (tests/families/naflex/test_timm_naflex.py, radio/test_timm_radio.py):
# patch 4, a 4 x 4 table (C-RADIO
# 8 x 8), three images of other sizes and ratios padded to 24 patches.
NAFLEX_IMAGES = [
    np.random.default_rng(0).uniform(-1, 1, size).astype("float32")
    for size in [(12, 40, 3), (40, 12, 3), (20, 20, 3)]
]
NAFLEX_BATCH = naflex_batch(NAFLEX_IMAGES, 4, 24)


def read_names(match=None):
    """timm's names `parse_timm_name` accepts: `[(name, spec)]`."""
    found = []
    for name in timm.list_models():
        if match and not fnmatch.fnmatch(name, match):
            continue
        if family_of_timm_name(name.split(".")[0]) is not None:
            continue  # a family's own kind of model (Gemma 4): its own tests, not this sweep
        try:
            found.append((name, parse_timm_name(name)))
        except ValueError:
            continue
    return found


def sample(names, first, fraction, seed):
    """Every family's first `first` names plus a seeded random `fraction` of the rest."""
    rng = random.Random(seed)
    seen = collections.Counter()
    kept = []
    for name, spec in names:
        seen[spec.family.name] += 1
        if seen[spec.family.name] <= first or rng.random() < fraction:
            kept.append((name, spec))
    return kept


def _stride(spec):
    """Pixels per grid cell of the name's model (patch x stem stride; x the VLM towers'
    `merger_size`: their grid must be a multiple of it)."""
    config = T.timm_config(spec, num_layers=1)
    merge = getattr(config, "merger_size", None) or 1
    return config.image_size[0] // config.grid_size[0] * merge


def _is_naflex(spec):
    return bool(T.timm_config(spec, num_layers=1).naflex)


def _timm_mlp_dim(model):
    """The hidden width of timm's first block MLP, where it has one (`fc2.in_features`)."""
    block = model.blocks[0]
    mlp = getattr(block, "mlp", None)
    if mlp is None and hasattr(block, "ffns"):  # ParallelThingsBlock
        mlp = block.ffns[0].mlp
    fc2 = getattr(mlp, "fc2", None)
    return getattr(fc2, "in_features", None)


def _kv_heads(spec, depth):
    """Sapiens2 (timm's `num_kv_heads`, one entry per block): grouped-query attention (1 key /
    value head for 2 query heads) in the even blocks, multi-head in the odd ones; ours (our
    `num_key_value_heads`, None: all heads). As SAPIENS2 in
    tests/families/eva/test_timm_evafam.py."""
    if spec.extras.get("kv_heads") is None:
        return {}, {}
    grouped = tuple(1 if i % 2 == 0 else 2 for i in range(depth))
    return dict(num_kv_heads=grouped), dict(
        num_key_value_heads=tuple(1 if h == 1 else None for h in grouped)
    )


def build_timm(name, spec, size, naflex, depth=1, **options):
    """timm's model small: `(model, shrunk, timm kwargs)`; shrunk False at its own width.
    `options`: more `timm.create_model` arguments (`dynamic_img_size`)."""
    base = dict(pretrained=False, depth=depth, num_classes=CLASSES, **_kv_heads(spec, depth)[0])
    base.update(options)
    if naflex:
        grid = (8, 8) if "radio" in name else (4, 4)
        extra = dict(patch_size=4, pos_embed_grid_size=grid)
    else:
        extra = dict(img_size=size)
    arch = name.partition(".")[0]
    errors = []
    for shrunk, kwargs in ((True, {**base, **WIDTH, **extra}), (False, {**base, **extra})):
        try:
            return timm.create_model(arch, **kwargs).eval(), shrunk, kwargs
        except Exception as error:  # noqa: BLE001 (any refusal: try the next)
            errors.append(f"{type(error).__name__}: {error}")
    raise RuntimeError(" | ".join(errors))


def our_overrides(spec, model, shrunk, size, naflex, name, depth=1):
    """`from_timm` overrides matching timm's small model."""
    ours = dict(num_layers=depth)
    if shrunk:
        ours.update(OURS_WIDTH)
        ours.update(_kv_heads(spec, depth)[1])
        if spec.extras.get("mlp_ratio") is None:  # our variant's MLP width is not timm's ratio
            mlp_dim = _timm_mlp_dim(model)
            if mlp_dim is not None:
                ours["mlp_dim"] = mlp_dim
    if naflex:
        grid = 8 if "radio" in name else 4
        ours.update(patch_size=4, image_size=4 * grid)
    else:
        ours["image_size"] = size
    return ours


def _size(spec, grid):
    """The image size of a `grid` of the name's stride (None: the name's own image size)."""
    if grid is None:
        size = spec.image_size
    else:
        stride = _stride(spec)
        size = (grid[0] * stride, grid[1] * stride)
    if not isinstance(size, int):
        size = size[0] if size[0] == size[1] else tuple(size)
    return size


def timm_resampled(name, model, kwargs, size, path):
    """timm's model at image `size` reading the checkpoint at `path` through its own pretrained
    loader (the name's checkpoint filter: position embedding, relative-position tables and so on
    resized as timm does). Where that loader would fetch something else (the ResNet-D hybrids'
    pretrained backbones), the model at random with its module's `checkpoint_filter_fn`."""
    arch = name.partition(".")[0]
    overlay = dict(file=str(path), source="", num_classes=CLASSES, label_offset=0,
                   custom_load=False)  # fmt: skip
    kwargs = {**kwargs, "img_size": size}
    try:
        options = dict(pretrained=True, pretrained_cfg_overlay=overlay)
        return timm.create_model(arch, **{**kwargs, **options}).eval()
    except Exception:  # noqa: BLE001
        import importlib

        from safetensors.torch import load_file

        module = importlib.import_module(
            "timm.models." + timm.models._registry._model_to_module[arch]
        )
        other = timm.create_model(arch, **{**kwargs, "pretrained": False}).eval()
        other.load_state_dict(module.checkpoint_filter_fn(load_file(str(path)), other))
        return other


class _TimmFailed(Exception):
    """timm could not run the case: (status, message)."""


def _timm_side(name, spec, model, kwargs, path, size, naflex, seed, resample, dynamic, options,
               ours_kwargs):  # fmt: skip
    """The checkpoint written to `path`; `(timm's output, the inputs)`. Raises `_TimmFailed`."""
    try:
        if naflex:
            from keras_vit.weights.state_dict import write_safetensors

            state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
            write_safetensors(state, path)
            with torch.no_grad():
                batch = {k: torch.from_numpy(v) for k, v in NAFLEX_BATCH.items()}
                expected = model(batch).numpy()
            inputs = NAFLEX_BATCH
        else:
            ref = timm_reference(torch, model, random_images(size, seed=seed), path)
            expected, inputs = ref["expected"], ref["images"]
            if resample is not False:
                size = _size(spec, resample)
                ours_kwargs["image_size"] = size
                try:
                    other = timm_resampled(name, model, kwargs, size, path)
                except Exception as error:  # noqa: BLE001
                    raise _TimmFailed("TIMM-CANNOT-LOAD", str(error)) from error
                inputs = random_images(size, seed=seed + 1)
                with torch.no_grad():
                    expected = other(torch.from_numpy(inputs).permute(0, 3, 1, 2)).numpy()
            if options:
                stride = _stride(spec)
                inputs = random_images((dynamic[0] * stride, dynamic[1] * stride), seed=seed + 2)
                with torch.no_grad():
                    expected = model(torch.from_numpy(inputs).permute(0, 3, 1, 2)).numpy()
    except _TimmFailed:
        raise
    except Exception as error:  # noqa: BLE001 (timm's own refusal of the case)
        raise _TimmFailed("TIMM-CANNOT-RUN", f"{type(error).__name__}: {error}") from error
    return expected, inputs


def check(name, spec, folder, grid=(2, 2), seed=0, depth=1, resample=False, dynamic=False):
    """One name: a result dict (status, error, seconds, details). `grid`: None for the name's
    own image size. `resample`: a grid (or None: the name's size) both models read the
    checkpoint at (timm through its pretrained loader), False: the checkpoint's own.
    `dynamic`: a grid both models run at with a dynamic image size (timm's
    `dynamic_img_size=True`, our `dynamic_image_size=True`), or False."""
    start = time.perf_counter()
    result = dict(name=name, family=spec.family.name)
    naflex = _is_naflex(spec)
    size = _size(spec, grid)
    options = dict(dynamic_img_size=True) if dynamic is not False and not naflex else {}
    try:
        model, shrunk, kwargs = build_timm(name, spec, size, naflex, depth, **options)
    except Exception as error:  # noqa: BLE001
        status = "TIMM-CANNOT-SHRINK"
        if options and "dynamic_img_size" in str(error):
            status = "TIMM-NO-DYNAMIC"  # timm's Beit, VisionTransformerRelPos
        result.update(status=status, message=str(error)[:300])
        result["seconds"] = time.perf_counter() - start
        return result
    result.update(shrunk=shrunk, timm_kwargs={k: v for k, v in kwargs.items() if k != "pretrained"})
    perturb(torch, model, seed=seed)
    randomize_batchnorm_statistics(torch, model, seed)
    path = os.path.join(folder, "model.safetensors")
    ours_kwargs = our_overrides(spec, model, shrunk, size, naflex, name, depth)
    if options:
        ours_kwargs["dynamic_image_size"] = True
    result["ours_kwargs"] = ours_kwargs
    try:
        expected, inputs = _timm_side(name, spec, model, kwargs, path, size, naflex, seed,
                                      resample, dynamic, options, ours_kwargs)  # fmt: skip
    except _TimmFailed as failed:
        result.update(status=failed.args[0], message=failed.args[1][:300])
        result["seconds"] = time.perf_counter() - start
        return result
    try:
        ours = keras_vit.from_timm(name, path, **ours_kwargs)
        got = ours.predict_on_batch(inputs)
        got = np.asarray(keras_vit_to_numpy(got), "float64")
    except Exception as error:  # noqa: BLE001
        last = traceback.format_exception_only(type(error), error)[-1].strip()
        result.update(status="LOAD-ERROR", message=last[:400])
        result["seconds"] = time.perf_counter() - start
        return result
    expected = np.asarray(expected, "float64")
    if got.shape != expected.shape:
        result.update(status="LOAD-ERROR", message=f"shape {got.shape} != timm's {expected.shape}")
    else:
        error = float(np.abs(got - expected).max() / np.abs(expected).max())
        rtol = DYNAMIC_RTOL if options else RTOL
        result.update(status="ok" if error <= rtol else "MISMATCH", error=error)
    result["seconds"] = time.perf_counter() - start
    return result


def keras_vit_to_numpy(x):
    import keras

    return keras.ops.convert_to_numpy(x)


def summarize(results):
    families = collections.OrderedDict()
    for r in results:
        families.setdefault(r["family"], []).append(r)
    lines = [f"{'family':<22} {'names':>5} {'ok':>4} {'mism':>4} {'err':>4} {'timm':>6}"
             f" {'max error':>10} {'seconds':>8}"]  # fmt: skip
    for family, rows in families.items():
        count = collections.Counter(r["status"] for r in rows)
        count["TIMM-CANNOT"] = sum(n for k, n in count.items() if k.startswith("TIMM-"))
        errors = [r["error"] for r in rows if "error" in r]
        worst = f"{max(errors):.2e}" if errors else "-"
        lines.append(
            f"{family:<22} {len(rows):>5} {count['ok']:>4} {count['MISMATCH']:>4} "
            f"{count['LOAD-ERROR']:>4} {count['TIMM-CANNOT']:>6} {worst:>10} "
            f"{sum(r['seconds'] for r in rows):>8.1f}"
        )
    count = collections.Counter(r["status"] for r in results)
    count["TIMM-CANNOT"] = sum(n for k, n in count.items() if k.startswith("TIMM-"))
    errors = [r["error"] for r in results if "error" in r]
    lines.append(
        f"{'total':<22} {len(results):>5} {count['ok']:>4} {count['MISMATCH']:>4} "
        f"{count['LOAD-ERROR']:>4} {count['TIMM-CANNOT']:>6} "
        f"{(f'{max(errors):.2e}' if errors else '-'):>10} "
        f"{sum(r['seconds'] for r in results):>8.1f}"
    )
    return "\n".join(lines)


def _grid(text):
    return None if text == "default" else tuple(int(g) for g in text.split("x"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--match", help="fnmatch glob over timm's names")
    parser.add_argument("--limit", type=int, help="at most this many names")
    parser.add_argument(
        "--sample",
        nargs=2,
        metavar=("FIRST", "FRACTION"),
        help="every family's first FIRST names + a random FRACTION of the rest",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--grid",
        default="2x2",
        help="image grid, rows x columns (2x2); 'default': the name's image size",
    )
    parser.add_argument(
        "--resample",
        help="both models read the checkpoint (written at --grid) "
        "at this grid (rows x columns, or 'default'); timm through its loader",
    )
    parser.add_argument(
        "--dynamic",
        help="both models with a dynamic image size (timm's dynamic_img_size=True), run at "
        "this grid (rows x columns); ok at most 1e-4",
    )
    parser.add_argument("--classes", type=int, default=3, help="timm's num_classes (0: no head)")
    parser.add_argument("--depth", type=int, default=1, help="timm's depth, our num_layers (1)")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    global CLASSES
    CLASSES = args.classes
    grid = _grid(args.grid)
    resample = False if args.resample is None else _grid(args.resample)
    dynamic = False if args.dynamic is None else _grid(args.dynamic)
    names = read_names(args.match)
    total = len(names)
    if args.sample:
        names = sample(names, int(args.sample[0]), float(args.sample[1]), args.seed)
    if args.limit:
        names = names[: args.limit]
    import keras

    print(f"{len(names)} of {total} names; timm {timm.__version__}, keras {keras.__version__}, "
          f"backend {keras.backend.backend()}, grid {grid or 'default'}, depth {args.depth}, "
          f"resample {args.resample}, dynamic {args.dynamic}, classes {CLASSES}",
          flush=True)  # fmt: skip
    results = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        for name, spec in names:
            began = time.perf_counter()
            result = check(
                name,
                spec,
                folder,
                grid=grid,
                seed=args.seed,
                depth=args.depth,
                resample=resample,
                dynamic=dynamic,
            )
            keras.backend.clear_session()
            result["seconds"] = time.perf_counter() - began  # the clean-up included
            results.append(result)
            error = f"{result['error']:.2e}" if "error" in result else "-"
            status = result["status"]
            if status == "MISMATCH":
                status = f"MISMATCH {error}"
            elif "message" in result:
                status = f"{status} {result['message']}"
            print(f"{name:<60} {status:<12} {error:>9} {result['seconds']:6.1f}s", flush=True)
    elapsed = time.perf_counter() - start
    print()
    print(summarize(results))
    print(f"total wall time {elapsed:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                dict(
                    backend=keras.backend.backend(),
                    grid=grid,
                    depth=args.depth,
                    seconds=elapsed,
                    argv=sys.argv[1:],
                    timm=timm.__version__,
                    results=results,
                ),
                f,
                indent=1,
                default=str,
            )


if __name__ == "__main__":
    main()
