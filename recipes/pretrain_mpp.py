"""Masked-patch-prediction pre-training recipe (paper Sec. 4.6, Appendix B.1.2).

Command (defaults: the offline `digits` preset, about a minute on 2 CPU cores):

    python recipes/pretrain_mpp.py --out runs/mpp          # = keras-vit pretrain-mpp --out runs/mpp
    keras-vit finetune --init runs/mpp/encoder.keras --out runs/mpp_finetune

Paper preset (ViT-B/16, 224 px, Adam 2e-4, 10k warm-up, cosine, batch 4096, 1M steps; a TPUv3-8
class machine or 8 GPUs, days):

    python recipes/pretrain_mpp.py --preset paper --dataset tfds:imagenet2012 --data-dir DIR \
        --distribution data_parallel --mixed-precision mixed_bfloat16 --out runs/b16_mpp

Expected: the paper reports 79.9% ImageNet top-1 for ViT-B/16 after fine-tuning, +2 points over
training from scratch; benchmarks/RESULTS.md has what the digits preset measures here.

This script is a thin wrapper: the recipe (config + runner) lives in
`keras_vit/recipes/pretrain_mpp.py`; the flags are those of `keras-vit pretrain-mpp --help`.
"""

import argparse
import os
import sys

try:
    import keras_vit  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from keras_vit.commands import pretrain_mpp  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser()
    pretrain_mpp.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["pretrain-mpp", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
