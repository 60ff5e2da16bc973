"""benchmarks/finetune_digits.py: its split (disjoint, per class, fixed by the seed) and one short
fine-tuning run of each arm kind's code path (layer decay, EMA, repeated augmentation,
distillation; the baseline is any of them without its option) on a tiny subset, so the study's
code paths keep working."""

import numpy as np
import pytest

from tests.benchmarks.scripts import load_benchmark

pytest.importorskip("sklearn")
pytest.importorskip("tensorflow")


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("finetune_digits")


def test_split_is_disjoint_per_class_and_fixed_by_the_seed(bench):
    images, labels = bench.digits()
    assert images.shape == (1797, 16, 16, 1) and images.dtype == np.uint8
    train, val, test = bench.split(labels, shots=4, seed=0)
    assert len(train) == 5 * 4 and len(val) == 5 * 30
    assert not (set(train) & set(val) or set(train) & set(test) or set(val) & set(test))
    assert set(labels[train]) == set(range(5, 10))
    assert np.all(labels[np.concatenate([train, val, test])] >= 5)
    np.testing.assert_array_equal(bench.split(labels, 4, 0)[0], train)
    assert not np.array_equal(bench.split(labels, 4, 1)[0], train)


@pytest.mark.slow
def test_every_arm_kind_fine_tunes_and_reports_accuracies(bench):
    images, labels = bench.digits()
    train, val, test = bench.split(labels, shots=6, seed=0)
    data = [(images[i][:60], labels[i][:60] - 5) for i in (train, val, test)]
    start = bench.ViT("mu/4", image_size=bench.SIZE, num_classes=5, **bench.ARCH)
    teacher = bench.teacher_cnn(*data[0], seed=0, epochs=5)  # 5 steps: its warm-up
    # One run per branch of `finetune`: "baseline" runs the lines every arm runs (the arms
    # below add one option each to it), and "distill_hard" takes the "distill_soft" path with
    # another `Distiller` mode (both modes train in tests/training/test_distillation.py).
    for arm, setting in [("layer_decay", 0.65), ("ema", 0.9), ("repeated_aug", 3),
                         ("distill_soft", 2.0)]:
        val_acc, test_acc = bench.finetune(start, data, arm, 1e-3, setting, 0, 1, teacher)
        assert 0.0 <= val_acc <= 1.0 and 0.0 <= test_acc <= 1.0, arm
