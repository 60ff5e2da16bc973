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
from keras_vit.runner.config import make_config, vit_kwargs
from keras_vit.runner.flexi import check_patch_sizes, flexi_model
from keras_vit.runner.run import run_training

# Table 3 / Appendix B.1: ImageNet-21k, ViT-B/16 (lr 1e-3, wd 0.03, dropout 0.1), Adam 0.9/0.999,
# batch 4096, 10k linear warm-up then linear decay, 90 epochs, 224 px, pre-logits of hidden size.
PAPER = dict(
    model="B/16",
    model_overrides={},
    image_size=224,
    dataset="tfds:imagenet21k",
    eval_split=None,
    batch_size=4096,
    epochs=90,
    steps=None,
    optimizer="adamw",
    learning_rate=1e-3,
    weight_decay=0.03,
    warmup_steps=10_000,
    decay="linear",
    global_clipnorm=1.0,
    gradient_accumulation_steps=None,
    label_smoothing=0.0,
    dropout_rate=0.1,
    patch_dropout_rate=0.0,  # patch dropout (FLIP, timm's patch_drop_rate): in training only
    drop_path_rate=0.0,  # stochastic depth (DeiT, BEiT, MAE fine-tuning): in training only
    remat=False,  # gradient checkpointing of every transformer block (memory for compute)
    # "auto" is Keras' choice: XLA on JAX, and on TensorFlow only with a GPU/TPU; True also
    # compiles TensorFlow on CPU (faster: benchmarks/RESULTS.md), on PyTorch torch.compile.
    jit_compile="auto",
    pooling="token",
    fc_norm=False,  # a LayerNorm on the pooled vector instead of the final norm (MAE, BEiT)
    representation_size=768,
    crop_scale=(0.08, 1.0),
    crop_ratio=(3 / 4, 4 / 3),
    rotation=0.0,  # degrees; > 0 rotates each crop by a random angle in [-rotation, rotation]
    flip=None,
    augment=[],
    patch_sizes=None,  # FlexiViT: a list of patch sizes, one drawn per batch (keras_vit.FlexiViT)
    # Fine-tuning toolkit (issue 33; off by default): every image N times per batch under
    # different augmentations (DeiT), a moving average of the weights kept by the optimizer
    # (its momentum; the average is the run's model), layer-wise learning-rate decay (BEiT).
    repeated_augmentation=1,
    ema=None,
    layer_decay=None,
)

# The model and data of every offline `digits` preset: a 4-layer width-64 ViT (MLP 128, 4 heads)
# with 4 px patches on scikit-learn's digits (each preset picks its image size).
DIGITS_MODEL = dict(
    model="Ti/4",
    model_overrides=dict(num_layers=4, hidden_dim=64, mlp_dim=128, num_heads=4),
    dataset="digits",
)

# The digits jitter of the fine-tuning and quickstart presets. Digits are centred: mild crops
# (area 80-100%, aspect 0.9-1.1; (0.6, 1) with ratios 3/4-4/3 gives 97.4% fine-tuning) rotated
# by up to 12 degrees in the same resampling pass (Keras' RandomRotation/Translation/Zoom layers
# resample the batch again, a blur the test images never get: 90% test accuracy with them).
DIGITS_JITTER = dict(crop_scale=(0.8, 1.0), crop_ratio=(0.9, 1.1), rotation=12.0)

# Offline default: the digits model at 16 px, batch 64, 30 epochs, AdamW 2e-3 (the paper's
# weight decay 0.03 and linear decay), 100 warm-up steps, no dropout, pre-logits of width 64.
DIGITS = dict(
    PAPER,
    **DIGITS_MODEL,
    image_size=16, batch_size=64, epochs=30,
    learning_rate=2e-3, warmup_steps=100,
    dropout_rate=0.0, representation_size=64, crop_scale=(0.6, 1.0),
)

PRESETS = {"digits": DIGITS, "paper": PAPER}


def get_config(preset="digits", smoke=False):
    """The pre-training config: `preset` `"digits"` (offline default) or `"paper"` (Table 3).

    Run settings (`out`, `overwrite`, `seed`, ...) come from `keras_vit.runner.config.RUNTIME`;
    `smoke=True` shrinks it for tests (`keras_vit.runner.config.SMOKE`: a 2-layer width-32 model,
    16 px, 3 epochs of 8 steps).
    """
    return make_config(
        PRESETS, preset, smoke, runtime=dict(out="runs/pretrain"),
        smoke_overrides=dict(representation_size=32),
    )


def build_model(num_classes, config, name=None):
    """A `ViT` from the config's variant code and model fields (`vit_kwargs`)."""
    model = ViT(config["model"], num_classes=num_classes, name=name, **vit_kwargs(config))
    return model, {"variant": config["model"], "init": "random"}


def build_flexi_model(num_classes, config):
    """`build_model`, as a `FlexiViT` when `patch_sizes` is set (`--patch-sizes`)."""
    return flexi_model(*build_model(num_classes, config), config)


def run(config, callbacks=()):
    """Pre-trains a ViT as configured; returns the metrics (also in `out/metrics.json`)."""
    check_patch_sizes(config)  # before any data is loaded
    return run_training(config, build_flexi_model, "pretrain", callbacks=callbacks)
