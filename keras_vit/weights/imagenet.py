"""ImageNet-1k class names, shipped with the package, and `decode_predictions`.

`keras_vit/data/imagenet_classes.txt` holds one line per class in the
standard ImageNet-1k order (sorted WordNet ids, the order of the
`imagenet2012` TFDS labels used by the official fine-tuned checkpoints):
`"n01440764<TAB>tench"`. The ids come from TensorFlow Datasets'
`imagenet2012/labels.txt` (Apache-2.0), the readable names from torchvision's
`_IMAGENET_CATEGORIES` (BSD-3-Clause); see `keras_vit/data/NOTICE.md`.
Nothing is downloaded.
"""

import functools
import os

import keras
import numpy as np

from keras_vit.layers._checks import check_bool, is_int

# Package data of `keras_vit` (pyproject: `data/*.txt`), one folder above this module.
CLASSES_FILE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "imagenet_classes.txt"
)
NUM_CLASSES = 1000


@functools.lru_cache(maxsize=1)
def imagenet_classes():
    """The 1,000 ImageNet-1k classes as a tuple of `(wordnet_id, name)` in class-index order.

    Example:

    >>> imagenet_classes()[1]
    ('n01443537', 'goldfish')
    """
    with open(CLASSES_FILE, encoding="utf-8") as f:
        rows = tuple(tuple(line.rstrip("\n").split("\t")) for line in f if line.strip())
    if len(rows) != NUM_CLASSES or any(len(row) != 2 for row in rows):
        raise ValueError(f"{CLASSES_FILE} must hold {NUM_CLASSES} 'id<TAB>name' lines.")
    return rows


def decode_predictions(predictions, top=5, *, from_logits=True, model=None):
    """Names the top classes of a batch of predictions: the model's labels, or ImageNet-1k's.

    Without `model` (or for a model without class names): the ImageNet-1k classes, for the
    models built with an ImageNet-1k fine-tuned preset (e.g. `weights="augreg_in21k_ft_in1k"`),
    whose 1,000 outputs follow the standard class order. With a `model` that carries class
    names (`model.config.class_names`: a transformers checkpoint's `id2label`, timm's label
    set for the tag), those names; the first entry of each tuple is then the class index as a
    str (the WordNet id when the names are ImageNet-1k's).

    Args:
        predictions: array or tensor of shape `(batch, 1000)`: logits (the
            builders' default output) or probabilities.
        top: int. How many classes per example. Defaults to 5.
        from_logits: bool. Whether `predictions` are logits, turned into
            probabilities with a softmax; with False they are reported as
            given. Defaults to True.
        model: optional keras_vit model whose `config.class_names` name the classes.
            Defaults to None.

    Returns:
        A list with one list per example of `(wordnet_id, name, probability)`
        tuples, most likely first.

    Example:

    >>> logits = np.zeros((1, 1000), "float32"); logits[0, 1] = 10.0
    >>> decode_predictions(logits, top=1)[0][0][:2]
    ('n01443537', 'goldfish')
    """
    from_logits = check_bool(from_logits, "from_logits")
    scores = np.asarray(keras.ops.convert_to_numpy(predictions), dtype="float64")
    names = getattr(getattr(model, "config", None), "class_names", None)
    if names:
        classes = tuple((str(i), name) for i, name in enumerate(names))
        if names == tuple(label for _, label in imagenet_classes()):
            classes = imagenet_classes()
        return _decode(scores, classes, top, from_logits)
    if scores.ndim != 2 or scores.shape[1] != NUM_CLASSES:
        raise ValueError(
            f"decode_predictions expects ImageNet-1k predictions of shape (batch, {NUM_CLASSES}) "
            "(a model built with an ImageNet-1k fine-tuned preset; ImageNet-21k class names are "
            f"not shipped). Received: shape={scores.shape}"
        )
    return _decode(scores, imagenet_classes(), top, from_logits)


def _decode(scores, classes, top, from_logits):
    if scores.ndim != 2 or scores.shape[1] != len(classes):
        raise ValueError(
            f"decode_predictions expects predictions of shape (batch, {len(classes)}) (one "
            f"score per class name). Received: shape={scores.shape}"
        )
    if not is_int(top) or not 1 <= top <= len(classes):
        raise ValueError(f"top must be an int in [1, {len(classes)}]. Received: top={top!r}")
    if from_logits:
        scores = np.exp(scores - scores.max(axis=1, keepdims=True))
        scores /= scores.sum(axis=1, keepdims=True)
    results = []
    for row in scores:
        best = np.argsort(-row, kind="stable")[:top]
        results.append([(*classes[i], float(row[i])) for i in best])
    return results
