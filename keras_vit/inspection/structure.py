"""Where a ViT's parts and tokens are: its patch encoder, its blocks in depth order, the token
grid in input pixels (`ModelGeometry`), and the checks of the images given to inspection."""

import collections

import keras
import numpy as np

from keras_vit.layers.block_kinds import encoder_blocks
from keras_vit.layers.patch_encoder import PatchEncoder
from keras_vit.models.config import check_not_pretraining_model


class ModelGeometry(
    collections.namedtuple(
        "ModelGeometry",
        ["image_size", "grid_size", "cell_size", "num_prefix_tokens", "class_token"],
        defaults=(None,),
    )
):
    """Where the tokens of a ViT sit in its input image.

    Attributes:
        image_size: (H, W) model input size in pixels.
        grid_size: (gh, gw) patch grid of the patch encoder.
        cell_size: (float, float) pixels covered by one grid cell,
            `image_size / grid_size` (the patch size for plain ViTs, the stem
            stride times the patch size for hybrids).
        num_prefix_tokens: int. Tokens before the patch tokens (class,
            distillation and register tokens).
        class_token: bool. Whether token 0 is a class token; None means
            `num_prefix_tokens > 0`.
    """


def find_patch_encoder(model):
    """Returns the model's `PatchEncoder`: its `patch_encoder` role.

    A `keras_vit` model (`VisionTransformer`, `MaskedPatchPredictor`) names its parts by role;
    another functional model must hold exactly one `PatchEncoder` layer.

    Raises:
        ValueError: when a model without the role has no, or several, `PatchEncoder` layers.
    """
    encoder = getattr(model, "patch_encoder", None)
    if isinstance(encoder, PatchEncoder):
        return encoder
    encoders = [layer for layer in model.layers if isinstance(layer, PatchEncoder)]
    if len(encoders) != 1:
        raise ValueError(
            "Expected a model with exactly one PatchEncoder layer (or a `patch_encoder` role). "
            f"Received: {len(encoders)} PatchEncoder layers in model '{model.name}'"
        )
    return encoders[0]


def find_transformer_blocks(model):
    """Returns the model's `TransformerBlock` layers in depth order: its `blocks` role.

    A functional model without the role gives its encoder blocks (the
    `keras_vit.layers.BLOCK_KINDS` classes) in its own layer order, the
    order of its graph (each block called once), which is depth order.

    Raises:
        ValueError: when the model has no `TransformerBlock`.
    """
    blocks = getattr(model, "blocks", None)
    if blocks is None:
        blocks = [layer for layer in model.layers if isinstance(layer, encoder_blocks())]
    blocks = list(blocks)
    if not blocks:
        raise ValueError(
            f"Expected a model with TransformerBlock layers. Received: none in model '{model.name}'"
        )
    return blocks


def model_geometry(model, image_hw=None):
    """Returns the `ModelGeometry` (image size, patch grid, pixels per cell) of a ViT.

    The grid comes from the patch encoder, the image size from the model's input,
    so hybrid models (patch encoder on a CNN feature map) are measured in input
    pixels too. A model with `dynamic_image_size` (no static input size) is measured
    at `image_hw`, the size of the images given to it: the same pixels per cell as
    at its configured `image_size`, `image_hw // cell` cells.
    """
    encoder = find_patch_encoder(model)
    shape = model_input_shape(model)
    if encoder.grid_size is None:
        raise ValueError(f"Layer '{encoder.name}' is not built; call the model once first.")
    grid = tuple(int(g) for g in encoder.grid_size)
    if shape[1] is None or shape[2] is None:
        configured = getattr(getattr(model, "config", None), "image_size", None)
        if image_hw is None or configured is None:
            raise ValueError(
                "Inspection needs a model with a static input height and width, or a keras_vit "
                f"model with dynamic_image_size and images. Received: input shape={shape}"
            )
        cell = (configured[0] / grid[0], configured[1] / grid[1])
        image_size = (int(image_hw[0]), int(image_hw[1]))
        grid = (int(image_size[0] // cell[0]), int(image_size[1] // cell[1]))
        return ModelGeometry(
            image_size, grid, cell, encoder.num_prefix_tokens, bool(encoder.class_token)
        )
    image_size = (int(shape[1]), int(shape[2]))
    cell = (image_size[0] / grid[0], image_size[1] / grid[1])
    return ModelGeometry(
        image_size, grid, cell, encoder.num_prefix_tokens, bool(encoder.class_token)
    )


def is_naflex(model):
    """Whether `model` is a keras_vit NaFlex model (a dict input of patches)."""
    return bool(getattr(getattr(model, "config", None), "naflex", False))


NAFLEX_KEYS = ("patches", "patch_coord", "patch_valid")


def check_naflex_batch(batch):
    """A NaFlex dict batch as NumPy arrays (clear error naming the keys and shapes)."""
    if not isinstance(batch, dict) or set(batch) != set(NAFLEX_KEYS):
        got = sorted(batch) if isinstance(batch, dict) else type(batch).__name__
        raise ValueError(
            f"A NaFlex model is inspected on a NaFlex batch: a dict of {NAFLEX_KEYS} "
            f"(keras_vit.data.naflex_batch). Received: {got}"
        )
    out = {k: np.asarray(keras.ops.convert_to_numpy(batch[k])) for k in NAFLEX_KEYS}
    patches, coord, valid = (out[k] for k in NAFLEX_KEYS)
    if (
        patches.ndim != 3
        or coord.shape != patches.shape[:2] + (2,)
        or valid.shape != patches.shape[:2]
    ):
        raise ValueError(
            "Expected patches (B, N, P * P * C), patch_coord (B, N, 2) and patch_valid (B, N). "
            f"Received: shapes {patches.shape}, {coord.shape}, {valid.shape}"
        )
    out["patches"] = patches.astype("float32")
    out["patch_valid"] = valid.astype(bool)
    return out


def model_input_shape(model):
    check_not_pretraining_model(model, "Inspection (keras_vit.inspection)")
    shape = model.input_shape
    if isinstance(shape, list):
        if len(shape) != 1:
            raise ValueError(
                f"Expected a model with one image input. Received: {len(shape)} inputs"
            )
        shape = shape[0]
    shape = tuple(shape)
    if len(shape) != 4:
        raise ValueError(
            "Expected a model taking images (batch, height, width, channels). "
            f"Received: input shape={shape}"
        )
    return shape


def check_images(model, images):
    images = np.asarray(keras.ops.convert_to_numpy(images), dtype="float32")
    shape = model_input_shape(model)
    if images.ndim == 3:
        images = images[None]
    if images.ndim != 4 or any(
        want is not None and got != want
        for got, want in zip(images.shape[1:], shape[1:], strict=True)
    ):
        raise ValueError(
            f"images must have shape (batch, {shape[1]}, {shape[2]}, {shape[3]}) "
            f"(preprocessed to [-1, 1]). Received: images.shape={images.shape}"
        )
    return images
