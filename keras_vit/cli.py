"""The `keras-vit` command line: one subcommand per recipe or tool.

Each module in `COMMAND_MODULES` exposes `register(subparsers)`, which adds its
subparser and sets `func` (called with the parsed arguments, returns an exit code).
Modules are imported only when the CLI runs, so `import keras_vit` stays light.
"""

import argparse
import importlib
import sys

COMMAND_MODULES = [
    "quickstart",
    "pretrain",
    "finetune",
    "fewshot",
    "pretrain_mpp",
    "convert",
    "weights",
    "export",
    "inspect",
]


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-vit", description="Vision Transformers for Keras 3: recipes and tools."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(f"keras_vit.commands.{name}").register(subparsers)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    return args.func(args) or 0


if __name__ == "__main__":
    sys.exit(main())
