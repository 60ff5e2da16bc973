"""`keras-vit inspect MODEL.keras --image IMG --out DIR`: the paper's Fig. 6-7 pictures for a model.

Writes four PNGs (attention-rollout overlay on the image, mean attention distance
against depth, position-embedding similarity, patch-embedding principal
components) and prints their paths, one per line.
"""

import argparse
import importlib
import os
import sys

import numpy as np

DISPLAY_MAX_SIDE = 512


def register(subparsers):
    parser = subparsers.add_parser(
        "inspect",
        help="Draw attention rollout, attention distance, position-embedding similarity "
        "and embedding filters of a saved model.",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("model", help="Saved model (.keras) built with keras_vit.")
    parser.add_argument(
        "--image", required=True, help="Image file (PNG, JPEG, ...) to compute the attention on."
    )
    parser.add_argument("--out", required=True, help="Output folder for the PNG files.")
    parser.add_argument(
        "--head-fusion",
        default="mean",
        choices=("mean", "max", "min"),
        help="How the rollout fuses heads (default: mean).",
    )
    parser.add_argument(
        "--discard-ratio",
        type=float,
        default=0.0,
        help="Fraction of the lowest attention weights dropped per layer in the rollout "
        "(default: 0).",
    )
    parser.add_argument(
        "--num-filters",
        type=int,
        default=28,
        help="Principal components of the patch embedding to draw (default: 28).",
    )
    parser.set_defaults(func=run)
    return parser


def load_image(path, size, channels):
    """Reads an image file; returns (model input in [-1, 1] (1, H, W, C), display image uint8).

    The model input is the image resized (bilinear) to `size` = (H, W) and
    converted to `channels` (1: grey, 3: RGB), then mapped by `x / 127.5 - 1`.
    The display image is the same conversion at up to 512 pixels per side.
    """
    from PIL import Image

    modes = {1: "L", 3: "RGB"}
    if channels not in modes:
        raise ValueError(
            f"Only models with 1 or 3 input channels can read image files. Received: {channels}"
        )
    with Image.open(path) as image:
        image = image.convert(modes[channels])
        height, width = size
        model_input = np.asarray(image.resize((width, height), Image.BILINEAR), "float32")
        scale = min(1.0, DISPLAY_MAX_SIDE / max(image.size))
        display = image.resize(
            (max(1, round(image.size[0] * scale)), max(1, round(image.size[1] * scale))),
            Image.BILINEAR,
        )
        display = np.asarray(display)
    model_input = model_input.reshape(1, height, width, channels) / 127.5 - 1.0
    return model_input, display


def load_model(path):
    """Loads a `.keras` model with every keras_vit layer registered."""
    import keras

    import keras_vit.layers  # noqa: F401  (registers the layers)

    try:  # hybrid stem layers, when that module exists
        importlib.import_module("keras_vit.models.hybrid")
    except ModuleNotFoundError as error:
        if error.name != "keras_vit.models.hybrid":
            raise
    return keras.saving.load_model(path)


def run(args):
    from keras_vit import inspect as vit_inspect

    for path, what in ((args.model, "model"), (args.image, "image")):
        if not os.path.isfile(path):
            print(f"error: {what} file not found: {path}", file=sys.stderr)
            return 2
    if not 0.0 <= args.discard_ratio < 1.0:
        print(
            f"error: --discard-ratio must be in [0, 1). Received: {args.discard_ratio}",
            file=sys.stderr,
        )
        return 2
    if args.num_filters <= 0:
        print(f"error: --num-filters must be positive. Received: {args.num_filters}", file=sys.stderr)
        return 2
    model = load_model(args.model)
    _, height, width, channels = vit_inspect.model_input_shape(model)
    try:
        images, display = load_image(args.image, (height, width), channels)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    paths = vit_inspect.save_inspection_figures(
        model,
        images,
        args.out,
        display_images=[display],
        head_fusion=args.head_fusion,
        discard_ratio=args.discard_ratio,
        num_filters=args.num_filters,
    )
    for path in paths.values():
        print(path)
    return 0
