"""Fine-tune a ViT-B/16 masked-autoencoder encoder on ImageNet-1k (He et al., 2022, App. A.2).

Command (after `keras-vit pretrain-mae --config recipes/pretrain_mae_imagenet_b16.py`):

    keras-vit finetune --config recipes/finetune_mae_imagenet_b16.py --data-dir DIR \\
        --init runs/b16_mae/encoder.keras

Hardware: a TPUv3-8 class machine or 8 GPUs (data parallel, bfloat16); about a day.

Expected: 83.6% ImageNet top-1 after 1600 pre-training epochs (the paper's Table 3; 800 epochs:
about 0.5 points less, Figure 7).
"""

RECIPE = "finetune"
PRESET = "paper"

# The paper's end-to-end fine-tuning of ViT-B (Table 9): AdamW with betas (0.9, 0.999), base
# learning rate 5e-4 x batch / 256 (batch 1024: 2e-3), weight decay 0.05, layer-wise learning-rate
# decay 0.65, 5 warm-up epochs, cosine decay, 100 epochs, no gradient clipping; RandAugment (9,
# 0.5), label smoothing 0.1, mixup 0.8, cutmix 1.0, random erasing 0.25, drop path 0.1; the head
# on the global average of the patch tokens through a new LayerNorm (fc_norm) instead of the
# encoder's final norm. See every value with
# `keras-vit finetune --config recipes/finetune_mae_imagenet_b16.py --print-config`.
CONFIG = dict(
    init="runs/b16_mae/encoder.keras",
    dataset="tfds:imagenet2012",
    image_size=224,
    batch_size=1024,
    epochs=100,
    steps=None,
    optimizer="adamw",
    learning_rate=2e-3,  # base 5e-4 x 1024 / 256
    weight_decay=0.05,
    layer_decay=0.65,
    warmup_steps=0,
    warmup_epochs=5,
    decay="cosine",
    global_clipnorm=None,
    label_smoothing=0.1,
    drop_path_rate=0.1,
    pooling="gap",
    fc_norm=True,
    augment=[
        ("randaugment", {"num_ops": 2, "factor": 0.9}),
        ("random_erasing", {"factor": 0.25}),
        ("mixup", {"alpha": 0.8}),
        ("cutmix", {"factor": 1.0}),
    ],
    mixed_precision="mixed_bfloat16",
    distribution="data_parallel",
    out="runs/b16_mae_ft",
)
