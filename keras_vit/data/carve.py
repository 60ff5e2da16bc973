"""`Carve`: a validation split held out of a training split, deterministic (a fixed seed) and
stratified by class where the labels are known, so that per-epoch validation and the choice of
`checkpoints/best.keras` never see the test split.

Each source applies a `Carve` to its own items before it builds its dataset (digits' arrays, a
folder's files, synthetic indices, a tfds split string), so the two parts cost no more to read
than the split they come from. NumPy only.
"""

import dataclasses
import math

from keras_vit.data.source import SPLIT_SEED
from keras_vit.training.settings import check_validation_fraction as check_fraction

CARVE_PARTS = ("train", "validation")


def carve_sizes(count, fraction):
    """`(train, validation)` example counts of `count` examples with `fraction` held out.

    Raises:
        ValueError: a part would be empty (too few examples for the fraction).
    """
    check_fraction(fraction)
    held_out = math.floor(fraction * count + 0.5)
    if held_out < 1 or count - held_out < 1:
        raise ValueError(
            f"validation_fraction (--validation-fraction) {fraction} of the {count} training "
            f"examples leaves {count - held_out} for training and {held_out} for validation; "
            "each needs at least 1. Use another fraction (0: no validation split) or more data. "
            f"Received: validation_fraction={fraction!r}"
        )
    return count - held_out, held_out


def carve_indices(count, fraction, seed=SPLIT_SEED, labels=None):
    """`(train, validation)` sorted index arrays of `count` examples, disjoint and complete.

    With `labels`, each class gives its share of the validation examples (largest remainders
    settle the rounding), its examples picked by a seeded permutation; without, a seeded
    permutation of all examples. The same arguments give the same indices on every run.

    Example:

    >>> import numpy as np
    >>> train, val = carve_indices(10, 0.2, labels=np.array([0] * 5 + [1] * 5))
    >>> len(train), len(val), sorted(np.array([0] * 5 + [1] * 5)[val].tolist())
    (8, 2, [0, 1])
    """
    import numpy as np

    _, held_out = carve_sizes(count, fraction)
    rng = np.random.default_rng(seed)
    if labels is None:
        picked = rng.permutation(count)[:held_out]
    else:
        labels = np.asarray(labels)
        if labels.shape != (count,):
            raise ValueError(f"Expected {count} labels. Received: {labels.shape}")
        classes, counts = np.unique(labels, return_counts=True)
        quota = fraction * counts
        take = np.floor(quota).astype(int)
        extra = held_out - int(take.sum())
        order = np.argsort(-(quota - take), kind="stable")  # largest remainders first
        take[order[:extra]] += 1
        picked = np.concatenate(
            [
                rng.permutation(np.flatnonzero(labels == c))[:k]
                for c, k in zip(classes, take, strict=True)
            ]
        )
    mask = np.zeros(count, bool)
    mask[picked] = True
    return np.flatnonzero(~mask), np.flatnonzero(mask)


@dataclasses.dataclass(frozen=True)
class Carve:
    """Which part of a carved training split a source returns.

    Attributes:
        fraction: float in (0, 1). Share of the training split held out for validation.
        part: `"train"` (what is left) or `"validation"` (the held-out share).
        seed: int. The permutation's seed. Defaults to `SPLIT_SEED` (0): every run of a
            dataset holds out the same examples, whatever its training seed.
    """

    fraction: float
    part: str = "train"
    seed: int = SPLIT_SEED

    def __post_init__(self):
        check_fraction(self.fraction)
        if self.part not in CARVE_PARTS:
            raise ValueError(f"part must be one of {CARVE_PARTS}. Received: part={self.part!r}")

    def indices(self, count, labels=None):
        """The sorted indices of this part of `count` examples (see `carve_indices`)."""
        train, validation = carve_indices(count, self.fraction, self.seed, labels)
        return train if self.part == "train" else validation

    def describe(self, how):
        """`"carved from train (fraction 0.1, seed 0, <how>)"`: the validation split's origin."""
        return f"carved from train (fraction {self.fraction}, seed {self.seed}, {how})"
