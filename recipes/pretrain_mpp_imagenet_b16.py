"""ViT-B/16 self-supervised masked patch prediction on ImageNet (paper Sec. 4.6, App. B.1.2).

Command:

    keras-vit pretrain-mpp --config recipes/pretrain_mpp_imagenet_b16.py --data-dir DIR
    keras-vit finetune --init runs/b16_mpp/encoder.keras ...      # then fine-tune the encoder

Hardware: a TPUv3-8 class machine or 8 GPUs (data parallel, bfloat16); days of compute.

Expected: 79.9% ImageNet top-1 for ViT-B/16 after fine-tuning, +2 points over training from
scratch and 4 points below supervised pre-training (Sec. 4.6).
"""

RECIPE = "pretrain-mpp"
PRESET = "paper"

# App. B.1.2: corrupt 50% of the patch embeddings (80% mask embedding, 10% another patch, 10%
# unchanged), predict the 3-bit mean colour of each corrupted patch; Adam, LR 2e-4, 10k warm-up,
# cosine decay, batch 4096, 1M steps (gains flatten after 100k), 224 px.
CONFIG = dict(
    model="B/16",
    dataset="tfds:imagenet2012",
    image_size=224,
    batch_size=4096,
    steps=1_000_000,
    optimizer="adam",
    learning_rate=2e-4,
    weight_decay=0.0,
    warmup_steps=10_000,
    decay="cosine",
    target="color",
    corruption_rate=0.5,
    mask_fraction=0.8,
    random_fraction=0.1,
    mixed_precision="mixed_bfloat16",
    distribution="data_parallel",
    out="runs/b16_mpp",
)
