"""benchmarks/bench_overhead.py: a tiny run on the current backend, and its table arithmetic.

Never timed: the run checks that every contestant steps and is reported, not how fast."""

import keras
import pytest

from tests.benchmarks.scripts import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_overhead")


def test_tiny_run_reports_every_contestant(bench):
    argv = ["--width", "16", "--depth", "1", "--heads", "2", "--mlp", "32", "--patch", "8",
            "--image-size", "16", "--rounds", "2", "--warmup", "1", "--fit-steps", "2",
            "--threads", "2", "--runner-callbacks", "--peers"]
    torch = keras.backend.backend() == "torch"
    if torch:
        argv += ["--compare-portable", "--compare-optimizer", "--compare-layer-calls"]
    rows = bench.main(argv)
    names = {row["name"] for row in rows}
    expected = {"keras_vit train_on_batch", "keras_vit fit", "keras_vit fit (1 step)",
                "keras_vit predict_on_batch", "keras_vit model(x)", "keras_vit predict",
                "keras_vit fit+callbacks", "keras_vit fit+callbacks (1 step)"}
    if torch:
        expected |= {"keras_vit direct step", "keras_vit_portable train_on_batch",
                     "keras_vit_portable predict_on_batch", "keras_vit_keras-own train_on_batch",
                     "keras_vit_layer_calls predict_on_batch"}
    assert expected <= names
    assert all(row["median"] > 0 and row["runs"] == 2 for row in rows)


def test_optimizer_apply_reports_both_optimizers(bench):
    argv = ["--width", "16", "--depth", "1", "--heads", "2", "--mlp", "32", "--patch", "8",
            "--image-size", "16", "--rounds", "2", "--warmup", "1", "--threads", "2",
            "--optimizer-apply"]
    names = {row["name"] for row in bench.main(argv)}
    assert names == {"FusedAdamW apply", "keras AdamW apply", "FusedAdamW apply (ema)",
                     "keras AdamW apply (ema)"}


def test_ratios_and_fit_overheads(bench):
    times = {"keras_vit train_on_batch": [10.0, 12.0, 11.0],
             "keras_vit fit": [11.0, 11.0, 11.0],  # ms per batch over 10 batches
             "keras_vit fit (1 step)": [20.0, 20.0, 20.0],
             "keras_vit predict_on_batch": [4.0, 4.0, 4.0],
             "timm train": [5.5, 5.5, 5.5], "timm infer": [2.0, 2.0, 2.0]}
    steps = {name: ("infer" if "pred" in name or "infer" in name else "train", None, 1)
             for name in times}
    rows = bench.summarise(times, steps)
    ratios = {(a, b): r for a, b, r in bench.ratios(rows)}
    assert ratios[("keras_vit train_on_batch", "timm train")] == pytest.approx(2.0)
    assert ratios[("keras_vit predict_on_batch", "timm infer")] == pytest.approx(2.0)
    assert ratios[("keras_vit fit", "keras_vit train_on_batch")] == pytest.approx(1.0)
    cost = bench.fit_overheads(rows, 10)["keras_vit fit"]
    assert cost["marginal"] == pytest.approx(10.0)  # (110 - 20) / 9
    assert cost["fixed"] == pytest.approx(10.0)
    table = bench.format_table(rows)
    assert "| train | keras_vit train_on_batch | 11.00 |" in table
