"""benchmarks/bench_vit.py's own helpers: FLOP counts, variant codes, profile summaries, table.

The benchmark itself runs frameworks in subprocesses and is never timed in tests."""

import pytest

from tests.benchmarks.scripts import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_vit")


def test_flops_and_model_codes(bench):
    b16 = bench.model_spec("B/16")
    assert (b16["hidden"], b16["layers"], b16["heads"], b16["mlp"], b16["patch"]) == (
        768, 12, 12, 3072, 16)
    assert bench.workload_flops("infer", b16) == pytest.approx(35.1e9, rel=2e-3)  # RESULTS.md
    assert bench.workload_flops("train", b16) == 3 * bench.workload_flops("infer", b16)
    mu = bench.model_spec("mu/8")
    assert bench.workload_flops("infer", mu, 32, 10) < 1e7
    with pytest.raises(ValueError, match="plain ViT code"):
        bench.model_spec("R50+B/16")


def test_jax_trace_summary_counts_device_kernels_only(bench):
    meta = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": "Stream #7"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 8, "args": {"name": "XLA Ops"}},
        {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/host:CPU"}},
        {"ph": "M", "name": "thread_name", "pid": 2, "tid": 1, "args": {"name": "python"}},
    ]
    events = [
        {"ph": "X", "pid": 1, "tid": 7, "name": "gemm", "dur": 300.0},
        {"ph": "X", "pid": 1, "tid": 7, "name": "gemm", "dur": 300.0},
        {"ph": "X", "pid": 1, "tid": 7, "name": "softmax", "dur": 200.0},
        {"ph": "X", "pid": 1, "tid": 8, "name": "fusion.1", "dur": 800.0},  # annotation
        {"ph": "X", "pid": 2, "tid": 1, "name": "PjitFunction", "dur": 900.0},  # host
    ]
    summary = bench.top_trace_events({"traceEvents": meta + events}, steps=2)
    assert summary["source"] == "GPU stream kernels"
    assert summary["total_ms_per_step"] == pytest.approx(0.4)
    top = summary["top"][0]
    assert (top["name"], top["ms_per_step"], top["calls_per_step"]) == ("gemm", 0.3, 1)
    assert top["share"] == pytest.approx(0.75)


def test_table_has_skipped_and_measured_rows(bench):
    rows = [
        {"task": "train B/16 b128", "lib": "keras_vit", "backend": "jax",
         "images_per_s": 1700.0, "gflops": 1700 * 105.3e9 / 1e9, "peak_rss_mib": 3000,
         "peak_device_mib": 20480.4},
        {"task": "train B/16 b128", "lib": "timm", "backend": "torch",
         "images_per_s": 2900.0, "gflops": 2900 * 105.3e9 / 1e9, "peak_rss_mib": 2000},
        {"task": "train B/16 b128", "lib": "hf", "backend": "torch",
         "skipped": "skipped: transformers not installed"},
    ]
    bench._ratios(rows)
    table = bench.format_table(rows, 989e3, "MFU")
    assert "| 0.59x |" in table  # keras_vit / timm
    # MFU as RESULTS.md has it for the H100 (1704 images/s: 18%), peak device memory:
    assert "| 18.1% |" in table and "| 20480 |" in table
    assert "skipped: transformers not installed" in table
