"""NumPy references and tiny models shared by the keras_vit.inspection tests."""

import numpy as np

from keras_vit import inspection as vi
from keras_vit.models.vit import ViT
from tests.helpers import (
    block_params,
    np_block,
    np_patches,
    np_softmax,
    to_numpy,
)

# --- NumPy references ---------------------------------------------------------------------------


def np_reference_attention(model, images):
    """Attention weights of a plain ViT computed in NumPy from its weights: (B, L, H, T, T)."""
    encoder = model.get_layer("patch_encoder")
    kernel = to_numpy(encoder.kernel)
    ph, pw, c, d = kernel.shape
    x = np_patches(images, (ph, pw)) @ kernel.reshape(-1, d) + to_numpy(encoder.bias)
    if encoder.class_token:
        cls = np.broadcast_to(to_numpy(encoder.class_embedding), (x.shape[0], 1, d))
        x = np.concatenate([cls, x], axis=1)
    x = x + to_numpy(encoder.position_embeddings)
    weights = []
    for i in range(len(vi.find_transformer_blocks(model))):
        x, w = np_block(x, block_params(model.get_layer(f"encoderblock_{i}")))
        weights.append(w)
    return np.stack(weights, axis=1)


def np_rollout(attention, head_fusion, discard_ratio, has_class_token=True):
    """Rollout written as plain loops, one image and one layer at a time."""
    batch, layers, _, tokens, _ = attention.shape
    out = []
    for b in range(batch):
        result = np.eye(tokens)
        for layer in range(layers):
            heads = attention[b, layer]
            a = {"mean": heads.mean(0), "max": heads.max(0), "min": heads.min(0)}[head_fusion]
            a = a.copy()
            k = int(tokens * tokens * discard_ratio)
            if k:
                flat = a.reshape(-1)
                lowest = np.argpartition(flat, k - 1)[:k]
                if has_class_token:
                    lowest = lowest[lowest != 0]
                flat[lowest] = 0
                a = flat.reshape(tokens, tokens)
            a = a + np.eye(tokens)
            for row in range(tokens):
                a[row] /= a[row].sum()
            result = a @ result
        out.append(result)
    return np.stack(out)


def np_distance(attention, grid, cell, prefix):
    gh, gw = grid
    centres = [((i + 0.5) * cell[0], (j + 0.5) * cell[1]) for i in range(gh) for j in range(gw)]
    batch, layers, heads = attention.shape[:3]
    out = np.zeros((layers, heads))
    for layer in range(layers):
        for h in range(heads):
            values = []
            for b in range(batch):
                for q in range(gh * gw):
                    w = attention[b, layer, h, prefix + q, prefix:]
                    d = [np.hypot(centres[q][0] - y, centres[q][1] - x) for y, x in centres]
                    values.append(np.dot(w, d) / w.sum())
            out[layer, h] = np.mean(values)
    return out


def random_attention(shape, seed=0):
    rng = np.random.default_rng(seed)
    return np_softmax(rng.normal(0, 2, shape)).astype("float32")


def tiny_vit(**kwargs):
    kwargs.setdefault("image_size", 32)
    kwargs.setdefault("num_classes", 10)
    return ViT("mu/8", **kwargs)


def random_images(shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype("float32")


def uniformise_attention(model):
    """Zeroes query and key projections so every attention logit is 0 (uniform attention)."""
    for block in vi.find_transformer_blocks(model):
        for dense in (block.attention.query_dense, block.attention.key_dense):
            dense.kernel.assign(np.zeros(tuple(dense.kernel.shape), "float32"))
            dense.bias.assign(np.zeros(tuple(dense.bias.shape), "float32"))


def png_size(path):
    from PIL import Image

    with Image.open(path) as image:
        assert image.format == "PNG"
        return image.size


# --- attention maps and rollout ----------------------------------------------------------------
