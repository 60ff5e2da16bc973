"""Masked-autoencoder pre-training recipe (He et al., 2022): `keras-vit pretrain-mae`.

Self-supervised: labels are never read. 75% of every image's patches are dropped before the
encoder (which sees a quarter of the tokens), a light decoder with mask tokens reconstructs
their pixels, and the loss is the MSE on the dropped patches (`keras_vit.models.mae`). The
paper's ImageNet-1k settings (`--preset paper`, `recipes/pretrain_mae_imagenet_b16.py`): AdamW
betas (0.9, 0.95), base learning rate 1.5e-4 x batch / 256 (batch 4096: 2.4e-3), weight decay
0.05, 40 warm-up epochs, cosine decay, 800 epochs, random resized crops (0.2, 1) with flips,
per-patch normalised targets, decoder 512 wide, 8 blocks, 16 heads.

Command (defaults: the offline `digits` preset: the 4-layer width-64 ViT of every digits recipe,
4 px patches on 16 px digits; a minute or two on 2 CPU cores):

    keras-vit pretrain-mae --out runs/mae
    keras-vit finetune --init runs/mae/encoder.keras --out runs/mae_finetune

Artefacts in `out`: `model.keras` (the whole `MaskedAutoencoder`), `encoder.keras` (the plain
`ViT(include_top=False, pooling=None)` encoder for `keras-vit finetune --init`),
`reconstructions.png` (masked input / reconstruction / original of a few held-out images),
`metrics.json` (config, per-epoch loss, the test split's loss before and after training:
`initial_test_loss`, `test_loss`),
`log.csv`, `checkpoints/last.keras` and a `backup/` for resuming (as every run).
"""

import os

import numpy as np

from keras_vit.distribution.checkpoint import is_sharded_model
from keras_vit.models import mae
from keras_vit.runner import backup, presets, pretrain_mpp
from keras_vit.runner.run import run_training
from keras_vit.training.distribution import without_distribution

# The presets (He et al., 2022, Appendix A.1, and the offline digits one) are data in
# keras_vit.runner.presets, read there without a framework by the command line.
PAPER = presets.MAE_PAPER
DIGITS = presets.MAE_DIGITS
PRESETS = {"digits": DIGITS, "paper": PAPER}
# The MAE settings of a config, passed to `mae.build_mae_model` as they are.
MAE_KEYS = ("mask_ratio", "norm_pix_loss", "decoder_hidden_dim", "decoder_num_layers",
            "decoder_num_heads", "decoder_mlp_dim")  # fmt: skip
GRID_FILE = "reconstructions.png"


def get_config(preset="digits", smoke=False):
    """The MAE pre-training config: `preset` `"digits"` (offline default) or `"paper"`.

    `smoke=True` shrinks it for tests (batch 16, 6 steps, a 1-block width-16 decoder).
    """
    return presets.get_config("pretrain_mae", preset, smoke)


def build_model(num_classes, config):
    """`mae.build_mae_model` from a config's model fields (`num_classes` unused)."""
    overrides = pretrain_mpp.builder_overrides(config)
    model = mae.build_mae_model(
        config["model"],
        image_size=config["image_size"],
        num_channels=config["num_channels"],
        seed=config["seed"],
        **{key: config[key] for key in MAE_KEYS},
        **overrides,
    )
    return model, {"variant": config["model"], "init": "random", "mask_ratio": config["mask_ratio"]}


def save_encoder_and_grid(model, setup):
    """Saves `encoder.keras` (for `keras-vit finetune --init`) and `reconstructions.png`.

    With several processes, process 0 reads back the `model.keras` it has just written; the
    other processes write nothing. A model sharded over devices writes `encoder.sharded`; its
    grid is drawn in one process only (with several, each holds a part of the model).
    """
    from keras_vit.inspection.mae_grid import save_reconstruction_grid

    model, metrics = pretrain_mpp.write_encoder(model, setup, mae.extract_mae_encoder)
    if model is None:
        return metrics
    if setup.num_processes > 1 and is_sharded_model(model):  # each process holds a part
        return {**metrics, "reconstructions": "not drawn: the model is sharded over processes"}
    grid = os.path.join(setup.out, GRID_FILE)
    images = np.asarray(next(iter(setup.eval_ds))[0])[:6]
    noise = np.random.default_rng(0).uniform(
        size=(len(images), model.encoder.patch_encoder.num_patches)
    )
    with without_distribution():  # 6 images, drawn whole (a sharded model's too)
        backup.atomic_write(
            grid, lambda target: save_reconstruction_grid(model, images, target, noise)
        )
    return {**metrics, "reconstructions": grid}


def run(config, callbacks=()):
    """Pre-trains a masked autoencoder; returns the metrics (also in metrics.json)."""
    pretrain_mpp.check_self_supervised(config)
    return run_training(
        config, build_model, "pretrain_mae", callbacks=callbacks,
        compile=pretrain_mpp.compile_mpp, evaluate=pretrain_mpp.evaluate_mpp,
        finish=save_encoder_and_grid,
    )  # fmt: skip
