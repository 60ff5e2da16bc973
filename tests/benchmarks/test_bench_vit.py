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


def test_row_estimate_uses_what_the_run_has_seen(bench):
    seen = {}
    assert bench.row_estimate(seen, "timm", "torch", "train", 128) == (
        bench.FIRST_ROW_ESTIMATE_S["timm"])
    seen[("timm", "torch", "train", 128)] = 40.0
    seen[("timm", "torch", "infer", 128)] = 100.0  # another task: not used
    assert bench.row_estimate(seen, "timm", "torch", "train", 128) == pytest.approx(50.0)
    # A larger batch costs more (square root of the ratio), a smaller one no less.
    assert bench.row_estimate(seen, "timm", "torch", "train", 512) == pytest.approx(100.0)
    assert bench.row_estimate(seen, "timm", "torch", "train", 32) == pytest.approx(50.0)


def test_past_deadline_starts_no_worker_and_says_so(bench, tmp_path, monkeypatch, capsys):
    import json
    import time

    def spawn(*args, **kwargs):
        raise AssertionError("a worker was started after the deadline")

    monkeypatch.setattr(bench, "_spawn", spawn)
    out = tmp_path / "rows.json"
    bench.main(["--tasks", "infer", "train", "--libs", "keras_vit", "timm", "--backends", "jax",
                "torch", "--model", "mu/8", "--skip-roofline", "--peak-tflops", "1",
                "--deadline", str(time.time() - 1), "--json", str(out)])
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 6  # keras_vit on two backends and timm, for each task
    for row in rows:
        if "skipped" in row and "not installed" in row["skipped"]:
            continue
        assert row["skipped"].startswith("skipped: out of time (expected ")
    assert "skipped: out of time" in capsys.readouterr().out


def test_a_worker_past_its_time_is_killed(bench):
    import argparse

    args = argparse.Namespace(
        image_size=32, num_classes=10, warmup=1, runs=1, clock="wall", precision="fp32",
        roofline_size=64, steps_per_execution=1, fit_input="arrays", fit_epochs=1,
        fit_steps=1, jit_compile=None, peer_compile=None, threads=None, profile=None,
        flash_attention="auto")
    result, error, seconds = bench._spawn("keras_vit", "jax", "infer", args, "mu/8", 1,
                                          timeout=0.2)
    assert result is None and error.startswith("killed at the deadline after")
    assert seconds < 30


def test_tables_of_several_runs_merge_with_ratios_across_them(bench, tmp_path):
    import json

    first = {"peak_tflops": 989.0, "rows": [
        {"task": "train B/16 b128", "lib": "keras_vit", "backend": "jax",
         "images_per_s": 1700.0, "gflops": 1700 * 105.3, "peak_rss_mib": 3000,
         "vs_timm": "stale"}]}
    second = {"peak_tflops": 989.0, "rows": [
        {"task": "train B/16 b128", "lib": "timm", "backend": "torch",
         "images_per_s": 3400.0, "gflops": 3400 * 105.3, "peak_rss_mib": 2000}]}
    (tmp_path / "a.json").write_text(json.dumps(first))
    (tmp_path / "b.json").write_text(json.dumps(second))
    table = bench.merged_table([str(tmp_path / "a.json"), str(tmp_path / "b.json"),
                                str(tmp_path / "never.json")])
    assert "| 0.50x |" in table and "stale" not in table
    assert "MFU: model FLOPs / 989 TFLOP/s" in table
    assert "(not found: " in table and "never.json" in table
    second["peak_tflops"] = 312.0
    (tmp_path / "b.json").write_text(json.dumps(second))
    with pytest.raises(ValueError, match="different peaks"):
        bench.merged_table([str(tmp_path / "a.json"), str(tmp_path / "b.json")])


def test_flash_attention_switch_sets_the_argument_of_every_call(bench):
    import keras
    import numpy as np

    calls = []
    wrapped = bench.with_flash_attention(lambda *a, **k: calls.append(k) or "out", False)
    assert wrapped("q", "k", "v", scale=0.5, flash_attention=None) == "out"
    assert calls == [{"scale": 0.5, "flash_attention": False}]
    # On the real op, False (XLA's / the backend's plain attention) computes the same function.
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(2, 5, 2, 4)).astype("float32") for _ in range(3))
    plain = bench.with_flash_attention(keras.ops.dot_product_attention, False)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(plain(q, k, v, scale=0.5)),
        keras.ops.convert_to_numpy(keras.ops.dot_product_attention(q, k, v, scale=0.5)),
        rtol=1e-6, atol=1e-6)


def test_a_failed_worker_is_summarised_by_its_reason(bench):
    keras_error = "\n".join([
        "Traceback (most recent call last):",
        '  File "bench_vit.py", line 262, in _run_keras',
        "RuntimeError: Unable to automatically build the model. Please build it yourself.",
        "Exception encountered:",
        "'Exception encountered when calling MultiHeadSelfAttention.call().",
        "",
        "\x1b[1mcuDNN is not detected.\x1b[0m",
        "",
        "Arguments received by MultiHeadSelfAttention.call():",
        "  • inputs=jnp.ndarray(shape=(8, 17, 32), dtype=bfloat16)",
        "  • attention_mask=None'",
    ])
    summary = bench.error_summary(keras_error)
    assert summary.startswith("cuDNN is not detected. | RuntimeError: Unable to automatically")
    assert bench.error_summary("ValueError: bad size\n") == "ValueError: bad size"
    assert bench.error_summary("one\ntwo\nthree\nfour") == "two | three | four"
