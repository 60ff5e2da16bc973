"""`from_huggingface`'s own arguments, checked before anything is read or downloaded, and the
message of a path that is neither a local folder nor a Hub repo."""

import os

from keras_vit.layers._checks import check_bool
from keras_vit.weights.hub_errors import check_cache_dir, check_revision

__all__ = ["check_classifier_present", "check_huggingface_arguments", "not_found_anywhere"]

# transformers' architectures whose checkpoint holds a classifier (`classifier.weight` / `bias`).
CLASSIFIERS = ("ViTForImageClassification",)


def check_huggingface_arguments(path, revision, cache_dir, force_download):
    """Checks `path` (a str or path-like), `revision`, `cache_dir` and `force_download` (a
    bool); returns `force_download` as a bool. ValueErrors name the argument and the value."""
    if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)):
        raise ValueError(
            "path must be a transformers save_pretrained folder or a Hub repo id (a str or "
            f"path-like). Received: path={path!r} (type {type(path).__name__})"
        )
    if not os.fspath(path).strip():
        raise ValueError("path must name a folder or a Hub repo id. Received: path=''")
    force_download = check_bool(force_download, "force_download")
    check_revision(revision)
    check_cache_dir(cache_dir)
    return force_download


def not_found_anywhere(path, error):
    """The FileNotFoundError of a `path` that looked like a Hub repo id: no such local folder
    either (`models/vitt`, a typo of a folder, reads as the repo `models/vitt`)."""
    return FileNotFoundError(
        f"{os.fspath(path)!r} is no local folder (nothing at {os.path.abspath(path)!r}) and, "
        f"read as a Hub repo id, could not be loaded: {error}"
    )


def check_classifier_present(hf, arrays, num_classes, config_path, weights_path):
    """A `config.json` naming a classifier architecture needs the classifier in the weights:
    without it (and without `num_classes`, which asks for a new head or none) the model would
    silently come out headless. A ValueError saying both files and the choices."""
    named = [a for a in hf.get("architectures") or () if a in CLASSIFIERS]
    if named and num_classes is None and "classifier.weight" not in arrays:
        raise ValueError(
            f"{config_path} names {named[0]} (a model with a classifier), but "
            f"{weights_path} has no classifier.weight: the file does not hold what its config "
            "says. Pass num_classes=N for a new zero-initialised N-way head, or num_classes=0 "
            "for the encoder without a head."
        )
