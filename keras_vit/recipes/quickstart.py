"""Quickstart recipe: a small ViT trained from scratch on scikit-learn's digits, offline.

Command: `keras-vit quickstart` (or `python -m keras_vit quickstart`), on any backend. Meant for a
laptop or a 2-core CPU: about a minute with JAX there, >= 97.5% test accuracy on the fixed
stratified 30% of the digits held out (`keras_vit.data`'s digits split).

It goes through the same runner as every recipe (`common.run_training`): the tf.data pipeline's
random resized crop and rotation (one resampling pass), AdamW with a linear warm-up and cosine
decay, label smoothing, a resumable backup; checkpoints, TensorBoard and per-epoch validation are
off (they cost time and the quickstart evaluates once at the end).
"""

import functools

from keras_vit.recipes import common, pretrain

# The settings `run` takes as keyword overrides (the model, the schedule and the seed).
DEFAULTS = dict(
    # a 4-layer width-64 ViT (MLP 128, 4 heads) cutting 16 px digits into 4 px patches
    image_size=16, patch_size=4, num_layers=4, hidden_dim=64, mlp_dim=128, num_heads=4,
    # 60 epochs of batch 64, AdamW 2e-3 with weight decay 0.05 after 3 warm-up epochs
    epochs=60, batch_size=64, learning_rate=2e-3, weight_decay=0.05, warmup_epochs=3,
    label_smoothing=0.1,
    seed=0,
)

# The supervised digits preset (a 4-layer width-64 ViT, 4 px patches on 16 px digits) with the
# quickstart's numbers (`DEFAULTS`: 60 epochs of batch 64, AdamW 2e-3 with
# weight decay 0.05, label smoothing 0.1), cosine decay after 3 warm-up epochs (`get_config`),
# the fine-tuning jitter (`pretrain.DIGITS_JITTER`) and no pre-logits layer.
TRAINING_SETTINGS = ("image_size", "epochs", "batch_size", "learning_rate", "weight_decay")
DIGITS = dict(
    pretrain.DIGITS,
    **pretrain.DIGITS_JITTER,
    **{key: DEFAULTS[key] for key in (*TRAINING_SETTINGS, "label_smoothing")},
    warmup_steps=0,
    decay="cosine",
    representation_size=None,
)

PRESETS = {"digits": DIGITS}


def get_config(preset="digits", smoke=False):
    """The quickstart config (grayscale digits, 3 warm-up epochs, no checkpoints/TensorBoard)."""
    return common.make_config(
        PRESETS,
        preset,
        smoke,
        runtime=dict(
            out="runs/quickstart",
            num_channels=1,
            warmup_epochs=DEFAULTS["warmup_epochs"],
            validation_freq=0,
            checkpoints=False,
            tensorboard=False,
            backup_every=10,  # a 60-epoch run of seconds per epoch: back up every 10 epochs
        ),
        smoke_overrides=dict(validation_freq=0, warmup_epochs=1),
    )


# The pre-training builder, the model named `vit_quickstart`.
build_model = functools.partial(pretrain.build_model, name="vit_quickstart")


def run(config, callbacks=()):
    """Trains the quickstart model; returns the metrics (also in `out/metrics.json`)."""
    return common.run_training(config, build_model, "quickstart", callbacks=callbacks)
