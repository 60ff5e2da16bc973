"""Supervised pre-training recipe (paper Sec. 4.1, Appendix B.1, Table 3).

Command (defaults: the offline `digits` preset, a few minutes on 2 CPU cores):

    keras-vit pretrain --out runs/pretrain
    python -m keras_vit pretrain --out runs/pretrain         # the same

Paper preset (ViT-B/16 on ImageNet-21k, 224 px; meant for a TPUv3-8 class machine or 8 GPUs with
`--distribution data_parallel`, days of compute):

    keras-vit pretrain --preset paper --dataset tfds:imagenet21k --data-dir DIR \
        --distribution data_parallel --mixed-precision mixed_bfloat16 --out runs/b16_i21k

Expected: the digits preset reaches about 95% test accuracy (30% of digits held out) at 16 px;
the paper preset is the upstream model that reaches 84-85% ImageNet top-1 after fine-tuning at
384 px (Table 2, ViT-B/16 ImageNet-21k).
"""

from keras_vit.models.vit import ViT
from keras_vit.runner import presets
from keras_vit.runner.checks import check_recipe_config
from keras_vit.runner.config import vit_kwargs
from keras_vit.runner.flexi import flexi_model
from keras_vit.runner.run import run_training

# The presets (paper Table 3 / Appendix B.1, and the offline digits one) are data in
# keras_vit.runner.presets, read there without a framework by the command line.
PAPER = presets.PRETRAIN_PAPER
DIGITS_MODEL = presets.DIGITS_MODEL
DIGITS_JITTER = presets.DIGITS_JITTER
DIGITS = presets.PRETRAIN_DIGITS
PRESETS = {"digits": DIGITS, "paper": PAPER}


def get_config(preset="digits", smoke=False):
    """The pre-training config: `preset` `"digits"` (offline default) or `"paper"` (Table 3).

    Run settings (`out`, `overwrite`, `seed`, ...) come from `keras_vit.runner.config.RUNTIME`;
    `smoke=True` shrinks it for tests (`keras_vit.runner.config.SMOKE`: a 2-layer width-32 model,
    16 px, 3 epochs of 8 steps).
    """
    return presets.get_config("pretrain", preset, smoke)


def build_model(num_classes, config, name=None):
    """A `ViT` from the config's variant code and model fields (`vit_kwargs`)."""
    model = ViT(config["model"], num_classes=num_classes, name=name, **vit_kwargs(config))
    return model, {"variant": config["model"], "init": "random"}


def build_flexi_model(num_classes, config):
    """`build_model`, as a `FlexiViT` when `patch_sizes` is set (`--patch-sizes`)."""
    return flexi_model(*build_model(num_classes, config), config)


def run(config, callbacks=()):
    """Pre-trains a ViT as configured; returns the metrics (also in `out/metrics.json`)."""
    check_recipe_config("pretrain", config)  # before any data is loaded
    return run_training(config, build_flexi_model, "pretrain", callbacks=callbacks)
