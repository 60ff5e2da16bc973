"""Fine-tune the official ImageNet-21k ViT-B/16 on CIFAR-10 at 384 px (Sec. 4.1, App. B.1.1).

Command (ViT-B_16.npz is the official checkpoint gs://vit_models/imagenet21k/ViT-B_16.npz):

    keras-vit finetune --config recipes/finetune_cifar10_b16.py --data-dir DIR \\
        --weights ViT-B_16.npz

Hardware: one TPUv3-8 or 8 GPUs (data parallel); hours. The position embedding is resampled
from the checkpoint's 14x14 grid to 24x24 and the head is replaced by a zero-initialised one.

Expected: 98.1-99.0% CIFAR-10 test accuracy (Table 2/5, ViT-B/16 pre-trained on ImageNet-21k).
"""

RECIPE = "finetune"
PRESET = "paper"

# The `paper` preset of `keras-vit finetune` is this experiment (Table 4 / App. B.1.1): ViT-B/16
# on CIFAR-10 at 384 px, SGD momentum 0.9 with batch 512, 10k steps, learning rate 0.01 (chosen
# from {0.001, 0.003, 0.01, 0.03}), 500 warm-up steps (official code), cosine decay, no weight
# decay, no dropout, gradient clipping at global norm 1. The file adds the checkpoint and how it
# runs; see every value with
# `keras-vit finetune --config recipes/finetune_cifar10_b16.py --print-config`.
CONFIG = dict(
    weights="ViT-B_16.npz",
    dataset="tfds:cifar10",
    distribution="data_parallel",
    out="runs/b16_cifar10",
)
