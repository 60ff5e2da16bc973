"""`--naflex`: fine-tuning a NaFlex model on images at their own aspect ratio.

The run's model is a NaFlex model (`naflex=True`: a from-scratch one, a NaFlex checkpoint, or
the NaFlex twin of a plain `--init` checkpoint) and its data NaFlex batches of at most
`max_patches` patches per image (`keras_vit.data.naflex_pipelines`), made once the model, and
with it the patch size, is known.
"""

import numbers

from keras_vit.runner.flag_names import flag_name

# Options that work on square image batches only.
_SQUARE_ONLY = (
    ("patch_sizes", None),
    ("teacher", None),
    ("augment", []),
    ("repeated_augmentation", 1),
)


def check_naflex(config):
    """Checks `naflex` / `max_patches` (and what they exclude) before any data is loaded."""
    naflex, budget = config.get("naflex", False), config.get("max_patches")
    if not naflex:
        if budget is not None:
            raise ValueError(
                f"max_patches ({flag_name('max_patches')}) is the patch budget of NaFlex "
                f"batches: add {flag_name('naflex')}. Received: max_patches={budget!r}, "
                f"naflex={naflex!r}"
            )
        return
    if isinstance(budget, bool) or not isinstance(budget, numbers.Integral) or budget < 1:
        raise ValueError(
            f"{flag_name('naflex')} needs a patch budget: max_patches "
            f"({flag_name('max_patches')}) must be a positive integer. Received: "
            f"max_patches={budget!r}"
        )
    for key, default in _SQUARE_ONLY:
        value = config.get(key, default)
        if value != default and not (key == "augment" and not value):
            raise ValueError(
                f"{flag_name('naflex')} and {flag_name(key)} do not combine (NaFlex batches "
                f"keep each image's aspect ratio). Received: {key}={value!r}"
            )


def check_model(model, config):
    """A NaFlex model for a NaFlex run, a plain one otherwise (clear error naming the flag)."""
    from keras_vit.models.config import ViTConfig

    is_naflex = bool(getattr(getattr(model, "config", None), "naflex", False))
    if is_naflex and not config.get("naflex"):
        raise ValueError(
            f"The model is a NaFlex model (its input is patches, coordinates and validity): "
            f"fine-tune it with {flag_name('naflex')} {flag_name('max_patches')} N. "
            "Received: naflex=False"
        )
    if config.get("naflex") and not is_naflex:
        raise ValueError(
            f"{flag_name('naflex')} needs a NaFlex model (a keras_vit ViT). Received: "
            f"{type(model).__name__}"
        )
    return ViTConfig.from_model(model).patch_size if is_naflex else None
