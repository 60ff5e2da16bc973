"""The `keras-vit` command line (also `python -m keras_vit`): one parser, one table of commands.

`keras_vit.cli.app.COMMANDS` names every subcommand with its help line, its flag
groups (shared ones defined once in `keras_vit.cli.flags`) and its run function
(`keras_vit.cli.commands`); `main(argv)` parses, dispatches and applies one
error and exit-code policy (0 done, 2 user mistake, 1 runtime failure).
"""

from keras_vit.cli.app import COMMANDS, build_parser, main

__all__ = ["COMMANDS", "build_parser", "main"]
