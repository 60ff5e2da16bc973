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

# The `paper` preset of `keras-vit pretrain-mpp` is this experiment (App. B.1.2): ViT-B/16 at
# 224 px; 50% of the patch embeddings corrupted (80% mask embedding, 10% another patch, 10%
# unchanged), the 3-bit mean colour of each corrupted patch predicted; Adam with learning rate
# 2e-4, no weight decay, 10k warm-up steps, cosine decay, batch 4096, 1M steps (gains flatten
# after 100k). The file adds how it runs; see every value with
# `keras-vit pretrain-mpp --config recipes/pretrain_mpp_imagenet_b16.py --print-config`.
CONFIG = dict(
    dataset="tfds:imagenet2012",
    mixed_precision="mixed_bfloat16",
    distribution="data_parallel",
    out="runs/b16_mpp",
)
