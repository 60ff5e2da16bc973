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

# Table 4 / App. B.1.1: SGD momentum 0.9, batch 512, 10k steps, LR from {0.001, 0.003, 0.01,
# 0.03} (0.01 here), 500 warm-up steps (official code), cosine decay, no weight decay, gradient
# clipping at global norm 1, 384 px.
CONFIG = dict(
    model="B/16",
    weights="ViT-B_16.npz",
    dataset="tfds:cifar10",
    image_size=384,
    batch_size=512,
    steps=10_000,
    optimizer="sgd",
    learning_rate=0.01,
    weight_decay=0.0,
    warmup_steps=500,
    decay="cosine",
    global_clipnorm=1.0,
    dropout_rate=0.0,
    distribution="data_parallel",
    out="runs/b16_cifar10",
)
