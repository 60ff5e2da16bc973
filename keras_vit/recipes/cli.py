"""Command-line flags shared by `keras-vit pretrain|finetune|fewshot`: flags override the config."""

import argparse
import sys


def _image_size(text):
    parts = [int(p) for p in text.replace("x", ",").split(",")]
    if len(parts) == 1:
        return parts[0]
    if len(parts) == 2:
        return tuple(parts)
    raise argparse.ArgumentTypeError(f"--image-size takes N or H,W. Received: {text!r}")


def _int_list(text):
    return tuple(int(p) for p in text.split(",") if p)


def _float_pair(text):
    parts = [float(p) for p in text.split(",") if p]
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"Expected MIN,MAX. Received: {text!r}")
    return tuple(parts)


def _jit_compile(text):
    values = {"auto": "auto", "true": True, "false": False}
    if text.lower() not in values:
        raise argparse.ArgumentTypeError(f"expected auto, true or false; received {text!r}")
    return values[text.lower()]


def _str_list(text):
    return [p for p in text.split(",") if p]


def add_common_flags(parser, out_default):
    parser.add_argument("--preset", default="digits", choices=("digits", "paper"),
                        help="Config preset: the offline 'digits' default or the paper's numbers.")
    parser.add_argument("--smoke", action="store_true", help="Tiny model and 4 steps (tests).")
    parser.add_argument("--dataset", help="digits | folder:PATH | imagefolder:PATH | tfds:NAME[:SPLIT]")
    parser.add_argument("--data-dir", dest="data_dir", help="TensorFlow Datasets data_dir.")
    parser.add_argument("--eval-split", dest="eval_split", help="Evaluation split (default: test).")
    parser.add_argument("--download", action="store_true", default=None,
                        help="Allow tfds to download and prepare a missing dataset.")
    parser.add_argument("--on-corrupt", dest="on_corrupt", choices=("error", "skip"),
                        help="Corrupt images in folder datasets: stop (default) or skip with a warning.")
    parser.add_argument("--image-size", dest="image_size", type=_image_size, help="N or H,W.")
    parser.add_argument("--num-channels", dest="num_channels", type=int, choices=(1, 3))
    parser.add_argument("--batch-size", dest="batch_size", type=int)
    parser.add_argument("--mixed-precision", dest="mixed_precision",
                        choices=("mixed_bfloat16", "mixed_float16"))
    parser.add_argument("--distribution", choices=("none", "data_parallel", "model_parallel"))
    parser.add_argument("--seed", type=int)
    parser.add_argument("--out", help=f"Output folder (default {out_default}).")


def add_training_flags(parser, out_default):
    add_common_flags(parser, out_default)
    parser.add_argument("--model", help="Variant code, e.g. B/16, S/16, Ti/4.")
    parser.add_argument("--num-layers", dest="num_layers", type=int)
    parser.add_argument("--hidden-dim", dest="hidden_dim", type=int)
    parser.add_argument("--mlp-dim", dest="mlp_dim", type=int)
    parser.add_argument("--num-heads", dest="num_heads", type=int)
    parser.add_argument("--steps", type=int, help="Total optimizer steps (overrides --epochs).")
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--steps-per-epoch", dest="steps_per_epoch", type=int,
                        help="Cap on batches per epoch (default: one pass over the data).")
    parser.add_argument("--lr", dest="learning_rate", type=float, help="Peak learning rate.")
    parser.add_argument("--weight-decay", dest="weight_decay", type=float)
    parser.add_argument("--warmup-steps", dest="warmup_steps", type=int)
    parser.add_argument("--grad-accum", dest="gradient_accumulation_steps", type=int,
                        help="Gradient accumulation steps (effective batch = batch x this).")
    parser.add_argument("--label-smoothing", dest="label_smoothing", type=float)
    parser.add_argument("--dropout", dest="dropout_rate", type=float)
    parser.add_argument("--remat", action="store_true", default=None,
                        help="Rematerialise each transformer block in the backward pass: less "
                        "activation memory for about one more forward pass of compute.")
    parser.add_argument("--jit-compile", dest="jit_compile",
                        type=_jit_compile,
                        help="auto (Keras' choice: no XLA for TensorFlow on a CPU-only "
                        "machine) | true (XLA on TensorFlow and JAX, torch.compile on PyTorch) "
                        "| false.")
    parser.add_argument("--augment", type=_str_list,
                        help="Comma list of randaugment, random_erasing, mixup, cutmix, "
                        "random_rotation, random_translation, random_zoom.")
    parser.add_argument("--crop-scale", dest="crop_scale", type=_float_pair,
                        help="MIN,MAX area fraction of the random resized crop (e.g. 0.08,1).")
    parser.add_argument("--crop-ratio", dest="crop_ratio", type=_float_pair,
                        help="MIN,MAX aspect ratio of the random resized crop (e.g. 0.75,1.33).")
    parser.add_argument("--rotation", type=float,
                        help="Rotate each training crop by a random angle in +-DEG degrees.")
    parser.add_argument("--no-flip", dest="flip", action="store_false", default=None)
    parser.add_argument("--verbose", choices=("auto", "0", "1", "2"))


MODEL_FLAGS = ("num_layers", "hidden_dim", "mlp_dim", "num_heads")


def config_from_args(module, args, skip=()):
    """`module.get_config(args.preset, args.smoke)` with every given flag applied."""
    config = module.get_config(args.preset, smoke=args.smoke)
    overrides = {
        k: v
        for k, v in vars(args).items()
        if k not in ("preset", "smoke", "func", "command", *MODEL_FLAGS, *skip)
    }
    if overrides.get("steps") is not None:
        config["epochs"] = None
    if overrides.get("epochs") is not None:
        config["steps"] = None
    if overrides.get("distribution") == "none":
        overrides["distribution"] = None
    if overrides.get("verbose") is not None and overrides["verbose"] != "auto":
        overrides["verbose"] = int(overrides["verbose"])
    sizes = {k: getattr(args, k, None) for k in MODEL_FLAGS if getattr(args, k, None) is not None}
    if sizes:
        config["model_overrides"] = {**(config.get("model_overrides") or {}), **sizes}
    if overrides.get("model") is not None and not sizes:
        config["model_overrides"] = {}  # a new variant code brings its own sizes
    from keras_vit.recipes.common import merge

    return merge(config, overrides)


def run_main(register, argv=None):
    """Runs one recipe command standalone (used by the scripts in `recipes/`)."""
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    name = register.__module__.rsplit(".", 1)[-1].replace("_", "-")
    args = parser.parse_args([name, *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)
