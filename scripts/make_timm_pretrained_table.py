"""Writes keras_vit/weights/timm/pretrained.json: timm's pretrained configs of keras_vit's names.

For every timm architecture of timm's ViT modules and VLM vision towers (`VIT_MODULES`,
`TOWER_MODULES`: whether a registered family reads it or not, so that a new family finds its
names already there) and every one `keras_vit.weights.timm.names.match_timm_family` accepts,
the table holds its timm module, its model class and the arguments timm's model function gives
it (`model_args`: what the name fixes, for export's declared tables), timm's default tag and,
per `<arch>.<tag>` (and per untagged architecture, under the architecture's own name, where
timm has no weights), the fields of timm's `get_pretrained_cfg` that keras_vit uses: the Hub
repo and file, class count, input size, mean, std, crop fraction and mode, interpolation and
the label set (`timm.data.infer_imagenet_subset`). tests/weights/timm/test_pretrained.py checks
the table against the installed timm.

Usage (with timm installed, README's torch / torchvision pair):

    python scripts/make_timm_pretrained_table.py [--check]

`--check` writes nothing and exits 1 when the committed table differs from the installed timm's.
"""

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# timm's modules of ViTs and of VLM vision towers: every name of theirs is in the table.
VIT_MODULES = ("vision_transformer", "vision_transformer_hybrid", "vision_transformer_relpos",
               "vision_transformer_sam", "eva", "beit", "deit", "naflexvit")  # fmt: skip
TOWER_MODULES = ("qwen3_vit", "gemma4_vit", "deepseek_vit")
TABLE = os.path.join(ROOT, "keras_vit", "weights", "timm", "pretrained.json")


def _record(timm, cfg):
    """The table's fields of one timm `PretrainedCfg`."""
    from timm.data import infer_imagenet_subset

    record = {
        "hf_hub_id": cfg.hf_hub_id or None,
        "hf_hub_filename": cfg.hf_hub_filename or None,
        "url": cfg.url or None,
        "num_classes": cfg.num_classes,
        "input_size": list(cfg.input_size),
        "fixed_input_size": cfg.fixed_input_size,
        "mean": list(cfg.mean),
        "std": list(cfg.std),
        "crop_pct": cfg.crop_pct,
        "crop_mode": cfg.crop_mode,
        "interpolation": cfg.interpolation,
        "label_set": infer_imagenet_subset(cfg.to_dict()),
        "license": cfg.license,
    }
    if cfg.test_input_size is not None:
        record["test_input_size"] = list(cfg.test_input_size)
    return record


# Builder arguments that are not the architecture's.
_NOT_ARCHITECTURE = ("pretrained_cfg", "pretrained_cfg_overlay", "pretrained_strict", "cache_dir",
                     "feature_cfg", "pretrained_filter_fn", "kwargs_filter")  # fmt: skip


class _Captured(Exception):
    """What a timm model function passed to `build_model_with_cfg` (no model is built)."""

    def __init__(self, model_class, kwargs):
        super().__init__(model_class.__name__)
        self.model_class, self.kwargs = model_class, kwargs


def _described(value):
    """A builder argument as JSON: itself when it is plain data, else a short description
    (`"partial(LayerNorm, eps=1e-05)"`, a class or function name)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)) and all(
        v is None or isinstance(v, (bool, int, float, str)) for v in value
    ):
        return list(value)
    import functools

    if isinstance(value, functools.partial):
        keywords = ", ".join(f"{k}={_described(v)!r}" for k, v in value.keywords.items())
        return f"partial({_described(value.func)}{', ' if keywords else ''}{keywords})"
    return getattr(value, "__name__", type(value).__name__)


def model_arguments(timm, arch):
    """`(model class name, {argument: value})` of timm's model function for `arch`: what it
    gives its model class (`build_model_with_cfg`), caught before any model is built."""
    import importlib

    from timm.models._registry import _model_to_module

    module = importlib.import_module(f"timm.models.{_model_to_module[arch]}")
    original = module.build_model_with_cfg

    def capture(model_class, variant, pretrained, **kwargs):
        raise _Captured(model_class, kwargs)

    module.build_model_with_cfg = capture
    try:
        timm.create_model(arch, pretrained=False)
    except _Captured as captured:
        arguments = {
            k: _described(v) for k, v in captured.kwargs.items() if k not in _NOT_ARCHITECTURE
        }
        return captured.model_class.__name__, arguments
    finally:
        module.build_model_with_cfg = original
    return None, {}


def build_table():
    """The table, read from the installed timm."""
    sys.path.insert(0, ROOT)
    from tests.weights.references import import_timm

    timm = import_timm()
    from timm.models import get_pretrained_cfg
    from timm.models._registry import _model_to_module

    from keras_vit.weights.timm.names import match_timm_family

    architectures, configs = {}, {}
    in_modules = {n for m in VIT_MODULES + TOWER_MODULES for n in timm.list_models(module=m)}
    for arch in timm.list_models():
        if arch not in in_modules and match_timm_family(arch) is None:
            continue
        tagged = [name for name in timm.list_pretrained(f"{arch}.*") if name.split(".")[0] == arch]
        default = get_pretrained_cfg(arch)
        default_tag = default.tag if tagged else None
        model_class, model_args = model_arguments(timm, arch)
        architectures[arch] = {
            "module": _model_to_module[arch],
            "model_class": model_class,
            "model_args": model_args,
            "default_tag": default_tag,
            "tags": [name.split(".", 1)[1] for name in tagged],
        }
        if not tagged:
            configs[arch] = _record(timm, default)
        for name in tagged:
            configs[name] = _record(timm, get_pretrained_cfg(name))
    return {
        "source": f"timm {timm.__version__} get_pretrained_cfg "
        "(written by scripts/make_timm_pretrained_table.py)",
        "timm_version": timm.__version__,
        "vit_modules": list(VIT_MODULES),
        "tower_modules": list(TOWER_MODULES),
        "architectures": architectures,
        "configs": configs,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    args = parser.parse_args()
    text = json.dumps(build_table(), indent=1, sort_keys=False) + "\n"
    if args.check:
        with open(TABLE, encoding="utf-8") as f:
            same = f.read() == text
        print("up to date" if same else f"{TABLE} differs from the installed timm's")
        return 0 if same else 1
    with open(TABLE, "w", encoding="utf-8") as f:
        f.write(text)
    table = json.loads(text)
    print(
        f"wrote {TABLE}: {len(table['architectures'])} architectures, "
        f"{len(table['configs'])} configs"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
