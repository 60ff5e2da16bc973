"""`keras-vit convert`: an official ViT `.npz` checkpoint -> a `.keras` model.

    keras-vit convert ViT-B_16.npz vit_b16_384.keras --model B/16 --image-size 384 \\
        --num-classes 37

Builds `keras_vit.ViT(--model, ...)`, loads the checkpoint with
`keras_vit.checkpoints.load_npz` (strict unless `--no-strict`; the position
embedding is resampled to `--image-size`) and saves the model with
`model.save()`. Options left out are read from the checkpoint: the image size
from its position-embedding grid, the class count from its head, the
representation size from its `pre_logits`, the pooling from its class token.
"""

import math
import sys

from keras_vit.layers._checks import to_pair


def _image_size(text):
    """`"384"` -> 384, `"384x512"` -> (384, 512) (height x width)."""
    try:
        parts = [int(p) for p in text.lower().split("x")]
    except ValueError:
        parts = []
    if len(parts) not in (1, 2) or min(parts, default=0) <= 0:
        raise ValueError(f"image size must be N or HxW with positive ints. Received: {text!r}")
    return parts[0] if len(parts) == 1 else tuple(parts)


def _from_checkpoint(arrays, variant):
    """Defaults read from the checkpoint arrays: image size, classes, representation, pooling."""
    from keras_vit.models import variants

    config = variants.parse_variant(variant)
    defaults = {
        "pooling": "token" if "cls" in arrays else "gap",
        "num_classes": int(arrays["head/kernel"].shape[-1]) if "head/kernel" in arrays else None,
        "representation_size": (
            int(arrays["pre_logits/kernel"].shape[-1]) if "pre_logits/kernel" in arrays else None
        ),
        "image_size": 224,
    }
    posemb = arrays.get("Transformer/posembed_input/pos_embedding")
    if posemb is not None and posemb.ndim == 3:
        rows = posemb.shape[1] - (1 if "cls" in arrays else 0)
        side = math.isqrt(rows)
        if side * side == rows:
            stride = (
                variants.resnet_stride(config["resnet_units"]) if "resnet_units" in config else 1
            )
            patch = to_pair(config["patch_size"], "patch_size")
            if patch[0] == patch[1]:
                defaults["image_size"] = side * patch[0] * stride
    return defaults


def convert(
    checkpoint,
    output,
    *,
    model,
    image_size=None,
    num_classes=None,
    representation_size=None,
    pooling=None,
    include_top=True,
    strict=True,
    source_grid=None,
):
    """Converts an official `.npz` checkpoint into a saved `.keras` model.

    Args:
        checkpoint: str. Path to the official `.npz` file.
        output: str. Path of the `.keras` file to write.
        model: str. Variant code, e.g. `"B/16"` or `"R50+B/16"`.
        image_size: optional int or (height, width); defaults to the
            checkpoint's resolution (its position-embedding grid).
        num_classes: optional int; defaults to the checkpoint head's class
            count. A different count gives a zero-initialised head.
        representation_size: optional int; defaults to the checkpoint's
            `pre_logits` width (if any). 0 drops `pre_logits`.
        pooling: optional `"token"` or `"gap"`; defaults to `"token"` when the
            checkpoint has a class token, else `"gap"`.
        include_top: bool. Whether to keep a classifier head. Defaults to True.
        strict: bool. Passed to `load_npz`. Defaults to True.
        source_grid: optional (height, width) of a non-square checkpoint grid.

    Returns:
        The converted `keras.Model` (already saved to `output`).
    """
    from keras_vit.checkpoints import load_npz, read_npz
    from keras_vit.models.vit import ViT

    if not str(output).endswith(".keras"):
        raise ValueError(f"The output path must end with .keras. Received: output={output!r}")
    defaults = _from_checkpoint(read_npz(checkpoint), model)
    if image_size is None:
        image_size = defaults["image_size"]
    if num_classes is None:
        num_classes = defaults["num_classes"] or 1000
    if representation_size is None:
        representation_size = defaults["representation_size"]
    if pooling is None:
        pooling = defaults["pooling"]
    vit = ViT(
        model,
        image_size=image_size,
        num_classes=num_classes,
        include_top=include_top,
        pooling=pooling,
        representation_size=representation_size or None,
    )
    load_npz(vit, checkpoint, strict=strict, source_grid=source_grid)
    vit.save(output)
    return vit


def register(subparsers):
    parser = subparsers.add_parser(
        "convert",
        help="convert an official ViT .npz checkpoint into a .keras model",
        description=__doc__.split("\n\n")[0] + " Options left out are read from the checkpoint.",
    )
    parser.add_argument("checkpoint", help="official .npz checkpoint (e.g. ViT-B_16.npz)")
    parser.add_argument("output", help="the .keras file to write")
    parser.add_argument("--model", required=True, help="variant code, e.g. B/16, L/32, R50+B/16")
    parser.add_argument(
        "--image-size",
        type=_image_size,
        default=None,
        help="N or HxW; the position embedding is resampled to it (default: the checkpoint's)",
    )
    parser.add_argument(
        "--num-classes",
        type=int,
        default=None,
        help="classes of the head; another count than the checkpoint's gives a zero head "
        "(default: the checkpoint's)",
    )
    parser.add_argument(
        "--representation-size",
        type=int,
        default=None,
        help="pre_logits width; 0 drops pre_logits (default: the checkpoint's)",
    )
    parser.add_argument(
        "--pooling",
        choices=("token", "gap"),
        default=None,
        help="default: token if the checkpoint has a class token, else gap",
    )
    parser.add_argument("--no-top", action="store_true", help="leave out the classifier head")
    parser.add_argument(
        "--source-grid",
        type=_image_size,
        default=None,
        help="HxW patch grid of a non-square checkpoint position embedding",
    )
    parser.add_argument(
        "--no-strict",
        action="store_true",
        help="load what matches instead of failing on missing, unexpected or mis-shaped arrays",
    )
    parser.set_defaults(func=run)
    return parser


def _show_loader_log():
    """Prints the loader's log lines (head kept, pre_logits dropped, grid resized) to stderr."""
    import logging

    class _Stderr(logging.Handler):  # looks sys.stderr up at each line (it may be replaced)
        def emit(self, record):
            print(self.format(record), file=sys.stderr)

    log = logging.getLogger("keras_vit.checkpoints")
    if not any(type(h).__name__ == "_Stderr" for h in log.handlers):
        log.addHandler(_Stderr())
        log.setLevel(logging.INFO)


def run(args):
    _show_loader_log()
    try:
        model = convert(
            args.checkpoint,
            args.output,
            model=args.model,
            image_size=args.image_size,
            num_classes=args.num_classes,
            representation_size=args.representation_size,
            pooling=args.pooling,
            include_top=not args.no_top,
            strict=not args.no_strict,
            source_grid=args.source_grid,
        )
    except (ValueError, FileNotFoundError) as error:
        print(f"keras-vit convert: error: {error}", file=sys.stderr)
        return 1
    print(
        f"Wrote {args.output}: {model.name}, input {model.input_shape[1:]}, "
        f"output {model.output_shape[1:]}, {model.count_params():,} parameters"
    )
    return 0
