"""The PyTorch reference libraries of the checkpoint-import tests: timm and transformers.

Test-only: `import_timm()` and `import_transformers()` import them, torch first.

The README's environment (`torch==2.14.1` with `torchvision==0.29.1`, a matching pair) imports
them as they are, and CI checks that it does (`.ci/run` sets `KERAS_VIT_TORCHVISION_SHIM=0`, and
`import_reference_libraries(required=True)` forbids the shim below). Its triton must load before
TensorFlow, which tests/conftest.py does (keras_vit/_import_order.py says why).

A fallback for other environments only, such as the CPU build `torch==2.13.0+cpu` beside PyPI's
`torchvision==0.28.0` (there is no CPU torchvision on PyPI): that torchvision is a CUDA build
whose compiled operators (`torchvision/_C.so`) do not load with a CPU torch, which torchvision
tolerates (`torchvision.extension._has_ops()` is then False and every fake-tensor registration
in `torchvision/_meta_registrations.py` is skipped) except for two unguarded
`@torch.library.register_fake("torchvision::nms")` / `("torchvision::qnms")`, which fail with
`RuntimeError: operator torchvision::nms does not exist`, so `import torchvision` (and with it
`import timm`, and transformers' image models) fails. The shim declares those two operator
schemas first, which lets torchvision import; the ViT code paths of timm and transformers use
none of torchvision's compiled operators (`torchvision.ops.nms` would fail: no kernel). It is
applied only where that error occurs, and never with `KERAS_VIT_TORCHVISION_SHIM=0`.
"""

import importlib
import os
import sys

import pytest

_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)
_LIBRARIES = []  # the torch.library.Library holding the schemas must stay alive


def shim_allowed():
    """False where `KERAS_VIT_TORCHVISION_SHIM=0` (CI): torchvision must then import as it is."""
    return os.environ.get("KERAS_VIT_TORCHVISION_SHIM", "1") != "0"


def _torch_with_torchvision(allow_shim=None):
    """torch, imported first, with torchvision importable (the shim above where needed).

    Args:
        allow_shim: bool or None. Whether the shim may be applied; None: `shim_allowed()`.
    """
    allow_shim = shim_allowed() if allow_shim is None else allow_shim
    import torch

    if importlib.util.find_spec("torchvision") is None or "torchvision" in sys.modules:
        return torch
    try:
        import torchvision  # noqa: F401
    except RuntimeError as error:
        if "torchvision::nms" not in str(error):
            raise
        if not allow_shim:
            raise RuntimeError(
                "torchvision does not import beside this torch (its compiled operators do not "
                "load), and the shim is forbidden here (KERAS_VIT_TORCHVISION_SHIM=0 or "
                "required=True): install the matching pair, torch==2.14.1 torchvision==0.29.1"
            ) from error
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
    raises, instead of the tests skipping, and so does a torchvision that needs the shim.

    Args:
        required: bool. Raise when one does not import, or imports only through the shim (else
            report it). Defaults to False.

    Returns:
        dict: library name -> version, or the import error's message.
    """
    found = {}
    for name in ("torch", "torchvision", "timm", "transformers"):
        try:
            if name == "torch":
                module = _torch_with_torchvision(allow_shim=False if required else None)
            else:
                module = importlib.import_module(name)
            found[name] = module.__version__
        except Exception as error:  # noqa: BLE001 - reported, or raised when required
            if required:
                label = "torch (with torchvision)" if name == "torch" else name
                raise RuntimeError(f"The test reference library {label} does not import") from error
            found[name] = f"not importable: {type(error).__name__}: {error}"
    shim = " (torchvision through the shim)" if _LIBRARIES else ""
    print("reference libraries: " + ", ".join(f"{k} {v}" for k, v in found.items()) + shim)
    return found
