"""How many of timm's registered model names `keras_vit.from_timm` reads, per timm module.

Prints, for the installed timm, every model module with at least one name matching the issue's
ViT-like selection (`timm.list_models(["*vit*", "eva*", "aimv2*"])`, 444 names in timm 1.0.31)
or holding a name keras_vit reads, with how many of its names `parse_timm_name` accepts, and the
totals over: all names; the issue's selection; the ViT families proper (timm's
VisionTransformer, its hybrid, relpos and SAM variants, eva.py, beit.py, deit.py, naflexvit.py);
and those plus the VLM vision towers (qwen3_vit, gemma4_vit, deepseek_vit). `--refused` lists
each refused name of the ViT families with the first line of its reason.

    python benchmarks/timm_coverage.py [--refused]

A count, not a timing: no model is built.
"""

import argparse
import collections
import fnmatch
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _reference_imports
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this keras_vit

VIT_MODULES = (
    "vision_transformer",
    "vision_transformer_hybrid",
    "vision_transformer_relpos",
    "vision_transformer_sam",
    "eva",
    "beit",
    "deit",
    "naflexvit",
)
VLM_MODULES = ("qwen3_vit", "gemma4_vit", "deepseek_vit")
ISSUE_PATTERNS = ("*vit*", "eva*", "aimv2*")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--refused", action="store_true", help="list refused names, ViT families")
    args = parser.parse_args()

    from _reference_imports import import_timm

    timm = import_timm()
    from timm.models import _registry

    from keras_vit.weights.timm.names import parse_timm_name
    from keras_vit.weights.timm.reader import reads_timm_name

    names = timm.list_models()
    module_of = {name: _registry._model_to_module[name] for name in names}
    reasons = {}
    for name in names:
        if reads_timm_name(name):
            continue
        try:
            parse_timm_name(name)
            reasons[name] = "not read"
        except ValueError as error:
            reasons[name] = str(error).splitlines()[0]
    reads = {name for name in names if name not in reasons}
    selection = {n for n in names if any(fnmatch.fnmatch(n, p) for p in ISSUE_PATTERNS)}

    per_module = collections.defaultdict(list)
    for name in names:
        per_module[module_of[name]].append(name)
    print(f"timm {timm.__version__}: {len(names)} names, keras_vit reads {len(reads)}")
    print(f"{'module':28s} {'names':>6s} {'read':>5s} {'in issue set':>13s}")
    order = sorted(per_module.items(), key=lambda kv: (-len(reads & set(kv[1])), kv[0]))
    for module, members in order:
        in_set = len(selection & set(members))
        if in_set or reads & set(members) or module in VIT_MODULES + VLM_MODULES:
            print(f"{module:28s} {len(members):6d} {len(reads & set(members)):5d} {in_set:13d}")

    def total(label, members):
        members = set(members)
        share = len(reads & members) / len(members)
        print(f"{label}: {len(reads & members)} of {len(members)} ({share:.1%})")

    print()
    total("all names", names)
    total("the issue's selection " + repr(list(ISSUE_PATTERNS)), selection)
    vit_family = [n for n in names if module_of[n] in VIT_MODULES]
    total("ViT families (" + ", ".join(VIT_MODULES) + ")", vit_family)
    total("ViT families without samvit_*", [n for n in vit_family if not n.startswith("samvit_")])
    towers = [n for n in names if module_of[n] in VIT_MODULES + VLM_MODULES]
    total("ViT families + VLM towers", towers)
    if args.refused:
        print()
        for name in vit_family:
            if name in reasons:
                print(f"{module_of[name]:26s} {name:40s} {reasons[name][:110]}")


if __name__ == "__main__":
    main()
