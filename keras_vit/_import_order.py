"""Loads triton before TensorFlow where both are installed, so that timm still imports later.

PyTorch's CUDA builds (`torch==2.14.1`, the README's) install triton. Its native library
`triton/_C/libtriton.so` carries its own LLVM, and loading it after TensorFlow's crashes the
process (SIGSEGV in libtriton's static initialisers, `llvm::DebugCounter`): the symbols bind to
the LLVM TensorFlow already loaded. `import torch` alone does not load triton, but
`import torchvision` (so `import timm`, and transformers' image models) does, through
`torch._dynamo`, as the Keras torch backend does. Loaded first, triton leaves TensorFlow
working, and both import in either order afterwards. It costs about 0.3 s, imports no torch,
and is skipped where triton is not installed or TensorFlow is already loaded (too late then: a
script that imports `keras` on the TensorFlow backend before `keras_vit` must import timm, or
triton, first).
"""

import importlib.util
import sys


def load_triton_before_tensorflow():
    """Imports triton if it is installed and TensorFlow is not loaded yet; never raises."""
    if "tensorflow" in sys.modules or "triton" in sys.modules:
        return
    try:
        if importlib.util.find_spec("triton") is None:
            return
        import triton  # noqa: F401
    except Exception:  # noqa: BLE001 - a broken triton is torch's concern, not keras_vit's
        pass
