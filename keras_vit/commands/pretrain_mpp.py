"""`keras-vit pretrain-mpp`: self-supervised masked patch prediction (paper Sec. 4.6, B.1.2)."""

import sys

HELP = (
    "Self-supervised masked patch prediction (paper Sec. 4.6, App. B.1.2): Adam 2e-4, 10k warm-up, "
    "cosine; saves encoder.keras for `keras-vit finetune --init`."
)


def register(subparsers):
    from keras_vit.recipes.cli import add_training_flags

    parser = subparsers.add_parser("pretrain-mpp", help=HELP, description=HELP)
    add_training_flags(parser, "runs/mpp")
    parser.add_argument("--target", choices=("color", "downsampled", "pixels"),
                        help="3-bit mean colour (default), 4x4 downsized patch, or L2 on pixels.")
    parser.add_argument("--corruption-rate", dest="corruption_rate", type=float,
                        help="Fraction of patches corrupted per image (default 0.5).")
    parser.add_argument("--mask-fraction", dest="mask_fraction", type=float,
                        help="Share of corrupted patches given the mask embedding (default 0.8).")
    parser.add_argument("--random-fraction", dest="random_fraction", type=float,
                        help="Share given another patch's embedding (default 0.1).")
    parser.set_defaults(func=run)
    return parser


def run(args):
    from keras_vit.recipes import pretrain_mpp
    from keras_vit.recipes.cli import config_from_args

    try:
        config = config_from_args(pretrain_mpp, args)
        pretrain_mpp.run(config)
    except (ValueError, FileNotFoundError) as e:
        print(f"keras-vit pretrain-mpp: error: {e}", file=sys.stderr)
        return 2
    return 0
