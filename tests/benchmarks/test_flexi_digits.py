"""benchmarks/flexi_digits.py: its helpers and a tiny end-to-end run (1 seed, 1 epoch, 16 px, 128
training digits)."""

import json

import numpy as np
import pytest

from tests.benchmarks.scripts import load_benchmark

pytest.importorskip("sklearn")


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("flexi_digits")


def test_digits_are_scaled_and_split_by_seed(bench):
    (x_train, y_train), (x_test, y_test) = bench.digits(16, seed=0)
    assert x_train.shape == (1257, 16, 16, 1) and x_test.shape == (540, 16, 16, 1)
    assert -1.0 <= x_train.min() and x_train.max() <= 1.0
    np.testing.assert_array_equal(bench.digits(16, seed=0)[1][1], y_test)
    assert not np.array_equal(bench.digits(16, seed=1)[1][1], y_test)


def test_shift_and_parsing(bench):
    images = np.random.rand(3, 8, 8, 1).astype("float32")
    same = bench.shifted(images, np.random.default_rng(0), max_shift=0)
    np.testing.assert_array_equal(same, images)
    assert bench.parse_ints("4,8,16", "--patch-sizes") == [4, 8, 16]
    assert bench.parse_ints("0,2", "--seeds", minimum=0) == [0, 2]
    for bad in ("", "a", "0"):
        with pytest.raises(ValueError, match="--patch-sizes"):
            bench.parse_ints(bad, "--patch-sizes")


@pytest.mark.slow
def test_tiny_run_writes_every_model_at_every_patch_size(bench, tmp_path, monkeypatch):
    digits = bench.digits

    def few_digits(image_size, seed):  # 2 training steps of 64 and one test batch per model
        (x_train, y_train), (x_test, y_test) = digits(image_size, seed)
        return (x_train[:128], y_train[:128]), (x_test[:64], y_test[:64])

    monkeypatch.setattr(bench, "digits", few_digits)
    out = tmp_path / "flexi.json"
    argv = ["--seeds", "0", "--epochs", "1", "--image-size", "16", "--patch-sizes", "4,8"]
    bench.main([*argv, "--base-patch", "4", "--out", str(out)])
    record = json.loads(out.read_text())
    assert record["seeds"] == [0]
    (accuracy,) = record["accuracy"]
    assert sorted(accuracy) == ["FlexiViT, 1 epochs", "fixed 4", "fixed 8"]
    for per_size in accuracy.values():
        assert sorted(per_size) == ["4", "8"]
        assert all(0.0 <= v <= 1.0 for v in per_size.values())


def test_nothing_to_train_is_refused(bench):
    with pytest.raises(ValueError, match="both 0"):
        bench.main(["--fixed-epochs", "0", "--flexi-epochs", "0"])


def test_patch_sizes_must_divide_the_image(bench):
    with pytest.raises(ValueError, match="must divide --image-size 16"):
        bench.main(["--image-size", "16", "--patch-sizes", "4,5"])
