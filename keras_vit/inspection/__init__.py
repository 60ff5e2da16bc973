"""Inspecting a Vision Transformer: attention maps, attention rollout, mean attention
distance, position-embedding similarity and patch-embedding filters (the paper's
Sec. 4.5, Fig. 6 and Fig. 7), as NumPy arrays and as PNG pictures.

Everything is computed from the model's own layers: the attention weights come
from each `TransformerBlock`'s own attention layer
(`return_attention_scores=True`), so there is no second attention
implementation to drift from the model. The code is backend-neutral (`keras`,
`keras.ops`, NumPy); matplotlib is imported only by the plotting functions,
which draw on an Agg canvas without touching pyplot's global state.

The model is a `keras_vit` model: its parts come from its roles (`model.patch_encoder`,
`model.blocks`), never from layer names; another functional `keras.Model` holding one
`PatchEncoder` and its `TransformerBlock` layers (each called once) works too. Hybrid models
work: their patch encoder reads a CNN feature map, so one grid cell covers
`image_size / grid_size` input pixels rather than `patch_size`; all pixel distances and
up-sampling here use `image_size / grid_size`, which equals the patch size for plain ViTs.

The attention weights are computed explicitly (not by a fused kernel), so inspection
works whatever `keras.config.enable_flash_attention()` says.

Reference:
    Dosovitskiy et al., 2021, Sec. 4.5 and Appendix D.7-D.8;
    Abnar & Zuidema, 2020, "Quantifying Attention Flow in Transformers".

Modules: the metrics (NumPy / `keras.ops`) `structure` (the parts and token geometry),
`attention` (maps, rollout), `distance` (mean attention distance) and `embeddings` (position
similarity, embedding filters); the pictures (matplotlib) `plots`, and `figures` (all four at once).
"""

from keras_vit.inspection.attention import (
    HEAD_FUSIONS,
    AttentionRollout,
    attention_maps,
    attention_rollout,
    compute_rollout,
    fuse_heads,
    resize_bilinear,
    rollout_to_grid,
)
from keras_vit.inspection.distance import (
    compute_attention_distance,
    mean_attention_distance,
    patch_centres,
    patch_distances,
)
from keras_vit.inspection.embeddings import (
    embedding_filters,
    patch_position_embeddings,
    position_embedding_similarity,
)
from keras_vit.inspection.figures import FIGURE_NAMES, save_inspection_figures
from keras_vit.inspection.plots import (
    plot_attention_distance,
    plot_attention_overlay,
    plot_embedding_filters,
    plot_position_embedding_similarity,
)
from keras_vit.inspection.structure import (
    ModelGeometry,
    find_patch_encoder,
    find_transformer_blocks,
    model_geometry,
    model_input_shape,
)

__all__ = [
    "FIGURE_NAMES",
    "HEAD_FUSIONS",
    "AttentionRollout",
    "ModelGeometry",
    "attention_maps",
    "attention_rollout",
    "compute_attention_distance",
    "compute_rollout",
    "embedding_filters",
    "find_patch_encoder",
    "find_transformer_blocks",
    "fuse_heads",
    "mean_attention_distance",
    "model_geometry",
    "model_input_shape",
    "patch_centres",
    "patch_distances",
    "patch_position_embeddings",
    "plot_attention_distance",
    "plot_attention_overlay",
    "plot_embedding_filters",
    "plot_position_embedding_similarity",
    "position_embedding_similarity",
    "resize_bilinear",
    "rollout_to_grid",
    "save_inspection_figures",
]
