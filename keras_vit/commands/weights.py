"""`keras-vit weights`: list the named pretrained weights, or fetch them into the Keras cache.

    keras-vit weights                          # the whole table
    keras-vit weights --model B/16             # the names B/16 builders accept
    keras-vit weights --model B/16 --fetch augreg_in21k_ft_in1k [--base-url URL]

`--fetch` downloads (or verifies an already cached) file and prints its path:
run it on a machine with network access, then copy `$KERAS_HOME/keras_vit/`
(default `~/.keras/keras_vit/`) to an offline machine.
"""

import os
import sys


def _format_table(rows):
    header = ("variant", "weights", "px", "classes", "pre_logits", "top-1", "trained on")
    lines = [header] + [
        (
            p.variant,
            p.name,
            str(p.image_size),
            str(p.num_classes),
            "yes" if p.pre_logits else "no",
            f"{p.top1:.2f}" if p.top1 is not None else "-",
            p.trained_on,
        )
        for p in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line[:-1], widths)) + "  " + line[-1]
        for line in lines
    )


def register(subparsers):
    parser = subparsers.add_parser(
        "weights",
        help="list the named pretrained weights, or fetch one into the Keras cache",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument("--model", default=None, help="variant code, e.g. B/16, R50+B/16")
    parser.add_argument("--fetch", default=None, metavar="NAME", help="preset to download")
    parser.add_argument(
        "--base-url",
        default=None,
        help="bucket mirror (https://, http:// or file://); default $KERAS_VIT_WEIGHTS_URL, "
        "else the official bucket",
    )
    parser.set_defaults(func=run)
    return parser


def run(args):
    from keras_vit import presets

    try:
        if args.fetch:
            if not args.model:
                raise ValueError("--fetch needs --model (e.g. --model B/16).")
            print(presets.get_weights_file(args.fetch, args.model, base_url=args.base_url))
            return 0
        rows = presets.list_weights(args.model)
        print(_format_table(rows))
        if rows:
            base = presets.resolve_base_url(args.base_url)
            cache = os.path.join(presets.cache_root(), presets.CACHE_SUBDIR)
            print(f"\nFiles: {base}<path>; cache: {cache}/<path>")
        return 0
    except (ValueError, ConnectionError) as error:
        print(f"keras-vit weights: {error}", file=sys.stderr)
        return 2
