"""`load_splits`: the training, validation and test `Source`s of a run, kept apart.

The test split is the one the final figures are computed on, once; the validation split is what
per-epoch validation and `checkpoints/best.keras` see. A dataset's own `validation` split (tfds,
`imagefolder:`) is used when it is not the test split; otherwise the validation split is carved
out of the training split (`keras_vit.data.carve`), and `validation_fraction=0` means none.
"""

import dataclasses

from keras_vit.data.carve import Carve, check_fraction
from keras_vit.data.load import default_eval_split, ensure_prepared, load_source, split_names

VALIDATION_SPLIT = "validation"


@dataclasses.dataclass
class Splits:
    """The `Source`s of a run and where each came from.

    Attributes:
        train: `Source`. What the model is trained on.
        validation: `Source` or None. What per-epoch validation sees (None: no validation).
        test: `Source`. What the final figures are computed on.
        info: dict. Per split: `examples` and `source` (for metrics.json); `validation` also
            says why it is absent.
    """

    train: object
    validation: object
    test: object
    info: dict


def load_splits(
    spec,
    *,
    eval_split=None,
    validation_fraction=0.1,
    validation=True,
    data_dir=None,
    **load_kwargs,
):
    """Loads the training, validation and test splits of a dataset spec.

    Args:
        spec: str. A dataset spec (`keras_vit.data.load_source`).
        eval_split: optional str. The test split. Defaults to `default_eval_split(spec)`.
        validation_fraction: float in [0, 1). Share of the training split held out for
            validation when the dataset has no validation split of its own; 0: none.
            Defaults to 0.1.
        validation: bool. Whether the run validates at all; False loads no validation split.
            Defaults to True.
        data_dir: optional str. TensorFlow Datasets directory.
        **load_kwargs: `num_channels`, `on_corrupt`, `download` for `load_source`.

    Returns:
        A `Splits`.

    Raises:
        ValueError: `validation_fraction` outside [0, 1), or a carve that leaves a part empty;
            the errors of `load_source`.
    """
    check_fraction(validation_fraction)
    common = dict(data_dir=data_dir, **load_kwargs)
    ensure_prepared(spec, data_dir, load_kwargs.get("download", False))
    test_split = eval_split or default_eval_split(spec, data_dir)
    test = load_source(spec, test_split, **common)
    own = split_names(spec, data_dir) or set()
    train_from = f"{spec!r} split 'train'"
    if not validation:
        train, val = load_source(spec, "train", **common), None
        note = "none: no per-epoch validation"
    elif VALIDATION_SPLIT in own and test_split != VALIDATION_SPLIT:
        train = load_source(spec, "train", **common)
        val = load_source(spec, VALIDATION_SPLIT, **common)
        note = f"the dataset's own {VALIDATION_SPLIT!r} split"
    elif not validation_fraction:
        train, val = load_source(spec, "train", **common), None
        note = "none (validation_fraction 0): no per-epoch validation, no checkpoints/best.keras"
    else:
        train = load_source(spec, "train", carve=Carve(validation_fraction, "train"), **common)
        carve = Carve(validation_fraction, "validation")
        val = load_source(spec, "train", carve=carve, **common)
        how = "the last examples in tfds' order" if spec.startswith("tfds:") else "stratified"
        note = carve.describe(how)
        train_from += ", less the validation split"
    info = {
        "train": {"examples": train.num_examples, "source": train_from},
        "validation": {"examples": val.num_examples if val else 0, "source": note},
        "test": {"examples": test.num_examples, "source": f"{spec!r} split {test_split!r}"},
    }
    return Splits(train, val, test, info)
