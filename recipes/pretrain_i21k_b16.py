"""ViT-B/16 supervised pre-training on ImageNet-21k (paper Sec. 4.1, Table 3, App. B.1).

Command:

    keras-vit pretrain --config recipes/pretrain_i21k_b16.py --data-dir DIR

Hardware: a TPUv3-8 class machine or 8 GPUs (data parallel, bfloat16); days of compute.
The dataset must be prepared in DIR by TensorFlow Datasets beforehand (add --download to let
tfds do it).

Expected: the upstream model of the paper's ViT-B/16 ImageNet-21k rows: 84-85% ImageNet top-1
after fine-tuning at 384 px (Table 2); the pre-training run itself reports its held-out accuracy
in runs/b16_i21k/metrics.json.
"""

RECIPE = "pretrain"
PRESET = "paper"

# The `paper` preset of `keras-vit pretrain` is this experiment (Table 3 / App. B.1): ViT-B/16 on
# ImageNet-21k at 224 px, Adam (0.9, 0.999) with batch 4096, learning rate 1e-3, weight decay
# 0.03, dropout 0.1, 10k linear warm-up steps then linear decay, 90 epochs, gradient clipping at
# global norm 1, a tanh pre-logits layer of width 768. The file adds how it runs; see every
# value with `keras-vit pretrain --config recipes/pretrain_i21k_b16.py --print-config`.
CONFIG = dict(
    dataset="tfds:imagenet21k",
    mixed_precision="mixed_bfloat16",
    distribution="data_parallel",
    out="runs/b16_i21k",
)
