"""`keras-vit export MODEL.keras EXPORT_DIR`: a SavedModel for TF Serving.

Writes `EXPORT_DIR/VERSION/` (with `--version`) holding the signatures
`serving_default` (float32 images in [-1, 1]), `serve_uint8` (uint8 images
0..255) and `serve_bytes` (encoded JPEG/PNG strings), each returning `logits`
and `probabilities` (and top-k outputs with `--top-k` / `--class-names`). See
`keras_vit.export.export_saved_model`. A `.keras` file trained on any backend
works; the command says whether it traced the model in this process (TensorFlow
backend) or in a subprocess with `KERAS_BACKEND=tensorflow`.
"""

import argparse
import sys


def register(subparsers):
    parser = subparsers.add_parser(
        "export",
        help="export a .keras classifier as a TF Serving SavedModel",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("model", metavar="MODEL.keras", help="a model saved with model.save()")
    parser.add_argument("export_dir", metavar="EXPORT_DIR", help="TF Serving model folder")
    parser.add_argument(
        "--version",
        type=int,
        default=None,
        metavar="N",
        help="write to EXPORT_DIR/N (TF Serving's MODEL_DIR/VERSION layout)",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace an existing SavedModel in the target"
    )
    parser.add_argument(
        "--top-k",
        type=int,
        default=None,
        metavar="K",
        help="add top_k_indices and top_k_probabilities outputs (default 5 with --class-names)",
    )
    parser.add_argument(
        "--class-names",
        default=None,
        metavar="FILE",
        help="text file with one class name per line, in class-index order; adds top_k_classes",
    )
    parser.set_defaults(func=run)
    return parser


def read_class_names(path):
    """Reads one class name per line (blank lines at the end are ignored)."""
    with open(path, encoding="utf-8") as f:
        names = [line.rstrip("\r\n") for line in f]
    while names and not names[-1].strip():
        names.pop()
    return names


def run(args):
    from keras_vit.export import export_saved_model

    try:
        class_names = None if args.class_names is None else read_class_names(args.class_names)
        export_saved_model(
            args.model,
            args.export_dir,
            version=args.version,
            overwrite=args.overwrite,
            class_names=class_names,
            top_k=args.top_k,
            verbose=True,
        )
    except (ValueError, FileExistsError, FileNotFoundError, ImportError) as error:
        print(f"keras-vit export: error: {error}", file=sys.stderr)
        return 2
    return 0
