"""Attention weights from the blocks' own attention layers, and attention rollout (Abnar &
Zuidema, 2020) fused over heads and layers (NumPy)."""

import collections

import keras
import numpy as np

from keras_vit.inspection.structure import (
    check_images,
    check_naflex_batch,
    find_transformer_blocks,
    is_naflex,
    model_geometry,
)
from keras_vit.layers._checks import check_bool

HEAD_FUSIONS = ("mean", "max", "min")

AttentionRollout = collections.namedtuple("AttentionRollout", ["grid", "image"])
AttentionRollout.__doc__ = """Result of `attention_rollout`.

Attributes:
    grid: float32 `(B, gh, gw)` rollout map on the patch grid (a NaFlex batch: a list of
        `(gh_i, gw_i)` maps, each image at its own grid).
    image: float32 `(B, H, W)` the same map bilinearly up-sampled to the model's
        input size (the images' size with `dynamic_image_size`; a NaFlex batch: a list of
        `(gh_i * ph, gw_i * pw)` maps, each image's resized size).
"""


def _first(tensors):
    return tensors[0] if isinstance(tensors, (list, tuple)) else tensors


def attention_maps(model, images, batch_size=32):
    """Attention weights of every head in every layer, from the model's own layers.

    Runs the model up to the input of each `TransformerBlock`, then calls every
    block with `return_attention_scores=True` (inference mode), so the weights
    are exactly what the block's attention layer computes.

    Args:
        model: functional ViT `keras.Model` (plain or hybrid; any image size with
            `dynamic_image_size`; a NaFlex model).
        images: `(B, H, W, C)` images preprocessed as the model expects
            (`model.preprocessor`, or `keras_vit.preprocess_input(x, model=model)`: [-1, 1]
            for the official models); a single `(H, W, C)` image
            is treated as a batch of one. For a NaFlex model, a NaFlex dict batch
            (`keras_vit.data.naflex_batch`).
        batch_size: int. Images per forward pass. Defaults to 32.

    Returns:
        float32 NumPy array `(B, layers, heads, T, T)`; row `q` of a map holds
        the weights query token `q` gives to every key token (rows sum to 1;
        differential attention's maps `A1 - lambda * A2` sum to `1 - lambda`).
        T = prefix tokens (class token) + patches. For a NaFlex batch, T = prefix +
        the padded length: padding keys get no weight (the model masks them) and
        padding rows are zeros.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT("mu/8", image_size=32, num_classes=10)
    >>> attention_maps(model, np.zeros((2, 32, 32, 3), "float32")).shape
    (2, 2, 2, 17, 17)

    Reference:
        Dosovitskiy et al., 2021, Sec. 4.5.
    """
    naflex = is_naflex(model)
    images = check_naflex_batch(images) if naflex else check_images(model, images)
    count = len(images["patches"]) if naflex else images.shape[0]
    blocks = find_transformer_blocks(model)
    try:
        # A rotary block's input is [tokens, rotary table]: its tokens.
        block_inputs = [_first(block.input) for block in blocks]
    except (AttributeError, ValueError) as error:
        raise ValueError(
            "Could not read the inputs of the model's TransformerBlock layers; each block "
            f"must be called exactly once in a functional model. Received error: {error}"
        ) from error
    # A rotary model's blocks also take the table of the input's grid (`model.rotary_embedding`).
    # Mixed RoPE gives each block its own table (a list, one per block).
    rotary = getattr(model, "rotary_embedding", None)
    tables = [] if rotary is None else rotary.output
    tables = list(tables) if isinstance(tables, (list, tuple)) else [tables] * bool(len(blocks))
    outputs = block_inputs + tables
    if naflex:
        inputs = model.input  # the dict of patches, coordinates, validity
    else:
        inputs = model.inputs[0] if len(model.inputs) == 1 else model.inputs
    extractor = keras.Model(inputs, outputs)
    batch_size = int(batch_size)
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive. Received: batch_size={batch_size}")
    results = []
    for start in range(0, count, batch_size):
        if naflex:
            batch = {k: v[start : start + batch_size] for k, v in images.items()}
            mask = {"attention_mask": batch["patch_valid"]}  # as the model's own blocks
        else:
            batch, mask = images[start : start + batch_size], {}
        features = extractor(batch, training=False)
        if not isinstance(features, (list, tuple)):
            features = [features]
        features = list(features)
        tables = features[len(blocks) :]
        tables = tables * len(blocks) if len(tables) == 1 else tables
        per_layer = []
        for i, (block, tokens) in enumerate(zip(blocks, features[: len(blocks)], strict=True)):
            options = {"rotary_embedding": tables[i]} if tables else {}
            _, scores = block(
                tokens, training=False, return_attention_scores=True, **options, **mask
            )
            per_layer.append(np.asarray(keras.ops.convert_to_numpy(scores), dtype="float32"))
        results.append(np.stack(per_layer, axis=1))
    attention = np.concatenate(results, axis=0)
    if naflex:
        prefix = attention.shape[-1] - images["patch_valid"].shape[1]
        keep = np.concatenate([np.ones((count, prefix), bool), images["patch_valid"]], axis=1)[
            :, None, None
        ]
        attention = attention * keep[..., :, None] * keep[..., None, :]
    return attention


def fuse_heads(attention, head_fusion="mean"):
    """Fuses the heads axis (-3) of attention weights by `"mean"`, `"max"` or `"min"`."""
    if head_fusion not in HEAD_FUSIONS:
        raise ValueError(
            f"head_fusion must be one of {HEAD_FUSIONS}. Received: head_fusion={head_fusion!r}"
        )
    return getattr(np, head_fusion)(attention, axis=-3)


def compute_rollout(
    attention, head_fusion="mean", discard_ratio=0.0, num_prefix_tokens=1, class_token=None
):
    """Attention rollout (Abnar & Zuidema, 2020) of given attention weights.

    For each layer: fuse the heads, optionally zero the lowest `discard_ratio`
    of the fused weights, add the identity (the residual connection), renormalise
    every row to sum 1, and multiply the layers together:
    `R = Â_L ... Â_2 Â_1` with `Â = rownorm(A + I)`.

    Discarding follows the common reference implementation (jacobgil/vit-explain):
    per image and layer, the `int(T * T * discard_ratio)` smallest fused weights
    are set to 0, except the class token's attention to itself (flat index 0),
    which is never dropped. (The reference applies the drop to the first image
    of a batch only and renormalises columns by mistake; here it is per image and
    per row.)

    Args:
        attention: array `(B, layers, heads, T, T)` (see `attention_maps`).
        head_fusion: `"mean"`, `"max"` or `"min"` over heads. Defaults to `"mean"`.
        discard_ratio: float in [0, 1). Fraction of the lowest weights dropped per
            layer. Defaults to 0.
        num_prefix_tokens: int. Tokens before the patch tokens. Defaults to 1.
        class_token: optional bool. Whether token 0 is a class token (its attention
            to itself is never discarded); None means `num_prefix_tokens > 0`.

    Returns:
        float64 NumPy array `(B, T, T)`: the rolled-out attention `R`, rows
        summing to 1.

    Reference:
        Abnar & Zuidema, 2020, Sec. 3 ("Attention Rollout").
    """
    attention = np.asarray(attention, dtype="float64")
    if attention.ndim != 5 or attention.shape[-1] != attention.shape[-2]:
        raise ValueError(
            "attention must have shape (batch, layers, heads, tokens, tokens). "
            f"Received: attention.shape={attention.shape}"
        )
    if isinstance(discard_ratio, bool) or not 0.0 <= float(discard_ratio) < 1.0:
        raise ValueError(
            f"discard_ratio must be a number in [0, 1). Received: discard_ratio={discard_ratio!r}"
        )
    class_token = check_bool(class_token, "class_token", allow_none=True)
    if class_token is None:
        class_token = num_prefix_tokens > 0
    fused = fuse_heads(attention, head_fusion)  # (B, L, T, T)
    batch, layers, tokens, _ = fused.shape
    eye = np.eye(tokens)
    rollout = np.broadcast_to(eye, (batch, tokens, tokens)).copy()
    num_discard = int(tokens * tokens * float(discard_ratio))
    for layer in range(layers):
        a = fused[:, layer].copy()
        if num_discard:
            flat = a.reshape(batch, -1)
            lowest = np.argsort(flat, axis=-1, kind="stable")[:, :num_discard]
            for b in range(batch):
                drop = lowest[b]
                if class_token:
                    drop = drop[drop != 0]
                flat[b, drop] = 0.0
            a = flat.reshape(batch, tokens, tokens)
        a = a + eye
        a = a / a.sum(axis=-1, keepdims=True)
        rollout = a @ rollout
    return rollout


def rollout_to_grid(rollout, grid_size, num_prefix_tokens=1, class_token=None):
    """The class token's row of a rollout (mean over the patch rows without one) on the grid.

    Args:
        rollout: array `(B, T, T)` from `compute_rollout`.
        grid_size: (gh, gw) patch grid, gh * gw = T - num_prefix_tokens.
        num_prefix_tokens: int. Defaults to 1.
        class_token: optional bool. Whether token 0 is a class token; None means
            `num_prefix_tokens > 0`.

    Returns:
        float32 `(B, gh, gw)`.
    """
    class_token = check_bool(class_token, "class_token", allow_none=True)
    rollout = np.asarray(rollout)
    gh, gw = grid_size
    if rollout.shape[-1] != num_prefix_tokens + gh * gw:
        raise ValueError(
            f"rollout has {rollout.shape[-1]} tokens, expected {num_prefix_tokens} + "
            f"{gh} * {gw}. Received: rollout.shape={rollout.shape}, grid_size={grid_size}"
        )
    if class_token is None:
        class_token = num_prefix_tokens > 0
    p = num_prefix_tokens
    row = rollout[:, 0, p:] if class_token else rollout[:, p:, p:].mean(axis=1)
    return row.reshape(-1, gh, gw).astype("float32")


def resize_bilinear(maps, size):
    """Bilinear resize of `(B, h, w)` maps to `size` (half-pixel centres, edges clamped; NumPy)."""
    maps = np.asarray(maps, dtype="float64")
    height, width = size

    def coords(n_out, n_in):
        x = (np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5
        x = np.clip(x, 0, n_in - 1)
        lo = np.floor(x).astype(int)
        hi = np.minimum(lo + 1, n_in - 1)
        return lo, hi, x - lo

    y0, y1, wy = coords(height, maps.shape[1])
    x0, x1, wx = coords(width, maps.shape[2])
    top = maps[:, y0][:, :, x0] * (1 - wx) + maps[:, y0][:, :, x1] * wx
    bottom = maps[:, y1][:, :, x0] * (1 - wx) + maps[:, y1][:, :, x1] * wx
    out = top * (1 - wy)[:, None] + bottom * wy[:, None]
    return out.astype("float32")


def attention_rollout(model, images, head_fusion="mean", discard_ratio=0.0, batch_size=32):
    """Attention rollout of a ViT: which input patches the class token draws from.

    Args:
        model: functional ViT `keras.Model` (plain or hybrid; any image size with
            `dynamic_image_size`; a NaFlex model).
        images: `(B, H, W, C)` images preprocessed to [-1, 1] (a NaFlex model: a NaFlex
            dict batch; each image's map is on its own grid, padding left out).
        head_fusion: `"mean"`, `"max"` or `"min"` over heads. Defaults to `"mean"`.
        discard_ratio: float in [0, 1). Fraction of the lowest attention weights
            dropped per layer (never the class token's attention to itself), as
            in the common reference implementation. Defaults to 0.
        batch_size: int. Images per forward pass. Defaults to 32.

    Returns:
        `AttentionRollout(grid, image)`: `grid` float32 `(B, gh, gw)`, the class
        token's row of the rollout restricted to the patch tokens (for models
        without a class token, the mean over the patch query rows); `image` float32
        `(B, H, W)`, the grid map bilinearly up-sampled to the model's input
        size. Values are raw rollout weights (not rescaled).

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT("mu/8", image_size=32, num_classes=10)
    >>> result = attention_rollout(model, np.zeros((1, 32, 32, 3), "float32"))
    >>> result.grid.shape, result.image.shape
    ((1, 4, 4), (1, 32, 32))

    Reference:
        Abnar & Zuidema, 2020; Dosovitskiy et al., 2021, Fig. 6 and Appendix D.8.
    """
    if is_naflex(model):
        batch = check_naflex_batch(images)
        attention = attention_maps(model, batch, batch_size=batch_size)
        return _naflex_rollout(model, batch, attention, head_fusion, discard_ratio)
    images = check_images(model, images)
    geometry = model_geometry(model, images.shape[1:3])
    attention = attention_maps(model, images, batch_size=batch_size)
    prefix, class_token = geometry.num_prefix_tokens, geometry.class_token
    rollout = compute_rollout(attention, head_fusion, discard_ratio, prefix, class_token)
    grid = rollout_to_grid(rollout, geometry.grid_size, prefix, class_token)
    return AttentionRollout(grid, resize_bilinear(grid, geometry.image_size))


def _naflex_rollout(model, batch, attention, head_fusion, discard_ratio):
    """Per image of a NaFlex batch: the rollout of its own tokens (padding left out), on its
    own grid (read from its coordinates), up-sampled to its resized size."""
    encoder = model.patch_encoder
    prefix, class_token = encoder.num_prefix_tokens, bool(encoder.class_token)
    ph, pw = encoder.patch_size
    grids, maps = [], []
    for b, valid in enumerate(batch["patch_valid"]):
        keep = np.concatenate([np.arange(prefix), prefix + np.flatnonzero(valid)])
        own = attention[b : b + 1][..., keep, :][..., keep]
        rollout = compute_rollout(own, head_fusion, discard_ratio, prefix, class_token)[0]
        row = rollout[0, prefix:] if class_token else rollout[prefix:, prefix:].mean(axis=0)
        coord = batch["patch_coord"][b][valid].astype("int64")
        grid = np.zeros(tuple(coord.max(axis=0) + 1), "float32")
        grid[coord[:, 0], coord[:, 1]] = row
        grids.append(grid)
        maps.append(resize_bilinear(grid[None], (grid.shape[0] * ph, grid.shape[1] * pw))[0])
    return AttentionRollout(grids, maps)
