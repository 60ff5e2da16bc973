"""Writes keras_vit/weights/timm/pretrained.json: timm's pretrained configs of keras_vit's names.

For every timm architecture that `keras_vit.weights.timm.names.match_timm_family` accepts (the
architectures keras_vit builds), the table holds timm's default tag and, per `<arch>.<tag>`
(and per untagged architecture, under the architecture's own name, where timm has no weights),
the fields of timm's `get_pretrained_cfg` that keras_vit uses: the Hub repo and file, class
count, input size, mean, std, crop fraction and mode, interpolation and the label set
(`timm.data.infer_imagenet_subset`). tests/weights/timm/test_pretrained.py checks the table
against the installed timm.

Usage (with timm installed, README's torch / torchvision pair):

    python scripts/make_timm_pretrained_table.py [--check]

`--check` writes nothing and exits 1 when the committed table differs from the installed timm's.
"""

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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


def build_table():
    """The table, read from the installed timm."""
    sys.path.insert(0, ROOT)
    from tests.weights.references import import_timm

    timm = import_timm()
    from timm.models import get_pretrained_cfg

    from keras_vit.weights.timm.names import match_timm_family

    architectures, configs = {}, {}
    for arch in timm.list_models():
        if match_timm_family(arch) is None:
            continue
        tagged = [name for name in timm.list_pretrained(f"{arch}.*") if name.split(".")[0] == arch]
        default = get_pretrained_cfg(arch)
        default_tag = default.tag if tagged else None
        architectures[arch] = {
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
