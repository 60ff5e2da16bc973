"""`feature_extractor`: the outputs of chosen transformer blocks, as maps or token sequences.

The Keras counterpart of timm's `forward_intermediates(indices=..., norm=False,
output_fmt="NCHW")` (transposed to channels-last): dense-prediction heads (segmentation,
detection) and probing read the blocks' raw outputs, before the final norm.
"""

import keras

from keras_vit.layers import TokenGrid
from keras_vit.models.encoder import VisionTransformer

OUTPUTS = ("spatial", "tokens")


def take_indices(num_blocks, indices):
    """timm's `feature_take_indices`: an int n takes the last n blocks; a list its entries.

    Negative entries count from the end. Returns absolute indices in the given order.

    Example:

    >>> take_indices(12, 2), take_indices(12, [0, -1])
    ([10, 11], [0, 11])
    """
    if isinstance(indices, bool):
        raise ValueError(f"indices must be an int or a list of ints. Received: indices={indices!r}")
    if isinstance(indices, int):
        if not 0 < indices <= num_blocks:
            raise ValueError(
                f"indices={indices} asks for the last {indices} blocks; the model has "
                f"{num_blocks} (expected 1 to {num_blocks})."
            )
        return list(range(num_blocks - indices, num_blocks))
    try:
        items = list(indices)
    except TypeError:
        raise ValueError(
            f"indices must be an int or a list of ints. Received: indices={indices!r}"
        ) from None
    if not items:
        raise ValueError("indices must name at least one block. Received: indices=[]")
    taken = []
    for i in items:
        if isinstance(i, bool) or not isinstance(i, int):
            raise ValueError(f"indices must be ints. Received: {i!r} in indices={indices!r}")
        index = num_blocks + i if i < 0 else i
        if not 0 <= index < num_blocks:
            raise ValueError(
                f"Block index {i} is out of range for a model with {num_blocks} blocks "
                f"(expected {-num_blocks} to {num_blocks - 1})."
            )
        taken.append(index)
    return taken


def feature_extractor(model, indices, *, output="spatial", name=None):
    """A functional model returning the outputs of the given transformer blocks.

    Args:
        model: a (plain, hybrid, `dynamic_image_size` or NaFlex) ViT built by
            `keras_vit.ViT`, any head.
        indices: int n (the last n blocks) or a list of block indices (negatives count from
            the end), as timm's `forward_intermediates(indices=...)`.
        output: `"spatial"`: `(B, h, w, D)` maps of the patch tokens (prefix tokens dropped;
            the grid of each input, so dynamic-size models give maps of their input's size),
            timm's `output_fmt="NCHW"` transposed to NHWC; `"tokens"`: the `(B, T, D)`
            sequences with the prefix tokens (timm's `"NLC"` with `return_prefix_tokens`), the
            only choice for NaFlex models. Defaults to `"spatial"`.
        name: optional model name. Defaults to `model.name + "_features"`.

    Returns:
        A functional `keras.Model` on `model`'s input (sharing its layers and weights) with one
        output per index, in the order given (a list; one tensor when a single block is
        taken, as Keras returns single outputs). No final norm is applied (timm's
        `norm=False`). A NaFlex model's takes its dict batch and returns a dict: `"tokens"`,
        the list of `(B, prefix + N, D)` sequences, and `"patch_valid"`, the `(B, N)`
        validity of their patch tokens (timm's `forward_intermediates(..., output_dict=True)`
        on NaFlex input; padding tokens hold values nothing reads).

    Raises:
        ValueError: a model that is not a keras_vit `VisionTransformer`, an index out of
            range, or an unknown `output`.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT("mu/8", image_size=32, num_classes=10)
    >>> [tuple(s) for s in feature_extractor(model, [0, -1]).output_shape]
    [(None, 4, 4, 32), (None, 4, 4, 32)]
    >>> feature_extractor(model, 1, output="tokens").output_shape
    (None, 17, 32)
    """
    if output not in OUTPUTS:
        raise ValueError(f"output must be one of {OUTPUTS}. Received: output={output!r}")
    if not isinstance(model, VisionTransformer):
        raise ValueError(
            "feature_extractor needs a model built by keras_vit (a VisionTransformer, e.g. "
            f"from keras_vit.ViT or keras_vit.load_model). Received: {type(model).__name__} "
            f"{getattr(model, 'name', '')!r}"
        )
    naflex = model.config.naflex
    if naflex and output == "spatial":
        raise ValueError(
            "A NaFlex model's images have grids of their own (and padding): there is no one "
            "spatial map per batch. Use output='tokens' (as timm's forward_intermediates on "
            "NaFlex input: output_fmt='NLC'). Received: output='spatial', naflex=True"
        )
    blocks, encoder = model.blocks, model.patch_encoder
    outputs = []
    for index in take_indices(len(blocks), indices):
        tokens = blocks[index].output
        if output == "spatial":
            tokens = TokenGrid(
                encoder.patch_size,
                num_prefix_tokens=encoder.num_prefix_tokens,
                name=f"feature_grid_{len(outputs)}",
            )(tokens, encoder.input)
        outputs.append(tokens)
    name = name or f"{model.name}_features"
    if naflex:  # the patch tokens' validity beside the sequences (timm's output_dict)
        patch_valid = model.input["patch_valid"]
        return keras.Model(model.input, {"tokens": outputs, "patch_valid": patch_valid}, name=name)
    inputs = model.inputs[0] if len(model.inputs) == 1 else model.inputs
    return keras.Model(inputs, outputs, name=name)
