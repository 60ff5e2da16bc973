"""Masked-patch-prediction pre-training recipe (paper Sec. 4.6, Appendix B.1.2).

Self-supervised: labels are never read. 50% of the patch embeddings of every image are
corrupted (80% mask embedding, 10% another patch's embedding, 10% unchanged) and the model
predicts the 3-bit mean colour of each corrupted patch (`keras_vit.models.mpp`). Adam, LR 2e-4, 10k
warm-up steps, cosine decay, batch 4096, 1M steps.

Command (defaults: the offline `digits` preset: a 4-layer width-64 ViT, 4 px patches on 16 px
digits; about a minute on 2 CPU cores):

    keras-vit pretrain-mpp --out runs/mpp
    keras-vit finetune --init runs/mpp/encoder.keras --out runs/mpp_finetune
    python -m keras_vit pretrain-mpp --out runs/mpp          # the same

Paper preset (ViT-B/16, 224 px; meant for a TPUv3-8 class machine or 8 GPUs with
`--distribution data_parallel`, days of compute):

    keras-vit pretrain-mpp --preset paper --dataset tfds:imagenet2012 --data-dir DIR \
        --distribution data_parallel --mixed-precision mixed_bfloat16 --out runs/b16_mpp

Expected: the paper's ViT-B/16 reaches 79.9% ImageNet top-1 after fine-tuning, +2 points over
training from scratch (Sec. 4.6). On digits see benchmarks/mpp_digits.py and
benchmarks/RESULTS.md for what it measures here.

Artefacts in `out`: `model.keras` (the whole pre-training model), `encoder.keras` (the plain
`ViT(include_top=False, pooling=None)` encoder: mask embedding and prediction head dropped; give
it to `keras-vit finetune --init`), `metrics.json` (config, per-epoch loss, the test split's
masked-patch loss before and after training: `initial_test_loss`, `test_loss`), `log.csv`,
`checkpoints/last.keras` and a `backup/` for resuming.
"""

import os

from keras_vit.distribution.checkpoint import is_sharded_model, save_sharded
from keras_vit.models import mpp
from keras_vit.runner import backup, presets
from keras_vit.runner.backup import sharded_path
from keras_vit.runner.compile import compile_kwargs, optimizer_from_config
from keras_vit.runner.run import run_training
from keras_vit.saving import load_model
from keras_vit.training import multihost
from keras_vit.training.distribution import without_distribution

# The presets (paper Appendix B.1.2, and the offline digits one) are data in
# keras_vit.runner.presets, read there without a framework by the command line.
PAPER = presets.MPP_PAPER
SHARED_WITH_PRETRAIN = presets.SHARED_WITH_PRETRAIN
DIGITS = presets.MPP_DIGITS
PRESETS = {"digits": DIGITS, "paper": PAPER}


def get_config(preset="digits", smoke=False):
    """The MPP pre-training config: `preset` `"digits"` (offline default) or `"paper"` (B.1.2).

    No per-epoch validation (labels are never read). `smoke=True` shrinks it for tests
    (`keras_vit.runner.config.SMOKE` with batch 16 and 6 steps).
    """
    return presets.get_config("pretrain_mpp", preset, smoke)


# The masked-patch-prediction settings of a config, passed to `mpp.build_mpp_model` as they are.
MPP_KEYS = ("target", "corruption_rate", "mask_fraction", "random_fraction", "seed")


def builder_overrides(config):
    """Builder arguments of a config's `model_overrides`, `dropout_rate`, `drop_path_rate`
    and `remat` (shared with `pretrain_mae`)."""
    overrides = dict(config["model_overrides"] or {})
    for rate in ("dropout_rate", "drop_path_rate"):
        if config.get(rate):
            overrides[rate] = config[rate]
    if config["remat"]:
        overrides["remat"] = True
    return overrides


def build_model(num_classes, config):
    """`mpp.build_mpp_model` from a config's model fields (`num_classes` unused)."""
    overrides = builder_overrides(config)
    model = mpp.build_mpp_model(
        config["model"],
        image_size=config["image_size"],
        num_channels=config["num_channels"],
        **{key: config[key] for key in MPP_KEYS},
        **overrides,
    )
    return model, {"variant": config["model"], "init": "random", "target": config["target"]}


def compile_mpp(model, config, setup):
    """Compiles with the model's own masked-patch loss; returns the untrained test-split loss."""
    optimizer = optimizer_from_config(config, setup.total_steps, setup.warmup_steps, model)
    model.compile(optimizer=optimizer, **compile_kwargs(config))
    # The untrained model's test-split loss: the reference the final loss must beat.
    initial = None
    if not setup.start_epoch:
        initial = float(model.evaluate(setup.eval_ds, steps=setup.eval_steps, verbose=0))
    return {"initial_test_loss": initial}


def evaluate_mpp(model, setup):
    """The final loss on the test split (`setup.eval_ds`)."""
    return {"test_loss": float(model.evaluate(setup.eval_ds, steps=setup.eval_steps, verbose=0))}


def write_encoder(model, setup, extract):
    """Saves the plain ViT encoder `extract(model)` (`encoder.keras`) for `keras-vit finetune
    --init` (shared with `pretrain_mae`). A model sharded over devices gives `encoder.sharded`
    (extracted in every process inside the distribution, written without gathering).

    With several processes, process 0 extracts it from the `model.keras` it has just written
    (read outside the distribution: the trained model's weights may be sharded over processes);
    the other processes write nothing.

    Returns:
        `(model, metrics)`: the trained model as read (None on the processes that write
        nothing) and the encoder's metrics.
    """
    path = os.path.join(setup.out, "encoder.keras")
    if is_sharded_model(model):  # every process, inside the distribution: its own blocks
        encoder = extract(model)
        path = save_sharded(
            encoder, sharded_path(path), include_optimizer=False, overwrite=True
        )
        return model, {"encoder_params": int(encoder.count_params()), "encoder_path": path}
    if setup.num_processes > 1:
        if not multihost.is_chief():
            return None, {"encoder_path": path}
        with without_distribution():
            model = load_model(os.path.join(setup.out, "model.keras"))
    encoder = extract(model)
    backup.atomic_write(path, encoder.save)
    return model, {"encoder_params": int(encoder.count_params()), "encoder_path": path}


def save_encoder(model, setup):
    """Saves the plain ViT encoder (`encoder.keras`, see `write_encoder`); its metrics."""
    return write_encoder(model, setup, mpp.extract_encoder)[1]


def check_self_supervised(config):
    """A ValueError for the options of supervised pre-training and fine-tuning only."""
    if config.get("patch_sizes") is not None:
        raise ValueError("--patch-sizes (FlexiViT) is an option of pretrain and finetune only.")
    if config.get("patch_dropout_rate"):
        raise ValueError("--patch-dropout-rate is an option of pretrain and finetune only.")
    if config.get("pooling") not in (None, "token") or config.get("fc_norm"):
        raise ValueError(
            "--pooling and --fc-norm shape a classifier head: options of pretrain and finetune "
            "only (self-supervised pre-training trains an encoder without one). Received: "
            f"pooling={config.get('pooling')!r}, fc_norm={config.get('fc_norm')!r}"
        )


def run(config, callbacks=()):
    """Pre-trains with masked patch prediction; returns the metrics (also in metrics.json)."""
    check_self_supervised(config)
    # The pipelines yield (images, labels); MaskedPatchPredictor.compute_loss ignores labels.
    return run_training(
        config, build_model, "pretrain_mpp", callbacks=callbacks, compile=compile_mpp,
        evaluate=evaluate_mpp, finish=save_encoder,
    )
