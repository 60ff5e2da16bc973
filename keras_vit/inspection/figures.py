"""All four inspection pictures of a model in one call: the metrics computed, then drawn."""

import os

import numpy as np

from keras_vit.inspection.attention import attention_rollout
from keras_vit.inspection.distance import mean_attention_distance
from keras_vit.inspection.embeddings import embedding_filters, position_embedding_similarity
from keras_vit.inspection.plots import (
    plot_attention_distance,
    plot_attention_overlay,
    plot_embedding_filters,
    plot_position_embedding_similarity,
)
from keras_vit.inspection.structure import check_images, find_patch_encoder

# The pictures `save_inspection_figures` writes, `{prefix}{name}.png` each.
FIGURE_NAMES = (
    "attention_overlay",
    "attention_distance",
    "position_embedding_similarity",
    "embedding_filters",
)


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
    images = check_images(model, images)
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
