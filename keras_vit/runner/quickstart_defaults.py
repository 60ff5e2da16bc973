"""The quickstart's default settings and its runner config, importable without a framework (the
CLI shows them in `keras-vit quickstart --help` and checks a quickstart's config before
TensorFlow, JAX or PyTorch is imported)."""

from keras_vit.runner import presets

# The settings that size the model (`ViTConfig.field_names("size")`: a test checks they agree).
SIZES = ("patch_size", "num_layers", "hidden_dim", "mlp_dim", "num_heads")

# The settings `train` takes as keyword overrides (data in keras_vit.runner.presets).
DEFAULTS = presets.QUICKSTART_DEFAULTS


def quickstart_config(out_dir=None, verbose=1, **overrides):
    """The runner config of a quickstart run (`DEFAULTS` keys as overrides); `out_dir` None:
    `runs/quickstart/<backend>`."""
    unknown = set(overrides) - set(DEFAULTS)
    if unknown:
        raise ValueError(
            f"Unknown quickstart settings {sorted(unknown)}; expected some of {sorted(DEFAULTS)}"
        )
    settings = dict(DEFAULTS, **overrides)
    if overrides.get("warmup_epochs") is not None:
        settings["warmup_fraction"] = None  # given: used as it is (and refused if too long)
    cfg = presets.get_config("quickstart")
    cfg["model_overrides"] = {k: v for k, v in settings.items() if k in SIZES}
    cfg.update(
        {k: v for k, v in settings.items() if k not in SIZES},
        out=presets.quickstart_out() if out_dir is None else out_dir,
        verbose=verbose,
    )
    # A validation split (validation_fraction > 0) is validated on after every epoch.
    cfg["validation_freq"] = 1 if cfg["validation_fraction"] else 0
    return cfg
