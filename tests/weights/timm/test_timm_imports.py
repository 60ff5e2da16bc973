"""timm imports and runs as it is in the README's environment: no shim, any import order.

Each check runs in a fresh Python process, which never sees tests/weights/references.py (its
torchvision shim) or tests/conftest.py (its triton-first import), so it sees what a user's script
sees. Where timm is not installed the tests skip, except in CI (`CI=true`, `.ci/run`), which
installs the `test` extra: there a missing timm fails.
"""

import importlib.util
import os
import subprocess
import sys

import keras
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

TIMM_FORWARD = """
import timm, torch
model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8,
                          depth=2, num_classes=10).eval()
with torch.no_grad():
    out = model(torch.zeros(2, 3, 32, 32))
assert tuple(out.shape) == (2, 10), out.shape
assert bool(torch.isfinite(out).all())
print("timm", timm.__version__, "torch", torch.__version__, "ok")
"""

# A user's script: keras_vit (so Keras and, on the TensorFlow backend, TensorFlow) first.
KERAS_VIT_THEN_TIMM = (
    """
import numpy as np
import keras_vit
ours = keras_vit.ViT("mu/8", image_size=32, num_classes=10)
assert tuple(ours(np.zeros((1, 32, 32, 3), "float32")).shape) == (1, 10)
"""
    + TIMM_FORWARD
)


def _needs_timm():
    if importlib.util.find_spec("timm") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("timm is not installed, and CI must run it (the `test` extra)")
        pytest.skip("timm (the `test` extra) is not installed")


def _run(code):
    env = dict(os.environ, KERAS_BACKEND=keras.backend.backend(), PYTHONPATH=ROOT)
    env.pop("KERAS_VIT_TORCHVISION_SHIM", None)
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, (
        f"exit code {result.returncode} (-11 or 139: a segfault)\n{result.stdout}\n"
        f"{result.stderr[-4000:]}"
    )
    assert "ok" in result.stdout


def test_timm_imports_and_runs_without_shim():
    _needs_timm()
    _run(TIMM_FORWARD)


def test_timm_after_keras_vit():
    # triton (in PyTorch's CUDA builds) crashes when it loads after TensorFlow; keras_vit loads
    # it first (keras_vit/_import_order.py).
    _needs_timm()
    _run(KERAS_VIT_THEN_TIMM)
