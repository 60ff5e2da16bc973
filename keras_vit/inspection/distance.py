"""Mean attention distance per head and layer (the paper's Fig. 7 right), in input pixels."""

import numpy as np

from keras_vit.inspection.attention import attention_maps
from keras_vit.inspection.structure import model_geometry


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

