"""tf2onnx adapter (memory): one copy of the ONNX graph at a time while tf2onnx optimizes it.

tf2onnx's `optimize_graph` runs its optimizers (constant folding, transposes, identities, ...)
in turn, several rounds, and before each one deep-copies the whole graph, weights included, so
that a failing optimizer leaves the graph as it was. The copy it no longer needs holds
reference cycles (nodes and their graph): only a full garbage collection frees it, and Python
runs one rarely in a process that holds TensorFlow's millions of long-lived objects. So the
copies pile up: exporting ViT-S/16 (88 MB of weights) grew the process by 3.2 GB, ViT-B/16
(346 MB) by 12.7 GB (a 14-16 GB peak; killed on a 24 GB machine beside other work), 1.8 GB
and 6.8 GB with this adapter (benchmarks/RESULTS.md). `collecting_between_optimizers()` makes
tf2onnx's own optimizers, in their own order, start with a full collection: the dropped copies
are freed before the next one is made. What tf2onnx writes is unchanged
(tests/export/test_onnx.py compares the two graphs and their outputs).

Example:

>>> with collecting_between_optimizers():  # doctest: +SKIP
...     model.export("vit.onnx", format="onnx")
"""

import contextlib
import gc


class _Collecting:
    """A tf2onnx optimizer factory whose optimizers collect garbage before they run."""

    def __init__(self, factory):
        self.factory = factory

    def __call__(self):
        optimizer = self.factory()
        optimize = optimizer.optimize

        def collected_then_optimize(graph, iteration):
            gc.collect()
            return optimize(graph, iteration)

        optimizer.optimize = collected_then_optimize
        return optimizer


@contextlib.contextmanager
def collecting_between_optimizers():
    """Inside, tf2onnx's optimizers each start with `gc.collect()` (see the module docstring);
    tf2onnx's table of optimizers is restored on exit, whatever happens inside. Without
    tf2onnx, or with a tf2onnx that keeps its optimizers elsewhere, nothing changes."""
    try:
        from tf2onnx import optimizer
    except ImportError:
        yield
        return
    table = getattr(optimizer, "_optimizers", None)
    if not isinstance(table, dict) or any(isinstance(f, _Collecting) for f in table.values()):
        yield  # another layout, or already adapted (a nested export)
        return
    saved = list(table.items())
    for name, factory in saved:
        table[name] = _Collecting(factory)
    try:
        yield
    finally:
        table.clear()
        table.update(saved)
