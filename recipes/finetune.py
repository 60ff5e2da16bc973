"""Fine-tuning recipe (paper Sec. 4.1, Appendix B.1.1, Table 4).

SGD with momentum 0.9, cosine decay after a linear warm-up, no weight decay, gradient clipping at
global norm 1, a new zero-initialised head, and the position embedding resampled from the
pre-training resolution to the fine-tuning one.

Command (defaults: the offline `digits` preset, 24 px, a few minutes on 2 CPU cores):

    keras-vit finetune --out runs/finetune                          # from scratch (no --init)
    keras-vit finetune --init runs/pretrain/model.keras --out runs/finetune   # 16 px -> 24 px
    python recipes/finetune.py ...                                  # the same, from a checkout

Paper preset (ViT-B/16 from the official ImageNet-21k checkpoint to CIFAR-10 at 384 px; one
TPUv3-8 or 8 GPUs, hours):

    keras-vit finetune --preset paper --weights ViT-B_16.npz --dataset tfds:cifar10         --data-dir DIR --distribution data_parallel --out runs/b16_cifar10

Expected: the digits preset reaches >= 98% test accuracy (30% of digits held out); the paper
preset 98.1-99.0% on CIFAR-10 (Table 2/5, ViT-B/16 ImageNet-21k).

`--init MODEL.keras` takes one of our saved models (e.g. the pretrain recipe's): the model is
rebuilt at the new image size with the same architecture, every layer copied by name, the
position embedding resampled (`PatchEncoder.load_position_embedding`), `pre_logits` dropped and
the head re-created with zeros. `--weights FILE.npz` loads an official checkpoint through
`keras_vit.checkpoints.load_npz` (architecture from `--model`).

This script is a thin wrapper: the recipe (config + runner) lives in `keras_vit/recipes/finetune.py`
so that it is importable after `pip install keras-vit`; the flags are those of
`keras-vit finetune --help`.
"""

import os
import sys

try:
    import keras_vit  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from keras_vit.commands import finetune  # noqa: E402
from keras_vit.recipes.cli import run_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(run_main(finetune.register))
