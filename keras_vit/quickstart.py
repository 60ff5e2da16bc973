"""Quickstart: train a small ViT from scratch on scikit-learn's digits, offline, in minutes.

Command: `keras-vit quickstart` (or `python -m keras_vit quickstart`), on any backend
(`KERAS_BACKEND=tensorflow|jax|torch`). Meant for a laptop or a 2-core CPU; it reaches
>= 97.5% accuracy on a held-out 30% of the digits in a minute or two there.

`run` trains through the recipe runner (`keras_vit.recipes.quickstart`, the same code path as
`keras-vit pretrain`): 16 px digits cut into 4x4 patches, the tf.data pipeline's crop and
rotation jitter, AdamW with a linear warm-up and cosine decay, label smoothing. `load_digits`
and `random_affine` (the former NumPy/SciPy path) stay for `benchmarks/mpp_digits.py`.
"""

import numpy as np
import scipy.ndimage

# The settings `run` takes as keyword overrides (the model, the schedule and the seed).
DEFAULTS = dict(
    # a 4-layer width-64 ViT (MLP 128, 4 heads) cutting 16 px digits into 4 px patches
    image_size=16, patch_size=4, num_layers=4, hidden_dim=64, mlp_dim=128, num_heads=4,
    # 60 epochs of batch 64, AdamW 2e-3 with weight decay 0.05 after 3 warm-up epochs
    epochs=60, batch_size=64, learning_rate=2e-3, weight_decay=0.05, warmup_epochs=3,
    label_smoothing=0.1,
    seed=0,
)
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


def load_digits(image_size=16, test_fraction=0.3, seed=0):
    """scikit-learn's digits as 0..255 float images `(N, S, S, 1)`, split train/test.

    The split is stratified and fixed by `seed` (the same 30% test split everywhere).
    """
    from sklearn.datasets import load_digits as sk_load_digits
    from sklearn.model_selection import train_test_split

    digits = sk_load_digits()
    images = digits.images.astype("float32") * (255.0 / 16.0)
    zoom = image_size / images.shape[1]
    if zoom != 1:
        images = scipy.ndimage.zoom(images, (1, zoom, zoom), order=1)
    images = np.clip(images, 0, 255)[..., None]
    return train_test_split(
        images,
        digits.target.astype("int32"),
        test_size=test_fraction,
        random_state=seed,
        stratify=digits.target,
    )


def random_affine(images, rng, max_shift=1.5, max_rotation=12.0, scale=(0.9, 1.1)):
    """Jitters a batch `(B, S, S, 1)` with a random rotation, scale and shift per image.

    One `scipy.ndimage.map_coordinates` call for the whole batch (bilinear, zeros outside).
    """
    b, size = images.shape[0], images.shape[1]
    centre = (size - 1) / 2.0
    angle = np.deg2rad(rng.uniform(-max_rotation, max_rotation, b))
    s = rng.uniform(*scale, b)
    cos, sin = np.cos(angle) / s, np.sin(angle) / s
    shift = rng.uniform(-max_shift, max_shift, (b, 2))
    rows, cols = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
    r = rows[None] - centre + shift[:, 0, None, None]
    c = cols[None] - centre + shift[:, 1, None, None]
    src_r = cos[:, None, None] * r - sin[:, None, None] * c + centre
    src_c = sin[:, None, None] * r + cos[:, None, None] * c + centre
    index = np.broadcast_to(np.arange(b)[:, None, None], src_r.shape)
    out = scipy.ndimage.map_coordinates(
        images[..., 0], np.stack([index, src_r, src_c]), order=1, mode="constant"
    )
    return out[..., None].astype(images.dtype)


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
