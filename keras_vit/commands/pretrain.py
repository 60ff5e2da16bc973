"""`keras-vit pretrain`: Supervised pre-training (paper Sec. 4.1, Table 3) through model.fit."""

import sys


def register(subparsers):
    from keras_vit.recipes.cli import add_training_flags

    parser = subparsers.add_parser("pretrain", help="Supervised pre-training (paper Sec. 4.1, Table 3) through model.fit.", description="Supervised pre-training (paper Sec. 4.1, Table 3) through model.fit.")
    add_training_flags(parser, "runs/pretrain")
    parser.set_defaults(func=run)
    return parser


def run(args):
    from keras_vit.recipes import pretrain
    from keras_vit.recipes.cli import config_from_args

    try:
        config = config_from_args(pretrain, args)
        pretrain.run(config)
    except (ValueError, FileNotFoundError) as e:
        print(f"keras-vit pretrain: error: {e}", file=sys.stderr)
        return 2
    return 0
