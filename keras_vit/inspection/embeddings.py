"""Position-embedding similarity and the principal components of the patch embedding (the
paper's Fig. 7 left and centre)."""

import keras
import numpy as np

from keras_vit.inspection.structure import find_patch_encoder
from keras_vit.layers import position_embedding as pe


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

