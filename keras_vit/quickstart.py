"""Quickstart: train a small ViT from scratch on scikit-learn's digits, offline, in minutes.

Command: `keras-vit quickstart` (or `python -m keras_vit quickstart`), on any backend
(`KERAS_BACKEND=tensorflow|jax|torch`). Meant for a laptop or a 2-core CPU; it reaches
>= 97.5% accuracy on a held-out 30% of the digits in a minute or two there.

`run` trains through the recipe runner (`keras_vit.recipes.quickstart`, the same code path as
`keras-vit pretrain`): 16 px digits cut into 4x4 patches, the tf.data pipeline's crop and
rotation jitter, AdamW with a linear warm-up and cosine decay, label smoothing.
"""

from keras_vit.recipes.quickstart import DEFAULTS

# The fields of `run`'s result and the metrics.json fields they are read from.
RESULT_FIELDS = dict(
    backend="backend",
    test_accuracy="test_accuracy",
    test_examples="num_eval_examples",
    train_examples="num_train_examples",
    seconds="seconds",
    parameters="num_params",
    model_path="model_path",
    config="config",
)


def config(out_dir="runs/quickstart", verbose=1, **overrides):
    """The runner config of a quickstart run (`DEFAULTS` keys as overrides)."""
    from keras_vit.models.config import ViTConfig
    from keras_vit.recipes import quickstart

    unknown = set(overrides) - set(DEFAULTS)
    if unknown:
        raise ValueError(
            f"Unknown quickstart settings {sorted(unknown)}; expected some of {sorted(DEFAULTS)}"
        )
    settings = dict(DEFAULTS, **overrides)
    sizes = ViTConfig.field_names("size")
    cfg = quickstart.get_config()
    cfg["model_overrides"] = {k: v for k, v in settings.items() if k in sizes}
    cfg.update(
        {k: v for k, v in settings.items() if k not in sizes}, out=out_dir, verbose=verbose
    )
    return cfg


def run(out_dir="runs/quickstart", verbose=1, overwrite=False, **overrides):
    """Trains, evaluates and saves the quickstart model; returns the metrics dict.

    Writes `model.keras` and `metrics.json` in `out_dir` (a finished run there raises
    `FileExistsError` unless `overwrite=True`; an interrupted one resumes).
    """
    from keras_vit.recipes import quickstart

    cfg = config(out_dir, verbose, **overrides)
    cfg["overwrite"] = overwrite
    metrics = quickstart.run(cfg)
    result = {field: metrics[key] for field, key in RESULT_FIELDS.items()}
    result["train_loss"] = metrics["history"].get("loss", [])
    return result
