"""Few-shot linear evaluation of ViT-B/16 on CIFAR-10, 1/5/10/25 shots (paper Sec. 4.1).

Frozen pre-logits features, N images per class sampled with each seed, closed-form regularised
least squares to {-1, 1}^K targets, accuracy of the argmax on the test split.

Command (b16.keras: e.g. the official ImageNet-21k checkpoint converted at 224 px with
`keras-vit convert ViT-B_16.npz b16.keras --model B/16`, or runs/b16_i21k/model.keras):

    keras-vit fewshot --config recipes/fewshot_cifar10_b16.py --data-dir DIR

Hardware: one GPU or TPU; minutes once the features are extracted.

Expected: accuracy that grows with the shots; the paper reports few-shot results as figures
(Fig. 3/4: e.g. ViT-B/32 pre-trained on JFT reaches about 60% ImageNet 5-shot), with no
CIFAR-10 number for this model in the text.
"""

RECIPE = "fewshot"
PRESET = "paper"

# The `paper` preset of `keras-vit fewshot`: CIFAR-10 at 224 px, 1/5/10/25 shots, seeds 0, 1, 2.
CONFIG = dict(
    model_path="b16.keras",
    dataset="tfds:cifar10",
    out="runs/b16_fewshot_cifar10",
)
