"""The PyTorch reference libraries of the checkpoint-import tests: timm and transformers.

Test-only: `import_timm()` and `import_transformers()` import them (torch first) so that they
work beside the CPU build of PyTorch the project installs (`torch==2.13.0`).

Why a shim: timm needs torchvision, and PyPI's torchvision 0.28.0 (the release paired with
torch 2.13) is a CUDA build. Its compiled operators (`torchvision/_C.so`) do not load with a CPU
torch, which torchvision tolerates (`torchvision.extension._has_ops()` is then False and every
fake-tensor registration in `torchvision/_meta_registrations.py` is skipped) except for two
unguarded `@torch.library.register_fake("torchvision::nms")` / `("torchvision::qnms")`, which
fail with `RuntimeError: operator torchvision::nms does not exist`, so `import torchvision`
(and with it `import timm`, and transformers' image models, which import torchvision when it is
installed) fails. Declaring those two operator schemas first lets torchvision import. The ViT
code paths of timm and transformers use none of torchvision's compiled operators (calling
`torchvision.ops.nms` would fail: the schema has no kernel). With a torchvision whose operators
load (a matching build), the shim is not applied.
"""

import importlib
import sys

import pytest

_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)
_LIBRARIES = []  # the torch.library.Library holding the schemas must stay alive


def _torch_with_torchvision():
    """torch, imported first, with torchvision importable (the shim above where needed)."""
    import torch

    if importlib.util.find_spec("torchvision") is None or "torchvision" in sys.modules:
        return torch
    try:
        import torchvision  # noqa: F401
    except RuntimeError as error:
        if "torchvision::nms" not in str(error):
            raise
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]  # the half-imported package
        library = torch.library.Library("torchvision", "DEF")
        for schema in _SCHEMAS:
            library.define(schema)
        _LIBRARIES.append(library)
        import torchvision  # noqa: F401
    return torch


def import_torch():
    """torch, imported before the reference libraries, with torchvision importable."""
    pytest.importorskip("torch", reason="torch (the reference libraries' backend) is not installed")
    return _torch_with_torchvision()


def import_timm():
    """timm (a `test` dependency; skips only where it is not installed)."""
    import_torch()
    return pytest.importorskip("timm", reason="timm (the `test` extra) is not installed")


def import_transformers():
    """transformers (a `test` dependency; skips only where it is not installed)."""
    import_torch()
    return pytest.importorskip(
        "transformers", reason="transformers (the `test` extra) is not installed"
    )


def import_reference_libraries(required=False):
    """Imports torch, torchvision, timm and transformers as the tests do; prints their versions.

    CI calls it with `required=True` before the tests (`.ci/run`): an import that fails there
    raises, instead of the tests skipping.

    Args:
        required: bool. Raise when one does not import (else report it). Defaults to False.

    Returns:
        dict: library name -> version, or the import error's message.
    """
    found = {}
    for name in ("torch", "torchvision", "timm", "transformers"):
        try:
            module = _torch_with_torchvision() if name == "torch" else importlib.import_module(name)
            found[name] = module.__version__
        except Exception as error:  # noqa: BLE001 - reported, or raised when required
            if required:
                raise RuntimeError(f"The test reference library {name} does not import") from error
            found[name] = f"not importable: {type(error).__name__}: {error}"
    print("reference libraries: " + ", ".join(f"{k} {v}" for k, v in found.items()))
    return found
