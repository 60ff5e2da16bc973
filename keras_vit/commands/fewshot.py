"""`keras-vit fewshot`: few-shot linear evaluation of a trained model (paper Sec. 4.1)."""

import sys


def register(subparsers):
    from keras_vit.recipes.cli import _int_list, add_common_flags

    help_text = "Few-shot linear evaluation (closed-form ridge on frozen features)."
    parser = subparsers.add_parser("fewshot", help=help_text, description=help_text)
    add_common_flags(parser, "runs/fewshot")
    parser.add_argument("--model-path", dest="model_path",
                        help="Trained .keras model (default: run the pretrain recipe first).")
    parser.add_argument("--shots", type=_int_list, help="Comma list, e.g. 1,5,10,25.")
    parser.add_argument("--seeds", type=_int_list, help="Comma list of sampling seeds.")
    parser.set_defaults(func=run)
    return parser


def run(args):
    from keras_vit.recipes import fewshot
    from keras_vit.recipes.cli import config_from_args

    try:
        config = config_from_args(fewshot, args)
        pretrain_config = None
        if args.smoke and not config["model_path"]:
            from keras_vit.recipes import pretrain

            pretrain_config = pretrain.get_config(smoke=True)
            pretrain_config["seed"] = config["seed"]
        fewshot.run(config, pretrain_config=pretrain_config)
    except (ValueError, FileNotFoundError) as e:
        print(f"keras-vit fewshot: error: {e}", file=sys.stderr)
        return 2
    return 0
