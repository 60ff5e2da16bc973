"""Supervised pre-training recipe (paper Sec. 4.1, Appendix B.1, Table 3).

Command (defaults: the offline `digits` preset, a few minutes on 2 CPU cores):

    keras-vit pretrain --out runs/pretrain
    python recipes/pretrain.py --out runs/pretrain            # the same, from a checkout

Paper preset (ViT-B/16 on ImageNet-21k, 224 px; meant for a TPUv3-8 class machine or 8 GPUs with
`--distribution data_parallel`, days of compute):

    keras-vit pretrain --preset paper --dataset tfds:imagenet21k --data-dir DIR         --distribution data_parallel --mixed-precision mixed_bfloat16 --out runs/b16_i21k

Expected: the digits preset reaches about 95% test accuracy (30% of digits held out) at 16 px;
the paper preset is the upstream model that reaches 84-85% ImageNet top-1 after fine-tuning at
384 px (Table 2, ViT-B/16 ImageNet-21k).

This script is a thin wrapper: the recipe (config + runner) lives in `keras_vit/recipes/pretrain.py`
so that it is importable after `pip install keras-vit`; the flags are those of
`keras-vit pretrain --help`.
"""

import os
import sys

try:
    import keras_vit  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from keras_vit.commands import pretrain  # noqa: E402
from keras_vit.recipes.cli import run_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(run_main(pretrain.register))
