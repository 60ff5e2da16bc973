"""`keras-vit finetune`: Fine-tuning (paper Sec. 4.1, Table 4): SGD, cosine, clip 1, zero head, resampled position embedding."""

import sys


def register(subparsers):
    from keras_vit.recipes.cli import add_training_flags

    parser = subparsers.add_parser("finetune", help="Fine-tuning (paper Sec. 4.1, Table 4): SGD, cosine, clip 1, zero head, resampled position embedding.", description="Fine-tuning (paper Sec. 4.1, Table 4): SGD, cosine, clip 1, zero head, resampled position embedding.")
    add_training_flags(parser, "runs/finetune")
    parser.add_argument("--init", help="One of our saved models (.keras) to start from (resized to --image-size).")
    parser.add_argument("--weights", help="An official ViT .npz checkpoint to start from.")
    parser.set_defaults(func=run)
    return parser


def run(args):
    from keras_vit.recipes import finetune
    from keras_vit.recipes.cli import config_from_args

    try:
        config = config_from_args(finetune, args)
        finetune.run(config)
    except (ValueError, FileNotFoundError) as e:
        print(f"keras-vit finetune: error: {e}", file=sys.stderr)
        return 2
    return 0
