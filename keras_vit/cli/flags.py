"""Value types and the flag groups the `keras-vit` commands share, each defined once.

A type rejects a bad value while the command line is parsed (argparse turns the
`argparse.ArgumentTypeError` into a usage error, exit code 2), so no command
starts work on a value it cannot use. A flag left out stays None: the recipe's
preset, then a `--config` file, decide its value.
"""

import argparse

from keras_vit.runner.flag_names import flag_name


def _number(text, kind, what):
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}; received {text!r}") from None


def positive_int(text):
    """`"3"` -> 3; 0, negative and non-integer values are refused."""
    value = _number(text, int, "a positive integer")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer; received {text!r}")
    return value


def nonnegative_int(text):
    """`"0"` -> 0; negative and non-integer values are refused."""
    value = _number(text, int, "an integer >= 0")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0; received {text!r}")
    return value


def positive_float(text):
    value = _number(text, float, "a positive number")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number; received {text!r}")
    return value


def nonnegative_float(text):
    value = _number(text, float, "a number >= 0")
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0; received {text!r}")
    return value


def probability(text):
    """A rate in [0, 1): dropout, label smoothing, a discard ratio."""
    value = _number(text, float, "a number in [0, 1)")
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1); received {text!r}")
    return value


def fraction(text):
    """A share in [0, 1]."""
    value = _number(text, float, "a number in [0, 1]")
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1]; received {text!r}")
    return value


def image_size(text):
    """`"384"` -> 384, `"384x512"` or `"384,512"` -> (384, 512) (height, width)."""
    parts = text.lower().replace("x", ",").split(",")
    try:
        values = [int(p) for p in parts]
    except ValueError:
        values = []
    if len(values) not in (1, 2) or min(values, default=0) <= 0:
        raise argparse.ArgumentTypeError(
            f"expected N or HxW (or H,W) with positive integers; received {text!r}"
        )
    return values[0] if len(values) == 1 else tuple(values)


def int_list(text):
    """`"1,5,10"` -> (1, 5, 10)."""
    try:
        values = tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        values = ()
    if not values:
        raise argparse.ArgumentTypeError(
            f"expected a comma list of integers, e.g. 1,5,10; received {text!r}"
        )
    return values


def positive_int_list(text):
    values = int_list(text)
    if min(values) <= 0:
        raise argparse.ArgumentTypeError(
            f"expected a comma list of positive integers, e.g. 1,5,10; received {text!r}"
        )
    return values


def float_pair(text):
    """`"0.08,1"` -> (0.08, 1.0): a positive MIN,MAX range."""
    try:
        values = tuple(float(p) for p in text.split(",") if p.strip())
    except ValueError:
        values = ()
    if len(values) != 2 or not 0 < values[0] <= values[1]:
        raise argparse.ArgumentTypeError(
            f"expected MIN,MAX with 0 < MIN <= MAX, e.g. 0.08,1; received {text!r}"
        )
    return values


def str_list(text):
    return [p.strip() for p in text.split(",") if p.strip()]


def augment_list(text):
    """`"randaugment,keras_cv.RandAugment(value_range=(0, 255), magnitude=0.3)"` -> two names.

    Splits at the commas outside brackets, and checks the syntax of each keras-cv entry
    (`keras_cv.NAME` or `keras_cv.NAME(literal arguments)`, parsed, never executed) without
    importing keras-cv.
    """
    from keras_vit.training.cv_augment import is_keras_cv_spec, parse_keras_cv_spec

    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += char in "([{"
        depth -= char in ")]}"
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    names = [p.strip() for p in parts if p.strip()]
    if depth != 0 or not names:
        raise argparse.ArgumentTypeError(
            f"expected a comma list of augmentations with balanced brackets; received {text!r}"
        )
    for name in names:
        if is_keras_cv_spec(name):
            try:
                parse_keras_cv_spec(name)
            except ValueError as error:
                raise argparse.ArgumentTypeError(str(error)) from None
    return names


def jit_compile(text):
    values = {"auto": "auto", "true": True, "false": False}
    if text.lower() not in values:
        raise argparse.ArgumentTypeError(f"expected auto, true or false; received {text!r}")
    return values[text.lower()]


OVERWRITE_HELP = (
    "replace what an earlier run left in the output (by default a command refuses to write "
    "over existing work)"
)


def run_flags(parser):
    """--config, --preset, --smoke, --out, --seed, --overwrite, --mixed-precision."""
    group = parser.add_argument_group("run")
    group.add_argument(
        "--config",
        metavar="FILE",
        help="experiment file (.py with literal RECIPE/PRESET/CONFIG assignments, or .json; "
        "read as data, never executed). Precedence: preset < FILE < --smoke < flags",
    )
    group.add_argument(
        "--preset",
        choices=("digits", "paper"),
        help="config preset: the offline 'digits' default or the paper's numbers",
    )
    group.add_argument(
        "--print-config",
        dest="print_config",
        action="store_true",
        help="print the merged config (preset < FILE < --smoke < flags) as JSON and exit "
        "without loading data or building a model",
    )
    group.add_argument("--smoke", action="store_true", help="tiny model and a few steps (tests)")
    group.add_argument("--out", metavar="DIR", help="output folder (default: runs/COMMAND)")
    group.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    group.add_argument("--seed", type=int)
    group.add_argument(
        "--mixed-precision", dest="mixed_precision", choices=("mixed_bfloat16", "mixed_float16")
    )


def data_flags(parser):
    """Where the images come from and how they are read."""
    group = parser.add_argument_group("data")
    group.add_argument(
        "--dataset",
        help="digits | folder:PATH | imagefolder:PATH | tfds:NAME[:SPLIT] | "
        "synthetic[:CLASSES[:IMAGES[:SIZE]]] (random images made in memory, offline; "
        "default synthetic:10:1024:224)",
    )
    group.add_argument("--data-dir", dest="data_dir", help="TensorFlow Datasets data_dir")
    group.add_argument("--eval-split", dest="eval_split", help="evaluation split (default: test)")
    group.add_argument(
        "--download",
        action="store_true",
        default=None,
        help="allow tfds to download and prepare a missing dataset",
    )
    group.add_argument(
        "--on-corrupt",
        dest="on_corrupt",
        choices=("error", "skip"),
        help="corrupt images in folder datasets: stop (default) or skip with a warning",
    )
    group.add_argument("--image-size", dest="image_size", type=image_size, help="N or HxW")
    group.add_argument("--num-channels", dest="num_channels", type=int, choices=(1, 3))
    group.add_argument("--batch-size", dest="batch_size", type=positive_int)


MODEL_SIZE_FLAGS = ("num_layers", "hidden_dim", "mlp_dim", "num_heads")


def model_flags(parser):
    """The variant code and size overrides."""
    group = parser.add_argument_group("model")
    group.add_argument("--model", help="variant code, e.g. B/16, S/16, Ti/4")
    for name in MODEL_SIZE_FLAGS:
        group.add_argument(flag_name(name), dest=name, type=positive_int)


def training_flags(parser):
    """Schedule, optimizer, regularisation, augmentation, compilation, distribution."""
    group = parser.add_argument_group("training")
    group.add_argument(
        "--steps", type=positive_int, help="total optimizer steps (give this or --epochs)"
    )
    group.add_argument("--epochs", type=positive_int, help="passes over the data")
    group.add_argument(
        "--steps-per-epoch",
        dest="steps_per_epoch",
        type=positive_int,
        help="cap on batches per epoch (default: one pass over the data)",
    )
    group.add_argument(
        flag_name("learning_rate"), dest="learning_rate", type=positive_float, help="peak LR"
    )
    group.add_argument("--weight-decay", dest="weight_decay", type=nonnegative_float)
    group.add_argument("--warmup-steps", dest="warmup_steps", type=nonnegative_int)
    group.add_argument(
        flag_name("gradient_accumulation_steps"),
        dest="gradient_accumulation_steps",
        type=positive_int,
        help="gradient accumulation steps (effective batch = batch x this)",
    )
    group.add_argument("--label-smoothing", dest="label_smoothing", type=probability)
    group.add_argument(flag_name("dropout_rate"), dest="dropout_rate", type=probability)
    group.add_argument(
        "--remat",
        action="store_true",
        default=None,
        help="rematerialise each transformer block in the backward pass: less activation "
        "memory for about one more forward pass of compute",
    )
    group.add_argument(
        "--jit-compile",
        dest="jit_compile",
        type=jit_compile,
        help="auto (Keras' choice: no XLA for TensorFlow on a CPU-only machine) | true (XLA on "
        "TensorFlow and JAX, torch.compile on PyTorch) | false",
    )
    group.add_argument(
        "--steps-per-execution",
        dest="steps_per_execution",
        type=positive_int,
        help="training steps per call of the compiled train function (Keras' "
        "steps_per_execution; default 1): more cuts per-step host overhead on a fast GPU",
    )
    group.add_argument(
        "--augment",
        type=augment_list,
        help="comma list of randaugment, random_erasing, mixup, cutmix, random_rotation, "
        "random_translation, random_zoom, and keras-cv layers (the cv extra) by name: "
        "keras_cv.GridMask, 'keras_cv.RandAugment(magnitude=0.3)' (literal arguments only; "
        "images are in [0, 255] there, value_range defaults to (0, 255))",
    )
    crops = (
        ("crop_scale", "MIN,MAX area fraction of the random resized crop (e.g. 0.08,1)"),
        ("crop_ratio", "MIN,MAX aspect ratio of the random resized crop (e.g. 0.75,1.33)"),
    )
    for dest, help_text in crops:
        group.add_argument(flag_name(dest), dest=dest, type=float_pair, help=help_text)
    group.add_argument(
        "--rotation",
        type=nonnegative_float,
        help="rotate each training crop by a random angle in +-DEG degrees",
    )
    group.add_argument("--no-flip", dest="flip", action="store_false", default=None)
    group.add_argument(
        "--distribution",
        choices=("none", "data_parallel", "model_parallel"),
        help="keras.distribution on JAX, tf.distribute on TensorFlow",
    )
    group.add_argument("--verbose", choices=("auto", "0", "1", "2"), help="Keras fit verbosity")


def job_addresses(text):
    """`"10.0.0.1:1234"` or `"10.0.0.1:1234,10.0.0.2:1234"`: HOST:PORT, process 0's first."""
    from keras_vit.training.multihost import parse_job_addresses

    try:
        return ",".join(parse_job_addresses(text))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected HOST:PORT of process 0 (or every process's, comma-separated, process 0's "
            f"first), e.g. 10.0.0.1:1234; received {text!r}"
        ) from None


def cluster_flags(parser):
    """Several processes (machines) training one model: JAX's runtime via Keras."""
    group = parser.add_argument_group(
        "several machines (JAX)",
        "Run the same command in every process; flags left out are read from Keras' "
        "KERAS_DISTRIBUTION_JOB_ADDRESSES, KERAS_DISTRIBUTION_NUM_PROCESSES and "
        "KERAS_DISTRIBUTION_PROCESS_ID. Needs --distribution; --batch-size is the global batch.",
    )
    group.add_argument(
        "--job-addresses",
        dest="job_addresses",
        type=job_addresses,
        metavar="HOST:PORT",
        help="the coordinator (process 0) address, reachable from every process",
    )
    group.add_argument("--num-processes", dest="num_processes", type=positive_int)
    group.add_argument(
        "--process-id", dest="process_id", type=nonnegative_int, help="0 .. num-processes - 1"
    )
    group.add_argument(
        flag_name("multi_host"),
        dest="multi_host",
        action="store_true",
        default=None,
        help="join the processes JAX finds in the environment (Cloud TPU pod, SLURM, Open MPI, "
        "Kubernetes) without the flags above",
    )
    group.add_argument(
        "--init-timeout",
        dest="init_timeout",
        type=positive_int,
        metavar="SECONDS",
        help="longest wait for the coordinator and all processes to connect (default 300)",
    )
