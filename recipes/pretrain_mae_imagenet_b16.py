"""ViT-B/16 masked autoencoder pre-training on ImageNet-1k (He et al., 2022, Appendix A.1).

Command:

    keras-vit pretrain-mae --config recipes/pretrain_mae_imagenet_b16.py --data-dir DIR
    keras-vit finetune --init runs/b16_mae/encoder.keras ...      # then fine-tune the encoder

Hardware: a TPUv3-8 class machine or 8 GPUs (data parallel, bfloat16); days of compute.

Expected: 83.6% ImageNet top-1 for ViT-B/16 after 1600 epochs and fine-tuning (the paper's
Table 3; 800 epochs: about 0.5 points less, Figure 7).
"""

RECIPE = "pretrain-mae"
PRESET = "paper"

# The `paper` preset of `keras-vit pretrain-mae` is this experiment (Table 8): ViT-B/16 at 224 px,
# 75% of the patches dropped per image, per-patch normalised pixel targets, a decoder 512 wide
# with 8 blocks of 16 heads; AdamW with betas (0.9, 0.95), base learning rate 1.5e-4 x batch /
# 256 (batch 4096: 2.4e-3), weight decay 0.05, 40 warm-up epochs, cosine decay, 800 epochs,
# random resized crops (0.2, 1) and flips. The file adds how it runs; see every value with
# `keras-vit pretrain-mae --config recipes/pretrain_mae_imagenet_b16.py --print-config`.
CONFIG = dict(
    dataset="tfds:imagenet2012",
    mixed_precision="mixed_bfloat16",
    distribution="data_parallel",
    out="runs/b16_mae",
)
