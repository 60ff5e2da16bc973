"""A recipe config: the run settings every recipe shares (`RUNTIME`), the smoke shrink (`SMOKE`),
presets merged into a config, the checks of its numbers, and the builder arguments it holds."""

import copy

# The presets' run settings and the config checks have their own homes (no framework imported
# there: the command line checks a config before TensorFlow, JAX or PyTorch is imported).
from keras_vit.runner.checks import check_config, check_warmup  # noqa: F401  (re-exported)
from keras_vit.runner.presets import RUNTIME, SMOKE, make_config  # noqa: F401  (re-exported)


def merge(config, overrides):
    """Returns a copy of `config` with the non-None `overrides` applied (unknown keys raise)."""
    config = copy.deepcopy(config)
    for key, value in overrides.items():
        if value is None:
            continue
        if key not in config:
            raise ValueError(f"Unknown config key {key!r}. Known: {sorted(config)}")
        config[key] = value
    return config



def jsonable(value):
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


def vit_kwargs(config):
    """Builder keyword arguments from a config: `model_overrides` and the `ViTConfig` fields.

    A recipe config holds some builder arguments under their own names (`image_size`,
    `num_channels`, `dropout_rate`, `remat`, `pooling`, `representation_size`); the sizes of
    the variant code are changed through `model_overrides`.
    """
    from keras_vit.models.config import ViTConfig

    kwargs = dict(config["model_overrides"] or {})
    kwargs.update({key: config[key] for key in ViTConfig.argument_names() if key in config})
    return kwargs


def fit_verbosity(verbose, stream=None):
    """Keras `fit` verbosity for a recipe's `verbose` setting.

    `"auto"` is a progress bar (1) when standard output is a terminal and one line per epoch
    (2) otherwise: a progress bar's ANSI escapes would fill a redirected log (what the
    quickstart's `--verbose 2` does). 0, 1 and 2 are kept as given.
    """
    if verbose != "auto":
        return verbose
    import sys

    stream = sys.stdout if stream is None else stream
    try:
        return 1 if stream.isatty() else 2
    except (AttributeError, ValueError):  # a replaced or closed stream
        return 2
