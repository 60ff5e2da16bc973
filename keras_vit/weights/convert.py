"""A checkpoint -> a saved `.keras` model (`keras-vit convert`).

`convert_checkpoint` builds `keras_vit.ViT(model, ...)`, loads an official `.npz`
checkpoint with `keras_vit.weights.npz.checkpoints.load_npz` (strict unless `strict=False`; the
position embedding is resampled to `image_size`) and saves the model with
`model.save()`. Arguments left out are read from the checkpoint: the image size from
its position-embedding grid, the class count from its head, the representation size
from its `pre_logits`, the pooling from its class token.

`convert_timm` and `convert_huggingface` do the same for a timm checkpoint
(`keras_vit.from_timm`) and a transformers `save_pretrained` folder
(`keras_vit.from_huggingface`). None of them replaces an existing output unless
`overwrite=True`, and the file appears only once it is complete.
"""

import math
import os

from keras_vit.layers._checks import to_pair


def checkpoint_defaults(arrays, variant):
    """Defaults read from checkpoint arrays: image size, classes, representation, pooling.

    Args:
        arrays: dict. The checkpoint's arrays by name (`checkpoints.read_npz`).
        variant: str. Variant code of the model, e.g. `"B/16"`.

    Returns:
        A dict with `image_size`, `num_classes` (None without a head),
        `representation_size` (None without `pre_logits`) and `pooling`.
    """
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


def convert_checkpoint(
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
    overwrite=False,
):
    """Converts an official `.npz` checkpoint into a saved `.keras` model.

    Args:
        checkpoint: str. Path to the official `.npz` file.
        output: str. Path of the `.keras` file to write.
        model: str. Variant code, e.g. `"B/16"` or `"R50+B/16"`.
        image_size: optional int or (height, width). Defaults to the
            checkpoint's resolution (its position-embedding grid).
        num_classes: optional int. Defaults to the checkpoint head's class
            count. A different count gives a zero-initialised head; 0 none.
        representation_size: optional int. Defaults to the checkpoint's
            `pre_logits` width (if any). 0 drops `pre_logits`.
        pooling: optional `"token"` or `"gap"`. Defaults to `"token"` when the
            checkpoint has a class token, else `"gap"`.
        include_top: bool. Whether to keep a classifier head. Defaults to True.
        strict: bool. Passed to `load_npz`. Defaults to True.
        source_grid: optional (height, width) of a non-square checkpoint grid.
        overwrite: bool. Replace an existing `output` file. Defaults to False.

    Returns:
        The converted `keras.Model` (already saved to `output`).

    Raises:
        ValueError: `output` does not end with `.keras`, or the checkpoint
            does not fit `model`.
        FileExistsError: `output` exists and `overwrite` is False.
        FileNotFoundError: `checkpoint` does not exist.

    Example:

    >>> convert_checkpoint("ViT-B_16.npz", "vit_b16.keras",
    ...                    model="B/16", num_classes=10)  # doctest: +SKIP
    """
    from keras_vit.models.arguments import check_size_arguments
    from keras_vit.models.vit import ViT
    from keras_vit.saving import atomic_write
    from keras_vit.weights.npz.checkpoints import load_npz, read_npz

    check_size_arguments(image_size=image_size, num_classes=num_classes)
    output = check_output(output, overwrite)
    defaults = checkpoint_defaults(read_npz(checkpoint), model)
    if num_classes == 0:  # as from_timm / from_huggingface: no head
        include_top = False
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
    atomic_write(output, vit.save)
    return vit


def check_output(output, overwrite):
    """The output path as a str; a `ValueError` unless `.keras`, `FileExistsError` if it exists."""
    output = os.fspath(output)
    if not output.endswith(".keras"):
        raise ValueError(f"The output path must end with .keras. Received: output={output!r}")
    if os.path.isdir(output):
        raise IsADirectoryError(
            f"The output {output!r} is a folder; expected a .keras file. --overwrite replaces "
            "only a file this command writes, never a folder: choose another output path."
        )
    from keras_vit.saving import check_writable

    check_writable(output)
    if os.path.lexists(output) and not overwrite:
        raise FileExistsError(
            f"The output file {output!r} already exists. Pass overwrite=True (`--overwrite` on "
            "the command line) to replace it, or choose another output path."
        )
    return output


def convert_timm(name, checkpoint, output, *, overwrite=False, **kwargs):
    """Converts a timm checkpoint into a saved `.keras` model (`keras_vit.from_timm`).

    Args:
        name: str. The timm model name (with or without its tag).
        checkpoint: a `.safetensors` / `.pth` / `.bin` path (or a dict), or None: the name's
            weights from the Hugging Face Hub (`from_timm(name, pretrained=True)`).
        output: str. Path of the `.keras` file to write.
        overwrite: bool. Replace an existing `output`. Defaults to False.
        **kwargs: `image_size`, `num_classes`, `include_top`, ... for `from_timm`.

    Returns:
        The converted `keras.Model` (already saved to `output`).

    Example:

    >>> convert_timm("vit_base_patch16_224.augreg2_in21k_ft_in1k", "model.safetensors",
    ...              "vit_b16.keras")  # doctest: +SKIP
    """
    from keras_vit.saving import atomic_write
    from keras_vit.weights.timm.reader import from_timm

    output = check_output(output, overwrite)
    model = from_timm(name, checkpoint, pretrained=checkpoint is None, **kwargs)
    atomic_write(output, model.save)
    return model


def convert_huggingface(path, output, *, overwrite=False, **kwargs):
    """Converts a transformers ViT folder into a saved `.keras` model (`from_huggingface`).

    Args:
        path: str. The `save_pretrained` folder (config.json and the weights), or a Hub
            repo id (`"google/vit-base-patch16-224"`, `"hf://<org>/<repo>@<revision>"`).
        output: str. Path of the `.keras` file to write.
        overwrite: bool. Replace an existing `output`. Defaults to False.
        **kwargs: `image_size`, `num_classes`, `include_top`, ... for `from_huggingface`.

    Returns:
        The converted `keras.Model` (already saved to `output`).

    Example:

    >>> convert_huggingface("vit-base-patch16-224", "vit_b16.keras")  # doctest: +SKIP
    """
    from keras_vit.saving import atomic_write
    from keras_vit.weights.huggingface.reader import from_huggingface

    output = check_output(output, overwrite)
    model = from_huggingface(path, **kwargs)
    atomic_write(output, model.save)
    return model


convert = convert_checkpoint  # the name `keras_vit.commands.convert.convert` had
