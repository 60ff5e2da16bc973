"""Export's self-check: the timm model `export_timm` names has exactly the state dict it writes.

`check_timm_state_dict(name, kwargs, arrays)` compares the keys and shapes of the arrays about
to be written with those of `timm.create_model(name, pretrained=False, **kwargs)`: timm's own
model, made on PyTorch's meta device (no memory, no weights) where timm imports, else
keras_vit's declaration of it (`keras_vit.weights.timm.declared`). Any difference is a
`ValueError` naming it, raised before anything is written: a name whose fixed arguments the
model does not have (LayerScale, another norm) is refused rather than written into a file
timm's strict `load_state_dict` rejects.
"""

import importlib.util
import sys

from keras_vit.weights.timm.declared import declared_state_shapes

__all__ = ["check_timm_state_dict", "expected_state_shapes", "importable_timm"]


def importable_timm():
    """timm, imported, or None where it is not installed, fails to import, or would load
    triton after TensorFlow (which crashes the process: keras_vit/_import_order.py)."""
    if importlib.util.find_spec("timm") is None:
        return None
    if "tensorflow" in sys.modules and "triton" not in sys.modules:
        if importlib.util.find_spec("triton") is not None:
            return None
    try:
        import timm
        import torch  # noqa: F401
    except Exception:  # noqa: BLE001 - a broken timm: the declared table checks instead
        return None
    return timm


def expected_state_shapes(name, kwargs, *, stem=None):
    """`({key: shape}, source)` of timm's model `name` with `kwargs`: `source` is `"timm"`
    (its model on the meta device) or `"keras_vit's declaration"`."""
    timm = importable_timm()
    if timm is not None:
        import torch

        with torch.device("meta"):
            model = timm.create_model(name, pretrained=False, **kwargs)
        return {k: tuple(v.shape) for k, v in model.state_dict().items()}, "timm"
    return declared_state_shapes(name, kwargs, stem=stem), "keras_vit's declaration"


def check_timm_state_dict(name, kwargs, arrays, *, tokens=None):
    """Raises a `ValueError` unless `arrays` has exactly the keys and shapes of timm's model.

    Args:
        name: str. The timm model name `export_timm` names.
        kwargs: dict. Its `timm.create_model` keyword arguments.
        arrays: dict `{key: array}`, the state dict about to be written.
        tokens: int. The model's patch tokens (a hybrid's grid, for the declaration).

    Returns:
        The source of the expectation (`"timm"` or `"keras_vit's declaration"`).
    """
    ours = {k: tuple(v.shape) for k, v in arrays.items()}
    backbone = {
        k.removeprefix("patch_embed.backbone."): shape
        for k, shape in ours.items()
        if k.startswith("patch_embed.backbone.")
    }
    stem = None  # a hybrid's ResNet stem, fixed by the name, as the arrays have it
    if backbone:
        features = ours["patch_embed.proj.weight"][1]
        stem = {"backbone": backbone, "features": features, "tokens": tokens}
    expected, source = expected_state_shapes(name, kwargs, stem=stem)
    missing = sorted(set(expected) - set(ours))
    unexpected = sorted(set(ours) - set(expected))
    shapes = sorted(
        f"{k}: timm {expected[k]}, written {ours[k]}"
        for k in set(expected) & set(ours)
        if tuple(expected[k]) != ours[k]
    )
    if missing or unexpected or shapes:
        arguments = [repr(name), "pretrained=False", *(f"{k}={v!r}" for k, v in kwargs.items())]
        call = ", ".join(arguments)
        raise ValueError(
            f"export_timm would write a state dict that timm.create_model({call}) does not load "
            f"(checked against {source}); nothing was written. Missing: {missing[:8]}"
            f"{' ...' if len(missing) > 8 else ''}; unexpected: {unexpected[:8]}"
            f"{' ...' if len(unexpected) > 8 else ''}; other shapes: {shapes[:8]}."
        )
    return source
