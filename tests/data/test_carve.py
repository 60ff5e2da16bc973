"""The validation carve (keras_vit/data/carve.py): disjoint, complete, deterministic, stratified."""

import numpy as np
import pytest

from keras_vit.data.carve import Carve, carve_indices, carve_sizes, check_fraction


def test_carve_is_disjoint_complete_and_deterministic():
    labels = np.repeat(np.arange(4), [10, 20, 30, 40])
    train, val = carve_indices(100, 0.1, seed=0, labels=labels)
    assert len(train) == 90 and len(val) == 10
    assert not set(train) & set(val) and sorted({*train, *val}) == list(range(100))
    again = carve_indices(100, 0.1, seed=0, labels=labels)
    np.testing.assert_array_equal(train, again[0])
    np.testing.assert_array_equal(val, again[1])
    other = carve_indices(100, 0.1, seed=1, labels=labels)[1]
    assert len(other) == 10 and set(other) != set(val)  # the seed picks the examples


def test_carve_is_stratified_by_class():
    labels = np.repeat(np.arange(4), [10, 20, 30, 40])
    _, val = carve_indices(100, 0.1, labels=labels)
    np.testing.assert_array_equal(np.bincount(labels[val], minlength=4), [1, 2, 3, 4])
    # Rounding: largest remainders first, the total stays round(fraction * count).
    labels = np.repeat(np.arange(3), [7, 7, 6])
    _, val = carve_indices(20, 0.25, labels=labels)
    counts = np.bincount(labels[val], minlength=3)
    assert counts.sum() == 5 and counts.min() >= 1 and counts.max() <= 2


def test_carve_without_labels_is_a_seeded_permutation():
    train, val = carve_indices(50, 0.2, seed=3)
    assert len(val) == 10 and not set(train) & set(val)
    np.testing.assert_array_equal(val, carve_indices(50, 0.2, seed=3)[1])


def test_the_parts_of_a_carve():
    labels = np.arange(30) % 3
    train = Carve(0.2, "train").indices(30, labels)
    val = Carve(0.2, "validation").indices(30, labels)
    assert (len(train), len(val)) == (24, 6) and not set(train) & set(val)
    assert Carve(0.2).describe("stratified") == (
        "carved from train (fraction 0.2, seed 0, stratified)"
    )


@pytest.mark.parametrize("fraction", [1.0, 1.5, -0.1, True, "0.1", None, float("nan")])
def test_out_of_range_fractions_name_the_flag_and_the_value(fraction):
    with pytest.raises(
        ValueError, match=r"validation_fraction \(--validation-fraction\).*\[0, 1\)"
    ):
        check_fraction(fraction)
    with pytest.raises(ValueError, match=f"Received: validation_fraction={fraction!r}"):
        Carve(fraction)


def test_a_carve_must_leave_an_example_in_each_part():
    assert carve_sizes(10, 0.1) == (9, 1)
    with pytest.raises(ValueError, match=r"0.01 of the 10 training examples.*0 for validation"):
        carve_sizes(10, 0.01)
    with pytest.raises(ValueError, match=r"leaves 0 for training and 1 for validation"):
        carve_sizes(1, 0.9)
    with pytest.raises(ValueError, match="part must be one of"):
        Carve(0.1, "test")
