"""triton after TensorFlow (keras_vit/_import_order.py): no crash in any order keras_vit sees.

The end-to-end test runs the issue's command in a fresh process (where the crash happens: a
process that already imported triton cannot show it), and checks that triton's compiler, loaded
bound to itself after TensorFlow, writes the same PTX for a kernel as when it loads alone.
"""

import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

from keras_vit import _import_order
from tests.helpers import backend_independent

HAS_TRITON = importlib.util.find_spec("triton") is not None
HAS_TF = importlib.util.find_spec("tensorflow") is not None
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A small triton kernel compiled for an sm_80 target on the CPU (no GPU needed): it runs triton's
# LLVM and MLIR passes end to end, the code that binds to TensorFlow's LLVM without the guard.
KERNEL = textwrap.dedent(
    """
    import hashlib
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    @triton.jit
    def kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + i, mask=i < n)
        tl.store(y_ptr + i, tl.exp(x) * 2 + tl.sum(x, 0), mask=i < n)

    source = ASTSource(fn=kernel, signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32"},
                       constexprs={"BLOCK": 128})
    ptx = triton.compile(source, target=GPUTarget("cuda", 80, 32)).asm["ptx"]
    print("PTX", hashlib.sha256(ptx.encode()).hexdigest())
    """
)


def _run(code, tmp_path, **env):
    # triton's @jit reads its function's source from a file; the kernel is one module both
    # processes import, so its PTX (which names the file and lines) can be compared.
    (tmp_path / "kernel_module.py").write_text(KERNEL)
    script = tmp_path / f"script_{len(os.listdir(tmp_path))}.py"
    script.write_text(code)
    environ = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([ROOT, str(tmp_path)]),
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "TRITON_CACHE_DIR": str(tmp_path / f"{script.stem}_cache"),  # each compiles anew
        **env,
    }
    return subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=environ, timeout=300
    )


def _ptx(result):
    assert result.returncode == 0, (result.returncode, result.stderr[-3000:])
    return [line for line in result.stdout.splitlines() if line.startswith("PTX ")]


@backend_independent  # fresh processes on the torch backend, whatever the suite's backend
@pytest.mark.slow  # two fresh processes importing TensorFlow, torch and triton (~15 s of CPU)
@pytest.mark.skipif(not (HAS_TRITON and HAS_TF), reason="needs triton and TensorFlow installed")
def test_triton_after_tensorflow_loads_bound_to_itself(tmp_path):
    # The issue's command: exit 139 (SIGSEGV in libtriton's static initialisers) before the guard.
    issue = (
        "import numpy as np, keras_vit, tensorflow\n"
        "model = keras_vit.ViT('mu/8', image_size=32, num_classes=10)\n"
        "print('logits', tuple(model(np.zeros((1, 32, 32, 3), 'float32')).shape))\n"
        "import triton._C.libtriton, kernel_module\n"
    )
    after_tf = _run(issue, tmp_path, KERAS_BACKEND="torch")
    assert "logits (1, 10)" in after_tf.stdout, (after_tf.returncode, after_tf.stderr[-3000:])
    alone = _run("import kernel_module\n", tmp_path)
    assert _ptx(after_tf) == _ptx(alone) and len(_ptx(alone)) == 1


@backend_independent  # the finder's decisions; no Keras
def test_finder_binds_triton_to_itself_only_after_tensorflow(monkeypatch):
    finder = _import_order.TritonAfterTensorFlowFinder()
    assert finder.find_spec("numpy", None) is None  # every other module: the next finders
    monkeypatch.setattr(_import_order, "tensorflow_loaded", lambda: False)
    assert finder.find_spec("triton._C.libtriton", None) is None  # triton first: as it is
    if not HAS_TRITON:
        return
    monkeypatch.setattr(_import_order, "tensorflow_loaded", lambda: True)
    path = importlib.util.find_spec("triton._C").submodule_search_locations
    spec = finder.find_spec("triton._C.libtriton", path)
    assert isinstance(spec.loader, _import_order._DeepBindLoader)
    assert spec.origin.endswith(".so")


@backend_independent
def test_finder_refuses_clearly_where_it_cannot_bind(monkeypatch):
    if not HAS_TRITON:
        pytest.skip("needs triton installed")
    monkeypatch.setattr(_import_order, "tensorflow_loaded", lambda: True)
    monkeypatch.delattr(os, "RTLD_DEEPBIND", raising=False)
    path = importlib.util.find_spec("triton._C").submodule_search_locations
    with pytest.raises(ImportError, match="cannot load after TensorFlow.*Import keras_vit"):
        _import_order.TritonAfterTensorFlowFinder().find_spec("triton._C.libtriton", path)


@backend_independent
def test_import_keras_vit_installs_the_guard_once():
    import keras_vit

    finders = [f for f in sys.meta_path if isinstance(f, _import_order.TritonAfterTensorFlowFinder)]
    assert len(finders) == 1
    keras_vit._install_triton_guard()
    assert sum(isinstance(f, _import_order.TritonAfterTensorFlowFinder) for f in sys.meta_path) == 1
    # An ordinary extension module still loads through the default machinery.
    assert isinstance(
        importlib.util.find_spec("_ctypes").loader, importlib.machinery.ExtensionFileLoader
    )
