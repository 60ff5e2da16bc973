"""triton and TensorFlow in one process, in either import order.

PyTorch's CUDA builds (`torch==2.14.1`, the README's) install triton. Its native library
`triton/_C/libtriton.so` carries its own LLVM and MLIR and exports their symbols without binding
them to itself (no `-Bsymbolic`). TensorFlow's wheels load `_pywrap_tensorflow_internal.so`
with `RTLD_GLOBAL` (`tensorflow/python/pywrap_dlopen_global_flags.py`), which puts
`libtensorflow_framework.so.2` and `libtensorflow_cc.so.2`, with TensorFlow's own (another
revision of) LLVM, in the process's global symbol scope. The dynamic linker searches that scope
before a library's own, so a libtriton loaded afterwards binds about 15,800 of its LLVM/MLIR
symbols to TensorFlow's copies (`LD_DEBUG=bindings`), and its first static initialiser
(`_GLOBAL__sub_I_PassBuilder.cpp`: registering a debug counter through TensorFlow's
`llvm::DebugCounter::instance()`, then growing it with triton's own inlined `DenseMap` code of
another layout) frees a bad pointer: SIGSEGV, no Python traceback. `import torch` alone does not
load triton; `torch._dynamo` does, and so `torchvision`, `timm`, transformers' image models and
the Keras torch backend.

Two things here make every order keras_vit sees safe:

- `install_triton_guard()`, called by `import keras_vit` (it loads nothing), puts a finder on
  `sys.meta_path` that loads `triton._C.libtriton` with `RTLD_DEEPBIND` when TensorFlow is
  already in the process: the library then binds its symbols to itself first, as when it loads
  first (the same kernel compiles to the same PTX either way; tests/test_import_order.py). Where
  the platform has no `RTLD_DEEPBIND` (not glibc), it stops the import with an ImportError that
  says which order works, instead of the crash.
- `load_triton_before_tensorflow()`, called when the public API first loads, imports triton
  before Keras can load TensorFlow (about 0.3 s, imports no torch; skipped where triton is not
  installed or TensorFlow is already loaded), so the common path needs no special flag.

Only a process that imports TensorFlow and then triton before `keras_vit` is imported at all is
out of reach: import keras_vit (or torch._dynamo, timm or triton) before TensorFlow (README).
"""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

# The extension modules of triton that carry its LLVM (libproton links none).
_TRITON_NATIVE = ("triton._C.libtriton",)


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


def tensorflow_loaded():
    """Whether TensorFlow (whose native library exports LLVM globally) is in this process."""
    return any(name == "tensorflow" or name.startswith("tensorflow.") for name in sys.modules)


class _DeepBindLoader(importlib.machinery.ExtensionFileLoader):
    """An extension loader that `dlopen`s with `RTLD_DEEPBIND` (its own symbols first)."""

    def create_module(self, spec):
        flags = sys.getdlopenflags()
        sys.setdlopenflags(flags | os.RTLD_DEEPBIND)
        try:
            return super().create_module(spec)
        finally:
            sys.setdlopenflags(flags)


class TritonAfterTensorFlowFinder(importlib.abc.MetaPathFinder):
    """Finds triton's native library; after TensorFlow, loads it bound to itself (or refuses).

    Every other module, and triton before TensorFlow, is left to the next finders.
    """

    def find_spec(self, fullname, path, target=None):
        if fullname not in _TRITON_NATIVE or not tensorflow_loaded():
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or not isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
            return spec
        if not hasattr(os, "RTLD_DEEPBIND"):
            raise ImportError(
                f"{fullname} (triton's native library, installed with PyTorch's CUDA builds) "
                "cannot load after TensorFlow in this process: both carry LLVM, and triton "
                "binding to TensorFlow's crashes the process (SIGSEGV), while this platform "
                "cannot load it bound to itself (no RTLD_DEEPBIND). Import keras_vit, timm or "
                "torch._dynamo before tensorflow (or keras on the TensorFlow backend), in a "
                "new process."
            )
        spec.loader = _DeepBindLoader(spec.loader.name, spec.loader.path)
        return spec


def install_triton_guard():
    """Puts `TritonAfterTensorFlowFinder` first on `sys.meta_path` (once); imports nothing."""
    if not any(isinstance(f, TritonAfterTensorFlowFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, TritonAfterTensorFlowFinder())
