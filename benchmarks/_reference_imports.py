"""timm and transformers, imported torch first (benchmarks only).

README's environment (`torch==2.14.1` with `torchvision==0.29.1`) imports them as they are. A
fallback for other environments: PyPI's torchvision 0.28.0 is a CUDA build whose two unguarded
fake-kernel registrations (`torchvision::nms`, `::qnms`) fail beside the CPU `torch==2.13.0+cpu`;
declaring their schemas first lets it import (as tests/weights/references.py's fallback does).
timm's ViT and transformers' ViT use none of torchvision's compiled operators.
"""

import sys


def import_torchvision():
    """Imports torchvision (torch first), declaring its two failing operator schemas if needed."""
    import torch

    try:
        import torchvision  # noqa: F401
    except RuntimeError as error:
        if "torchvision::" not in str(error):
            raise
        for name in [m for m in sys.modules if m.split(".")[0] == "torchvision"]:
            del sys.modules[name]
        library = torch.library.Library("torchvision", "DEF")
        library.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        library.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        import_torchvision.library = library  # keep the definitions alive
    except ImportError:  # not installed: timm and transformers import without it
        pass


def import_timm():
    """timm, with torchvision importable beside a CPU torch."""
    import_torchvision()
    import timm

    return timm
