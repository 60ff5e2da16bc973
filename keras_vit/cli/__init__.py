"""The `keras-vit` command line (also `python -m keras_vit`): one parser, one table of commands.

`keras_vit.cli.app.COMMANDS` names every subcommand with its help line, its flag
groups (each defined once in `keras_vit.cli.flags`, with the value types of
`keras_vit.cli.types`), its run function (`keras_vit.cli.commands`) and the
optional modules it needs (`keras_vit.cli.extras`: the pip-extras table);
`main(argv)` parses, dispatches and applies one error and exit-code policy
(0 done, 2 user mistake, 1 runtime failure). `keras_vit.cli.config` reads
experiment files (`--config`).
"""

from keras_vit.cli.app import COMMANDS, build_parser, main

__all__ = ["COMMANDS", "build_parser", "main"]
