"""Inspecting a Vision Transformer: attention maps, attention rollout, mean attention
distance, position-embedding similarity and patch-embedding filters (the paper's
Sec. 4.5, Fig. 6 and Fig. 7), as NumPy arrays and as PNG pictures.

Everything is computed from the model's own layers: the attention weights come
from each `TransformerBlock`'s own attention layer
(`return_attention_scores=True`), so there is no second attention
implementation to drift from the model. The code is backend-neutral (`keras`,
`keras.ops`, NumPy); matplotlib is imported only by the plotting functions,
which draw on an Agg canvas without touching pyplot's global state.

The model must be a functional `keras.Model` (what `keras_vit.ViT` and the
hybrid builders return) holding one `PatchEncoder` (normally named
`patch_encoder`) and its `TransformerBlock` layers (`encoderblock_{i}`), each
called once. Hybrid models work too: their patch encoder reads a CNN feature
map, so one grid cell covers `image_size / grid_size` input pixels rather than
`patch_size`; all pixel distances and up-sampling here use
`image_size / grid_size`, which equals the patch size for plain ViTs.

The attention weights are computed explicitly (not by a fused kernel), so inspection
works whatever `keras.config.enable_flash_attention()` says.

Reference:
    Dosovitskiy et al., 2021, Sec. 4.5 and Appendix D.7-D.8;
    Abnar & Zuidema, 2020, "Quantifying Attention Flow in Transformers".
"""

import collections
import os
import re

import keras
import numpy as np

from keras_vit.layers import position_embedding as pe
from keras_vit.layers.patch_encoder import PatchEncoder
from keras_vit.layers.transformer_block import TransformerBlock

HEAD_FUSIONS = ("mean", "max", "min")

AttentionRollout = collections.namedtuple("AttentionRollout", ["grid", "image"])
AttentionRollout.__doc__ = """Result of `attention_rollout`.

Attributes:
    grid: float32 `(B, gh, gw)` rollout map on the patch grid.
    image: float32 `(B, H, W)` the same map bilinearly up-sampled to the model's
        input size.
"""


# --------------------------------------------------------------------------------------------
# Finding the layers
# --------------------------------------------------------------------------------------------


class ModelGeometry(collections.namedtuple(
    "ModelGeometry",
    ["image_size", "grid_size", "cell_size", "num_prefix_tokens", "class_token"],
    defaults=(None,),
)):
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
    """Returns the model's `PatchEncoder` (the layer `patch_encoder` if there is one).

    Raises:
        ValueError: when the model has no (or more than one unnamed) `PatchEncoder`.
    """
    encoders = [layer for layer in model.layers if isinstance(layer, PatchEncoder)]
    named = [layer for layer in encoders if layer.name == "patch_encoder"]
    if named:
        return named[0]
    if len(encoders) != 1:
        raise ValueError(
            "Expected a model with exactly one PatchEncoder layer (named 'patch_encoder'). "
            f"Received: {len(encoders)} PatchEncoder layers in model '{model.name}'"
        )
    return encoders[0]


def find_transformer_blocks(model):
    """Returns the model's `TransformerBlock` layers in depth order.

    Blocks named `encoderblock_{i}` are ordered by `i`; others keep the model's
    layer order (the topological order of a functional model).

    Raises:
        ValueError: when the model has no `TransformerBlock`.
    """
    blocks = [layer for layer in model.layers if isinstance(layer, TransformerBlock)]
    if not blocks:
        raise ValueError(
            f"Expected a model with TransformerBlock layers. Received: none in model '{model.name}'"
        )
    pattern = re.compile(r"^encoderblock_(\d+)$")
    if all(pattern.match(b.name) for b in blocks):
        blocks.sort(key=lambda b: int(pattern.match(b.name).group(1)))
    return blocks


def model_geometry(model):
    """Returns the `ModelGeometry` (image size, patch grid, pixels per cell) of a ViT.

    The grid comes from the patch encoder, the image size from the model's input,
    so hybrid models (patch encoder on a CNN feature map) are measured in input
    pixels too.
    """
    encoder = find_patch_encoder(model)
    shape = model_input_shape(model)
    if shape[1] is None or shape[2] is None:
        raise ValueError(
            "Inspection needs a model with a static input height and width. "
            f"Received: input shape={shape}"
        )
    if encoder.grid_size is None:
        raise ValueError(f"Layer '{encoder.name}' is not built; call the model once first.")
    image_size = (int(shape[1]), int(shape[2]))
    grid = tuple(int(g) for g in encoder.grid_size)
    cell = (image_size[0] / grid[0], image_size[1] / grid[1])
    return ModelGeometry(
        image_size, grid, cell, encoder.num_prefix_tokens, bool(encoder.class_token)
    )


def model_input_shape(model):
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


def _check_images(model, images):
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


# --------------------------------------------------------------------------------------------
# Attention weights
# --------------------------------------------------------------------------------------------


def attention_maps(model, images, batch_size=32):
    """Attention weights of every head in every layer, from the model's own layers.

    Runs the model up to the input of each `TransformerBlock`, then calls every
    block with `return_attention_scores=True` (inference mode), so the weights
    are exactly what the block's attention layer computes.

    Args:
        model: functional ViT `keras.Model` (plain or hybrid).
        images: `(B, H, W, C)` images preprocessed as the model expects
            (`keras_vit.preprocess_input`: [-1, 1]); a single `(H, W, C)` image
            is treated as a batch of one.
        batch_size: int. Images per forward pass. Defaults to 32.

    Returns:
        float32 NumPy array `(B, layers, heads, T, T)`; row `q` of a map holds
        the weights query token `q` gives to every key token (rows sum to 1).
        T = prefix tokens (class token) + patches.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT("mu/8", image_size=32, num_classes=10)
    >>> attention_maps(model, np.zeros((2, 32, 32, 3), "float32")).shape
    (2, 2, 2, 17, 17)

    Reference:
        Dosovitskiy et al., 2021, Sec. 4.5.
    """
    images = _check_images(model, images)
    blocks = find_transformer_blocks(model)
    try:
        block_inputs = [block.input for block in blocks]
    except (AttributeError, ValueError) as error:
        raise ValueError(
            "Could not read the inputs of the model's TransformerBlock layers; each block "
            f"must be called exactly once in a functional model. Received error: {error}"
        ) from error
    inputs = model.inputs[0] if len(model.inputs) == 1 else model.inputs
    extractor = keras.Model(inputs, block_inputs)
    batch_size = int(batch_size)
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive. Received: batch_size={batch_size}")
    results = []
    for start in range(0, images.shape[0], batch_size):
        batch = images[start : start + batch_size]
        features = extractor(batch, training=False)
        if not isinstance(features, (list, tuple)):
            features = [features]
        per_layer = []
        for block, tokens in zip(blocks, features, strict=True):
            _, scores = block(tokens, training=False, return_attention_scores=True)
            per_layer.append(np.asarray(keras.ops.convert_to_numpy(scores), dtype="float32"))
        results.append(np.stack(per_layer, axis=1))
    return np.concatenate(results, axis=0)


# --------------------------------------------------------------------------------------------
# Attention rollout
# --------------------------------------------------------------------------------------------


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
        model: functional ViT `keras.Model` (plain or hybrid).
        images: `(B, H, W, C)` images preprocessed to [-1, 1].
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
    geometry = model_geometry(model)
    attention = attention_maps(model, images, batch_size=batch_size)
    prefix, class_token = geometry.num_prefix_tokens, geometry.class_token
    rollout = compute_rollout(attention, head_fusion, discard_ratio, prefix, class_token)
    grid = rollout_to_grid(rollout, geometry.grid_size, prefix, class_token)
    return AttentionRollout(grid, resize_bilinear(grid, geometry.image_size))


# --------------------------------------------------------------------------------------------
# Mean attention distance
# --------------------------------------------------------------------------------------------


def patch_centres(grid_size, cell_size):
    """Pixel coordinates (y, x) of the patch centres in row-major token order: `(gh * gw, 2)`."""
    gh, gw = grid_size
    rows, cols = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")
    y = (rows.reshape(-1) + 0.5) * cell_size[0]
    x = (cols.reshape(-1) + 0.5) * cell_size[1]
    return np.stack([y, x], axis=-1)


def patch_distances(grid_size, cell_size):
    """Euclidean pixel distances between all patch centres: `(N, N)`, N = gh * gw."""
    centres = patch_centres(grid_size, cell_size)
    return np.sqrt(((centres[:, None, :] - centres[None, :, :]) ** 2).sum(-1))


def compute_attention_distance(attention, grid_size, cell_size, num_prefix_tokens=1):
    """Mean attention distance of given attention weights, per layer and head.

    Only patch tokens count: the prefix tokens (class, distillation, register) are
    dropped as queries and as keys,
    and each query's weights over the patch keys are renormalised to sum to 1
    before weighting the pixel distances between patch centres. The
    per-query distances are then averaged over queries and images.

    Args:
        attention: array `(B, layers, heads, T, T)`.
        grid_size: (gh, gw) patch grid.
        cell_size: (float, float) pixels per grid cell.
        num_prefix_tokens: int. Leading non-patch tokens. Defaults to 1.

    Returns:
        float32 `(layers, heads)` distances in pixels.
    """
    attention = np.asarray(attention, dtype="float64")
    p = num_prefix_tokens
    n = grid_size[0] * grid_size[1]
    if attention.ndim != 5 or attention.shape[-1] != p + n or attention.shape[-2] != p + n:
        raise ValueError(
            f"attention must have shape (batch, layers, heads, {p + n}, {p + n}) for "
            f"grid_size={tuple(grid_size)} and {p} prefix tokens. "
            f"Received: attention.shape={attention.shape}"
        )
    patches = attention[..., p:, p:]
    total = patches.sum(-1)
    weighted = np.einsum("blhqk,qk->blhq", patches, patch_distances(grid_size, cell_size))
    per_query = np.divide(weighted, total, out=np.zeros_like(weighted), where=total > 0)
    return per_query.mean(axis=(0, 3)).astype("float32")


def mean_attention_distance(model, images, batch_size=32):
    """Mean attention distance per layer and head, in input pixels (Fig. 7 right).

    For every query patch, the attention-weighted mean of the pixel distances
    between its centre and the centres of the key patches, averaged over all
    query patches and all images. Only patch tokens take part: the class token is
    excluded as query and as key, and each query's weights over the patch keys
    are renormalised to sum to 1. Distances are in the model's input pixels
    (one grid cell is `image_size / grid_size` pixels, which for hybrid models is
    the stem stride times the patch size).

    Args:
        model: functional ViT `keras.Model` (plain or hybrid).
        images: `(B, H, W, C)` images preprocessed to [-1, 1].
        batch_size: int. Images per forward pass. Defaults to 32.

    Returns:
        float32 NumPy array `(layers, heads)`.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT("mu/8", image_size=32, num_classes=10)
    >>> mean_attention_distance(model, np.zeros((1, 32, 32, 3), "float32")).shape
    (2, 2)

    Reference:
        Dosovitskiy et al., 2021, Sec. 4.5, Fig. 7 (right) and Appendix D.7.
    """
    geometry = model_geometry(model)
    attention = attention_maps(model, images, batch_size=batch_size)
    return compute_attention_distance(
        attention, geometry.grid_size, geometry.cell_size, geometry.num_prefix_tokens
    )


# --------------------------------------------------------------------------------------------
# Position embeddings and patch-embedding filters
# --------------------------------------------------------------------------------------------


def patch_position_embeddings(model):
    """The position embeddings of the patch tokens as NumPy `(gh * gw, D)`.

    Learned embeddings are read from the patch encoder's weight; `"sincos2d"`
    tables are recomputed. Prefix (class, distillation, register) rows are dropped.
    """
    encoder = find_patch_encoder(model)
    kind = encoder.position_embedding
    if kind == "learned":
        table = keras.ops.convert_to_numpy(encoder.position_embeddings)[0]
        return np.asarray(table[encoder.num_prefix_positions :], dtype="float64")
    if kind == "sincos2d":
        table = pe.sincos_2d_position_embedding(encoder.grid_size, encoder.hidden_dim)[0]
        return np.asarray(table, dtype="float64")
    raise ValueError(
        f"Layer '{encoder.name}' has no position embedding to compare. "
        f"Received: position_embedding={kind!r}"
    )


def position_embedding_similarity(model):
    """Cosine similarity of each patch's position embedding with all others (Fig. 7 centre).

    Args:
        model: ViT `keras.Model` with a learned or `"sincos2d"` position embedding.

    Returns:
        float32 NumPy array `(gh, gw, gh, gw)`: entry `[i, j, k, l]` is the
        cosine similarity between the embeddings of patch (i, j) and patch (k, l).
        The diagonal is 1 and the array is symmetric.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT("mu/8", image_size=(32, 48), num_classes=10)
    >>> position_embedding_similarity(model).shape
    (4, 6, 4, 6)

    Reference:
        Dosovitskiy et al., 2021, Sec. 4.5, Fig. 7 (centre) and Appendix D.4.
    """
    table = patch_position_embeddings(model)
    norms = np.linalg.norm(table, axis=-1, keepdims=True)
    unit = table / np.maximum(norms, 1e-12)
    similarity = np.clip(unit @ unit.T, -1.0, 1.0)
    gh, gw = find_patch_encoder(model).grid_size
    return similarity.reshape(gh, gw, gh, gw).astype("float32")


def embedding_filters(model, n=28):
    """Top principal components of the patch-embedding filters (Fig. 7 left).

    The patch encoder's kernel `(ph, pw, C, D)` holds D linear filters of
    `ph * pw * C` weights each. The filters are centred (mean filter removed) and
    decomposed by SVD; the top `n` right singular vectors are returned as patches.
    The sign of each component is fixed so that its largest-magnitude weight is
    positive.

    Args:
        model: ViT `keras.Model`.
        n: int. Number of components, at most `min(D, ph * pw * C)`.
            Defaults to 28 (as in the paper's figure).

    Returns:
        float32 NumPy array `(n, ph, pw, C)`, unit-norm components in order of
        decreasing explained variance.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT("mu/8", image_size=32, num_classes=10)
    >>> embedding_filters(model, n=4).shape
    (4, 8, 8, 3)

    Reference:
        Dosovitskiy et al., 2021, Sec. 4.5, Fig. 7 (left).
    """
    encoder = find_patch_encoder(model)
    kernel = np.asarray(keras.ops.convert_to_numpy(encoder.kernel), dtype="float64")
    ph, pw, channels, hidden = kernel.shape
    size = ph * pw * channels
    limit = min(hidden, size)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 0 < n <= limit:
        raise ValueError(
            f"n must be an integer in [1, {limit}] (min of hidden_dim={hidden} and "
            f"ph * pw * C={size}). Received: n={n!r}"
        )
    filters = kernel.reshape(size, hidden).T  # (D, ph * pw * C)
    filters = filters - filters.mean(axis=0, keepdims=True)
    _, _, vt = np.linalg.svd(filters, full_matrices=False)
    components = vt[:n]
    signs = np.sign(components[np.arange(n), np.abs(components).argmax(axis=1)])
    components = components * np.where(signs == 0, 1.0, signs)[:, None]
    return components.reshape(n, ph, pw, channels).astype("float32")


# --------------------------------------------------------------------------------------------
# Pictures (matplotlib, imported lazily; Agg canvas, no pyplot state)
# --------------------------------------------------------------------------------------------


def _figure(figsize, dpi):
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as error:  # pragma: no cover - matplotlib is a declared dependency
        raise ImportError(
            "Plotting needs matplotlib: pip install matplotlib"
        ) from error
    fig = Figure(figsize=figsize, dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path):
    path = os.fspath(path)
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    fig.savefig(path, dpi=fig.dpi, format="png")
    return path


def _display_image(image):
    """An image as float [0, 1] `(H, W, 3)` or `(H, W)` for imshow.

    Accepts uint8, [0, 255] or [-1, 1] inputs.
    """
    image = np.asarray(image, dtype="float64")
    if image.ndim == 3 and image.shape[-1] == 1:
        image = image[..., 0]
    if image.min() < 0.0:  # preprocessed to [-1, 1]
        image = (image + 1.0) / 2.0
    elif image.max() > 1.0:  # 0..255
        image = image / 255.0
    return np.clip(image, 0.0, 1.0)


def _normalise(x):
    x = np.asarray(x, dtype="float64")
    low, high = x.min(), x.max()
    return np.zeros_like(x) if high - low <= 0 else (x - low) / (high - low)


def plot_attention_overlay(images, maps, path, titles=None, panel_size=2.5, dpi=100):
    """Draws each image, its attention map and the map overlaid on the image; saves a PNG.

    One row per image with three panels: the input, the map (rescaled to [0, 1]
    per image), and the input shaded by the map. Maps are bilinearly resized to
    each image's own size, so an image may be shown at a higher resolution than
    the model's input.

    Args:
        images: sequence of `(H, W, C)` or `(H, W)` images, uint8 / [0, 255] /
            [0, 1] / [-1, 1] values (sizes may differ between images).
        maps: sequence of `(h, w)` maps (e.g. `attention_rollout(...).grid`).
        path: str. Output PNG path (folders are created).
        titles: optional sequence of row titles.
        panel_size: float. Inches per panel. Defaults to 2.5.
        dpi: int. Defaults to 100.

    Returns:
        str, the path. The PNG is `3 * panel_size * dpi` pixels wide and
        `len(images) * panel_size * dpi` high.
    """
    if len(images) != len(maps) or not len(images):
        raise ValueError(
            "images and maps must be non-empty and of the same length. "
            f"Received: {len(images)} images, {len(maps)} maps"
        )
    rows = len(images)
    fig = _figure((3 * panel_size, rows * panel_size), dpi)
    width, height = 3 * panel_size, rows * panel_size
    left = (0.3 if titles is not None else 0.05) / width
    fig.subplots_adjust(
        left=left, right=0.99, bottom=0.05 / height, top=1 - 0.3 / height, wspace=0.05, hspace=0.12
    )
    for r, (image, attention) in enumerate(zip(images, maps, strict=True)):
        image = _display_image(image)
        heat = _normalise(resize_bilinear(np.asarray(attention)[None], image.shape[:2])[0])
        grey = image if image.ndim == 2 else image.mean(-1)
        cmap = "gray" if image.ndim == 2 else None
        axes = [fig.add_subplot(rows, 3, 3 * r + c + 1) for c in range(3)]
        axes[0].imshow(image, cmap=cmap, vmin=0, vmax=1)
        axes[1].imshow(heat, cmap="inferno", vmin=0, vmax=1)
        axes[2].imshow(grey, cmap="gray", vmin=0, vmax=1)
        axes[2].imshow(heat, cmap="inferno", vmin=0, vmax=1, alpha=0.55)
        for ax in axes:
            ax.set_xticks([])
            ax.set_yticks([])
        if r == 0:
            for ax, label in zip(axes, ("input", "attention rollout", "overlay"), strict=True):
                ax.set_title(label, fontsize=10)
        if titles is not None:
            axes[0].set_ylabel(titles[r], fontsize=9)
    return _save(fig, path)


def plot_attention_distance(distances, path, figsize=(5.0, 4.0), dpi=100):
    """Scatter of mean attention distance against depth, one point per head (Fig. 7 right).

    Args:
        distances: `(layers, heads)` from `mean_attention_distance`.
        path: str. Output PNG path.
        figsize: (width, height) in inches. Defaults to (5, 4).
        dpi: int. Defaults to 100.

    Returns:
        str, the path (a `figsize * dpi` pixel PNG).
    """
    distances = np.asarray(distances)
    if distances.ndim != 2:
        raise ValueError(
            f"distances must have shape (layers, heads). Received: shape={distances.shape}"
        )
    layers, heads = distances.shape
    fig = _figure(figsize, dpi)
    ax = fig.add_subplot(1, 1, 1)
    depth = np.repeat(np.arange(1, layers + 1), heads)
    colour = np.tile(np.arange(heads), layers)
    points = ax.scatter(depth, distances.reshape(-1), c=colour, cmap="viridis", s=18)
    if heads > 1:
        fig.colorbar(points, ax=ax, label="head")
    ax.set_xlabel("Network depth (layer)")
    ax.set_ylabel("Mean attention distance (pixels)")
    ax.set_xticks(np.arange(1, layers + 1))
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)


def plot_position_embedding_similarity(similarity, path, figsize=(5.0, 4.4), dpi=100):
    """Tile grid of position-embedding similarities (Fig. 7 centre).

    Tile (i, j) shows the cosine similarity of patch (i, j)'s position embedding
    with every other patch's, laid out on the patch grid.

    Args:
        similarity: `(gh, gw, gh, gw)` from `position_embedding_similarity`.
        path: str. Output PNG path.
        figsize: (width, height) in inches. Defaults to (5, 4.4).
        dpi: int. Defaults to 100.

    Returns:
        str, the path (a `figsize * dpi` pixel PNG).
    """
    similarity = np.asarray(similarity, dtype="float64")
    if similarity.ndim != 4 or similarity.shape[:2] != similarity.shape[2:]:
        raise ValueError(
            f"similarity must have shape (gh, gw, gh, gw). Received: shape={similarity.shape}"
        )
    gh, gw = similarity.shape[:2]
    mosaic = np.full((gh * (gh + 1) - 1, gw * (gw + 1) - 1), np.nan)
    for i in range(gh):
        for j in range(gw):
            top, left = i * (gh + 1), j * (gw + 1)
            mosaic[top : top + gh, left : left + gw] = similarity[i, j]
    fig = _figure(figsize, dpi)
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(mosaic, cmap="viridis", vmin=-1, vmax=1, interpolation="nearest")
    ax.set_xticks([j * (gw + 1) + (gw - 1) / 2 for j in range(gw)], [str(j + 1) for j in range(gw)])
    ax.set_yticks([i * (gh + 1) + (gh - 1) / 2 for i in range(gh)], [str(i + 1) for i in range(gh)])
    ax.tick_params(length=0, labelsize=7)
    ax.set_xlabel("Input patch column")
    ax.set_ylabel("Input patch row")
    fig.colorbar(image, ax=ax, label="Cosine similarity", shrink=0.8)
    ax.set_title("Position embedding similarity", fontsize=10)
    return _save(fig, path)


def plot_embedding_filters(filters, path, columns=7, panel_size=0.8, dpi=100):
    """Grid of patch-embedding principal components (Fig. 7 left).

    Each component is min-max scaled to [0, 1] and drawn as an RGB patch (3
    channels) or a grey one (1 channel); components with another channel count
    (hybrid models: 1 x 1 patches on a feature map) are drawn as grey images of
    their `(ph, pw * C)` weights.

    Args:
        filters: `(n, ph, pw, C)` from `embedding_filters`.
        path: str. Output PNG path.
        columns: int. Panels per row. Defaults to 7.
        panel_size: float. Inches per panel. Defaults to 0.8.
        dpi: int. Defaults to 100.

    Returns:
        str, the path. The PNG is `columns * panel_size * dpi` pixels wide and
        `ceil(n / columns) * panel_size * dpi + 0.3 * dpi` high (title strip).
    """
    filters = np.asarray(filters, dtype="float64")
    if filters.ndim != 4:
        raise ValueError(f"filters must have shape (n, ph, pw, C). Received: shape={filters.shape}")
    n, ph, pw, channels = filters.shape
    columns = min(columns, n)
    rows = -(-n // columns)
    title = 0.3
    fig = _figure((columns * panel_size, rows * panel_size + title), dpi)
    top = rows * panel_size / (rows * panel_size + title)
    fig.subplots_adjust(left=0.01, right=0.99, bottom=0.01, top=top, wspace=0.08, hspace=0.08)
    for k in range(n):
        patch = _normalise(filters[k])
        if channels == 3:
            shown, cmap = patch, None
        elif channels == 1:
            shown, cmap = patch[..., 0], "gray"
        else:
            shown, cmap = patch.reshape(ph, pw * channels), "gray"
        ax = fig.add_subplot(rows, columns, k + 1)
        ax.imshow(shown, cmap=cmap, vmin=0, vmax=1, interpolation="nearest")
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle("Principal components of the patch embedding", fontsize=9, y=0.995, va="top")
    return _save(fig, path)


def save_inspection_figures(
    model,
    images,
    out_dir,
    display_images=None,
    titles=None,
    distance_images=None,
    head_fusion="mean",
    discard_ratio=0.0,
    num_filters=28,
    prefix="",
    dpi=100,
):
    """Computes and saves all four pictures for a model; returns their paths.

    Args:
        model: functional ViT `keras.Model`.
        images: `(B, H, W, C)` preprocessed model inputs used for the rollout
            overlay (and, unless `distance_images` is given, for the distances).
        out_dir: str. Output folder (created).
        display_images: optional sequence of images to draw the overlays on
            (e.g. the originals at full resolution); defaults to `images`.
        titles: optional row titles for the overlay.
        distance_images: optional `(B', H, W, C)` preprocessed images for the
            mean attention distance. Defaults to `images`.
        head_fusion: rollout head fusion. Defaults to `"mean"`.
        discard_ratio: rollout discard ratio. Defaults to 0.
        num_filters: int. Embedding components to draw, clipped to what the
            kernel holds. Defaults to 28.
        prefix: str. File name prefix. Defaults to "".
        dpi: int. Resolution of all four pictures. Defaults to 100.

    Returns:
        dict with keys `"attention_overlay"`, `"attention_distance"`,
        `"position_embedding_similarity"`, `"embedding_filters"` mapping to PNG
        paths (the similarity entry is missing for models without a position
        embedding).
    """
    images = _check_images(model, images)
    rollout = attention_rollout(model, images, head_fusion=head_fusion, discard_ratio=discard_ratio)
    shown = list(images) if display_images is None else list(display_images)
    paths = {}
    name = lambda key: os.path.join(os.fspath(out_dir), f"{prefix}{key}.png")  # noqa: E731
    paths["attention_overlay"] = plot_attention_overlay(
        shown, list(rollout.grid), name("attention_overlay"), titles=titles, dpi=dpi
    )
    distances = mean_attention_distance(
        model, images if distance_images is None else distance_images
    )
    paths["attention_distance"] = plot_attention_distance(
        distances, name("attention_distance"), dpi=dpi
    )
    if find_patch_encoder(model).position_embedding is not None:
        paths["position_embedding_similarity"] = plot_position_embedding_similarity(
            position_embedding_similarity(model), name("position_embedding_similarity"), dpi=dpi
        )
    kernel_shape = tuple(find_patch_encoder(model).kernel.shape)
    n = min(num_filters, kernel_shape[-1], int(np.prod(kernel_shape[:-1])))
    paths["embedding_filters"] = plot_embedding_filters(
        embedding_filters(model, n), name("embedding_filters"), dpi=dpi
    )
    return paths
