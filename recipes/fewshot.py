"""Few-shot linear evaluation recipe (paper Sec. 4.1, "Metrics").

Frozen features of a trained model (the pre-logits output when the model has one, else the pooled
token), N images per class sampled with a seed, closed-form regularised least squares to
{-1, 1}^K targets, the regulariser chosen on held-out training shots, accuracy of the argmax on the
test split (`keras_vit.training.fewshot`).

Command (defaults: `digits`, 1/5/10/25 shots; a few minutes on 2 CPU cores):

    keras-vit fewshot --model-path runs/pretrain/model.keras --out runs/fewshot
    keras-vit fewshot --out runs/fewshot     # no --model-path: runs the default pretrain first

Paper setting (ViT-B/16 ImageNet-21k checkpoint, ImageNet/CIFAR/Pets/Flowers 1/5/10/25-shot; one
GPU/TPU, minutes per dataset once features are extracted):

    keras-vit fewshot --model-path b16.keras --dataset tfds:cifar10 --data-dir DIR --image-size 224

Expected: the paper reports e.g. ViT-B/32 (JFT) ImageNet 5-shot about 60% (Figure 3/4); on digits
with the default pretrain model, 10-shot accuracy well above chance (measured numbers are in
benchmarks/RESULTS.md).

This script is a thin wrapper: the recipe (config + runner) lives in `keras_vit/recipes/fewshot.py`
so that it is importable after `pip install keras-vit`; the flags are those of
`keras-vit fewshot --help`.
"""

import os
import sys

try:
    import keras_vit  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from keras_vit.commands import fewshot  # noqa: E402
from keras_vit.recipes.cli import run_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(run_main(fewshot.register))
