"""The `keras-vit` parser, its table of commands, and one error and exit-code policy.

Exit codes: 0 done; 2 a usage error or a user mistake (a bad flag or value, a
missing or unreadable file, an output that exists without `--overwrite`, a
missing optional extra); 1 a runtime failure; 130 interrupted; 141 the reader of
the output closed it (`| head`). Errors print one
paragraph `keras-vit COMMAND: error: ...` on stderr; a traceback only with
`--debug` or `KERAS_VIT_DEBUG=1`. A process of a multi-process run that fails
alone exits at once (its peers' collectives then fail instead of waiting).
"""

import argparse
import dataclasses
import difflib
import os
import re
import sys
import traceback
from collections.abc import Callable

from keras_vit.cli import commands as C
from keras_vit.cli import flags as F
from keras_vit.cli import plan as P
from keras_vit.cli.extras import MissingExtraError, require
from keras_vit.cli.quiet import quiet
from keras_vit.runner import interrupts
from keras_vit.runner.threads import configure_process as configure_threads
from keras_vit.version import __version__

PROG = "keras-vit"

# Mistakes the user fixes by changing the command line or the files it names.
USER_ERRORS = (
    ValueError,
    FileNotFoundError,
    FileExistsError,
    PermissionError,
    NotADirectoryError,
    IsADirectoryError,
    MissingExtraError,
)

TRAINING = (F.run_flags, F.data_flags, F.model_flags, F.training_flags, F.cluster_flags)
TRAINING_NEEDS = ("tensorflow", "tensorboard")


@dataclasses.dataclass(frozen=True)
class Command:
    """One subcommand: its help line, flag groups, run function and required modules."""

    help: str
    flags: tuple
    run: Callable
    needs: tuple = ()
    description: str = ""


def _training_command(help_text, *extra_flags):
    """A recipe command that trains through `keras_vit.runner.run.run_training`."""
    return Command(help_text, (*TRAINING, *extra_flags), C.run_training, needs=TRAINING_NEEDS)


COMMANDS = {
    "quickstart": Command(
        "train a small ViT from scratch on scikit-learn's digits (offline) and save it",
        (F.quickstart_flags,),
        C.run_quickstart,
        needs=("sklearn",),
    ),
    "pretrain": _training_command(
        "supervised pre-training (paper Sec. 4.1, Table 3) through model.fit",
        F.flexi_flags,
        F.toolkit_flags,
    ),
    "finetune": _training_command(
        "fine-tuning (paper Sec. 4.1, Table 4): SGD, cosine, clip 1, zero head, resampled "
        "position embedding",
        F.finetune_flags,
        F.flexi_flags,
        F.toolkit_flags,
        F.distillation_flags,
    ),
    "fewshot": Command(
        "few-shot linear evaluation (closed-form ridge on frozen features, paper Sec. 4.1)",
        (F.run_flags, F.data_flags, F.fewshot_flags),
        C.run_fewshot,
        needs=("tensorflow",),
    ),
    "pretrain-mpp": _training_command(
        "self-supervised masked patch prediction (paper Sec. 4.6, App. B.1.2); saves "
        "encoder.keras for `keras-vit finetune --init`",
        F.mpp_flags,
    ),
    "pretrain-mae": _training_command(
        "self-supervised masked autoencoder (He et al., 2022); saves encoder.keras for "
        "`keras-vit finetune --init` and reconstructions.png",
        F.mae_flags,
    ),
    "convert": Command(
        "convert an official ViT .npz, a timm or a Hugging Face checkpoint into a .keras model, "
        "or a .keras model back to timm or Hugging Face",
        (F.convert_flags,),
        C.run_convert,
        description="keras-vit convert CHECKPOINT.npz OUT.keras --model B/16; keras-vit convert "
        "--from timm NAME CHECKPOINT OUT.keras (or --from timm NAME OUT.keras: the name's "
        "weights from the Hugging Face Hub); keras-vit convert --from huggingface FOLDER "
        "OUT.keras (FOLDER may be a Hub repo id). Options left out are read from the "
        "checkpoint (image size, classes, pre_logits, pooling). Back to PyTorch: keras-vit "
        "convert MODEL.keras OUT.safetensors "
        "--to timm (prints the timm.create_model call); keras-vit convert MODEL.keras FOLDER "
        "--to huggingface.",
    ),
    "weights": Command(
        "list the named pretrained weights, or fetch one into the Keras cache",
        (F.weights_flags,),
        C.run_weights,
        description="--fetch downloads (or verifies a cached) file and prints its path: run it "
        "with network access, then copy $KERAS_HOME/keras_vit/ to an offline machine.",
    ),
    "export": Command(
        "export a .keras model as a TF Serving SavedModel, ONNX or LiteRT (.tflite) file",
        (F.export_flags,),
        C.run_export,
        needs=("tensorflow",),
        description="saved_model writes OUT[/VERSION] with the signatures serving_default "
        "(float32 images in [-1, 1]), serve_uint8 and serve_bytes (encoded JPEG/PNG), each "
        "returning logits and probabilities (and top-k outputs with --top-k / --class-names). "
        "onnx and litert write one file whose input is float32 images in [-1, 1] with a free "
        "batch size; litert can quantize (--quantize).",
    ),
    "plan": Command(
        "bytes per device of training a model under fsdp, tensor_parallel or fsdp_tp, from "
        "the layouts and XLA's compiled memory analysis (JAX; nothing is allocated)",
        (P.plan_flags,),
        P.run_plan,
        needs=("jax",),
        description="keras-vit plan vit_7b_patch16_dinov3 --mesh 8x1 --strategy fsdp "
        "--batch-size 256: parameters, gradients, optimizer state and activations per device "
        "(GB), and whether they fit --device-memory GB.",
    ),
    "inspect": Command(
        "draw attention rollout, attention distance, position-embedding similarity and "
        "embedding filters of a saved model (paper Fig. 6-7)",
        (F.inspect_flags,),
        C.run_inspect,
        needs=("matplotlib", "PIL"),
        description="Writes four PNGs and prints their paths, one per line.",
    ),
}

EPILOG = (
    "Exit codes: 0 done, 2 usage error or user mistake, 1 runtime failure, 130 interrupted, "
    "141 output pipe closed. "
    "Commands never write over existing work unless given --overwrite. --debug (or "
    "KERAS_VIT_DEBUG=1) shows the traceback of an error."
)


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line naming the command and pointing to --help,
    with the nearest known flag or command for a mistyped one ("did you mean --model?")."""

    def error(self, message):
        choice = re.match(r"argument COMMAND: invalid choice: '([^']*)'", message)
        if choice:
            message += _suggestion(choice.group(1), list(getattr(self, "subcommands", {})))
        self.exit(2, f"{self.prog}: error: {message}. See: {self.prog} --help\n")

    def parse_args(self, args=None, namespace=None):
        args, extras = self.parse_known_args(args, namespace)
        if extras:
            parser = getattr(self, "subcommands", {}).get(getattr(args, "command", None), self)
            options = [o for action in parser._actions for o in action.option_strings]
            hints = "".join(
                _suggestion(extra.split("=", 1)[0], options)
                for extra in extras
                if extra.startswith("--")
            )
            parser.error(f"unrecognized arguments: {' '.join(extras)}{hints}")
        return args


def _suggestion(given, known):
    """ " (did you mean --model?)" for the known name nearest `given`, else "".

    Names are compared without their leading dashes: the shared `--` made short flags look
    alike (`--lr` was "--help?", `--out` "--format?").
    """
    names = {name.lstrip("-"): name for name in known}
    near = difflib.get_close_matches(given.lstrip("-"), list(names), n=1, cutoff=0.6)
    return f" ({given}: did you mean {names[near[0]]}?)" if near else ""


def _debug_flag(parser, default):
    parser.add_argument(
        "--debug", action="store_true", default=default, help="show tracebacks of errors"
    )


def build_parser():
    """The `keras-vit` parser: one subparser per entry of `COMMANDS`."""
    parser = _Parser(
        prog=PROG,
        description="Vision Transformers for Keras 3: recipes and tools.",
        epilog=EPILOG,
    )
    _debug_flag(parser, False)
    parser.add_argument(
        "--version", action="version", version=f"{PROG} {__version__}",
        help="print the version of keras_vit and exit",
    )  # fmt: skip
    parser.subcommands = {}
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name, command in COMMANDS.items():
        sub = subparsers.add_parser(
            name,
            help=command.help,
            description=f"{command.help[0].upper()}{command.help[1:]}. "
            f"{command.description}".strip(),
            epilog=EPILOG,
        )
        for add_flags in command.flags:
            add_flags(sub)
        _debug_flag(sub, argparse.SUPPRESS)
        parser.subcommands[name] = sub
    return parser


def _check_steps_and_epochs(args, subparser):
    """`--steps` and `--epochs` both given is a usage error that says which to keep."""
    if getattr(args, "steps", None) is not None and getattr(args, "epochs", None) is not None:
        subparser.error(
            f"argument --steps/--epochs: expected one of them, not both; received --steps "
            f"{args.steps} and --epochs {args.epochs}. Keep --steps for a fixed number of "
            "optimizer steps, or --epochs for passes over the data"
        )


def _check_lora_flags(args, subparser):
    """`--lora-targets` / `--lora-alpha` without `--lora-rank` would be ignored: a usage error."""
    if getattr(args, "lora_rank", None) is not None:
        return
    given = [
        flag
        for flag, dest in (("--lora-targets", "lora_targets"), ("--lora-alpha", "lora_alpha"))
        if getattr(args, dest, None) is not None
    ]
    if given:
        subparser.error(
            f"argument {given[0]}: expected with --lora-rank N (without it the whole model is "
            f"fine-tuned and {' and '.join(given)} would be ignored); received no --lora-rank"
        )


HINTS = (  # what to do, added when the message does not already say what to do
    (FileExistsError, "Pass --overwrite to replace it, or choose another path."),
    (FileNotFoundError, "Check the path."),
    (PermissionError, "Check the permissions, or choose another path."),
    (NotADirectoryError, "Expected a folder; check the path."),
    (IsADirectoryError, "Expected a file; check the path."),
)
# Phrases that show a message already says what to do (then no hint is added).
ADVICE = ("check the path", "choose another", "--overwrite", "to prepare it", "pass --", "install")


_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# Keras appends the arguments of the layer call that failed (weight values included).
_ARGUMENTS_RECEIVED = re.compile(r"\n?\s*Arguments received by .*", re.DOTALL)


def _plain(text):
    """`text` on one line, without terminal colour codes or Keras' "Arguments received by"
    block, ending in one full stop."""
    text = _ARGUMENTS_RECEIVED.sub("", _ANSI.sub("", text))
    return " ".join(text.split()).rstrip(".") + "."


def _message(error):
    """One paragraph for an exception: its text on one line, ending in what to do."""
    if isinstance(error, OSError) and error.filename and error.strerror:
        text = f"{error.strerror}: {error.filename!r}"
    else:
        text = str(error) or type(error).__name__
    if not isinstance(error, USER_ERRORS):
        text = f"{type(error).__name__}: {text}"
    text = _plain(text)
    if not any(phrase in text.lower() for phrase in ADVICE):
        for kind, hint in HINTS:
            if isinstance(error, kind):
                text = f"{text} {hint}"
                break
    return text


def main(argv=None):
    """Runs `keras-vit` with `argv` (default `sys.argv[1:]`); returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        _check_steps_and_epochs(args, parser.subcommands[args.command])
        _check_lora_flags(args, parser.subcommands[args.command])
    except SystemExit as exit_:  # --help (0) or a usage error (2), already printed
        return exit_.code if isinstance(exit_.code, int) else 2
    except KeyboardInterrupt:  # before the command's own record is in place
        print(f"\n{PROG}: interrupted.", file=sys.stderr)
        return 130
    debug = args.debug or os.environ.get("KERAS_VIT_DEBUG", "") not in ("", "0")
    prog = f"{PROG} {args.command}"
    try:  # before any framework is imported: they read these when they start
        configure_threads()
    except ValueError as error:  # a bad KERAS_VIT_THREADS
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    command = COMMANDS[args.command]
    interrupts.install()  # every Ctrl-C from here on is recorded (see _interrupted)
    try:
        require(*command.needs)
        with quiet(prog, debug):
            code = command.run(args) or 0
        sys.stdout.flush()  # a closed pipe shows here, not at the interpreter's exit
        return code
    except KeyboardInterrupt:
        return _interrupted(prog, args)
    except BrokenPipeError:  # `keras-vit ... | head -1`: the reader has what it wanted
        return _pipe_closed()
    except USER_ERRORS as error:
        if interrupts.interrupted():
            return _interrupted(prog, args)
        if debug:
            traceback.print_exc()
        print(f"{prog}: error: {_message(error)}", file=sys.stderr)
        return _exit_alone(2, error)
    except Exception as error:  # noqa: BLE001  (the policy: any other failure is exit 1)
        if interrupts.interrupted():  # a Ctrl-C that a library turned into its own error
            return _interrupted(prog, args)
        if debug:
            traceback.print_exc()
            hint = ""
        else:
            hint = f" Rerun with --debug ({PROG} --debug {args.command} ...) for the traceback."
        print(
            f"{prog}: error: {_message(error)} The command failed while running, not because "
            f"of its arguments.{hint}",
            file=sys.stderr,
        )
        return _exit_alone(1, error)
    finally:
        interrupts.restore()


# Commands whose interrupted run the same command resumes (or reruns).
RESUMABLE = ("quickstart", "pretrain", "finetune", "fewshot", "pretrain-mpp", "pretrain-mae")


def _interrupted(prog, args):
    """Exit 130 with one line (at any moment: while tracing, saving, or inside a library that
    turned the KeyboardInterrupt into an error of its own); the traceback only with --debug."""
    again = " Rerun the same command to resume it." if args.command in RESUMABLE else ""
    try:
        print(f"\n{prog}: interrupted.{again}", file=sys.stderr)
    except (OSError, ValueError):
        pass
    return _exit_alone(130, None)


def _pipe_closed():
    """The reader of standard output closed it (`| head`): no message, no traceback, and no
    second error when Python flushes standard output at exit. Exit 141, as a shell reports
    a process ended by SIGPIPE."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # a replaced stdout without a descriptor
        pass
    return 141


def _exit_alone(code, error):
    """Returns `code`; a process of a multi-process run that failed alone exits at once instead.

    At a normal exit JAX waits (up to --init-timeout) for every process at a shutdown barrier,
    which peers blocked in a collective never reach. An error raised in every process at once
    (marked by `keras_vit.training.multihost`) keeps the normal exit.
    """
    if "jax" not in sys.modules or getattr(error, "keras_vit_all_processes", False):
        return code
    from keras_vit.training import multihost

    if multihost.process_count() > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
