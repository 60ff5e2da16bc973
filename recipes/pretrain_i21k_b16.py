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

# Table 3 / App. B.1: Adam (0.9, 0.999), batch 4096, LR 1e-3, weight decay 0.03, dropout 0.1,
# 10k linear warm-up then linear decay, 90 epochs, 224 px, a tanh pre-logits layer of width 768.
CONFIG = dict(
    model="B/16",
    dataset="tfds:imagenet21k",
    image_size=224,
    batch_size=4096,
    epochs=90,
    optimizer="adamw",
    learning_rate=1e-3,
    weight_decay=0.03,
    warmup_steps=10_000,
    decay="linear",
    global_clipnorm=1.0,
    dropout_rate=0.1,
    representation_size=768,
    mixed_precision="mixed_bfloat16",
    distribution="data_parallel",
    out="runs/b16_i21k",
)
