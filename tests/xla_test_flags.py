"""The tests' XLA flags (JAX, and TensorFlow's XLA), for the test processes (tests/conftest.py
sets them before any framework starts) and the tests' JAX subprocesses (tests.helpers.xla_flags).
No framework import here: conftest reads this before JAX or TensorFlow loads.

Both flags change how XLA's CPU backend generates code for the tests' tiny programs, not which
program (the same HLO graphs and fusions): most of a tiny program's compile time is code
generation, none of its results' meaning.
- `--xla_backend_optimization_level=0`: LLVM's optimisation passes off (measured on JAX:
  tests/training/test_layer_decay.py + tests/models/test_architectures.py 569 s -> 311 s).
- `--xla_cpu_use_fusion_emitters=false`: XLA's classic LLVM IR emitters for fusions instead of
  the MLIR fusion emitters, whose pipeline costs a tiny fusion more than its code (measured: a
  2-block ViT's first `fit` 4.5-5.4 s -> 2.0-2.7 s; tests/models/test_vit.py +
  tests/layers/test_image_preprocessor.py 131 s -> 99 s, XLA compile 61 s -> 29 s).
"""

XLA_TEST_FLAGS = ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false")


def with_test_flags(flags=""):
    """`flags` (an XLA_FLAGS value) with each test flag it does not name already appended."""
    named = {flag.split("=")[0] for flag in flags.split()}
    extra = [flag for flag in XLA_TEST_FLAGS if flag.split("=")[0] not in named]
    return " ".join([*flags.split(), *extra])
