"""keras_vit layers: every one registered for `.keras` serialization."""

from keras_vit.layers.activations import quick_gelu
from keras_vit.layers.attention import MultiHeadSelfAttention
from keras_vit.layers.block_base import EncoderBlock
from keras_vit.layers.block_kinds import BLOCK_KINDS
from keras_vit.layers.cell_pooling import GridCellPooling
from keras_vit.layers.clipped_dense import ClippedDense
from keras_vit.layers.conv_stem import conv_stem
from keras_vit.layers.differential_attention import DifferentialAttention
from keras_vit.layers.drop_path import DropPath
from keras_vit.layers.gated_mlp import GatedMLP
from keras_vit.layers.image_preprocessor import ImagePreprocessor
from keras_vit.layers.map_head import MAPHead
from keras_vit.layers.naflex_encoder import NaFlexPatchEncoder
from keras_vit.layers.naflex_rotary import NaFlexMixedRotaryEmbedding, NaFlexRotaryEmbedding
from keras_vit.layers.normed_attention import NormedSelfAttention
from keras_vit.layers.parallel_block import ParallelBlock
from keras_vit.layers.parallel_scaling_block import ParallelScalingBlock
from keras_vit.layers.patch_corruption import PatchCorruption
from keras_vit.layers.patch_encoder import PatchEncoder
from keras_vit.layers.patch_merger import PatchMerger
from keras_vit.layers.patch_resize import resample_patch_embedding
from keras_vit.layers.patch_targets import PatchTargets
from keras_vit.layers.patches import Patches
from keras_vit.layers.pooling import TokenPooling
from keras_vit.layers.position_embedding import (
    resample_position_embedding,
    sincos_2d_position_embedding,
)
from keras_vit.layers.post_norm_block import PostNormBlock
from keras_vit.layers.relative_position import (
    RelativePositionBias,
    RelativePositionMLP,
    relative_position_index,
    resize_relative_position_table,
)
from keras_vit.layers.resnet import residual_unit, resnet_stem
from keras_vit.layers.resnet_d import resnet_d_stem, resnet_d_unit
from keras_vit.layers.rms_norm import RMSNorm
from keras_vit.layers.rotary import (
    RotaryEmbedding2D,
    apply_rotary_embedding,
    dinov3_rotary_embedding_2d,
    rotary_embedding_2d,
)
from keras_vit.layers.rotary_mixed import MixedRotaryEmbedding, mixed_rotary_embedding
from keras_vit.layers.sandwich_block import SandwichNormBlock
from keras_vit.layers.split_rotary import apply_split_rotary, split_rotary_table
from keras_vit.layers.standardization import FeatureStandardization
from keras_vit.layers.std_conv import StdConv2D
from keras_vit.layers.swiglu import SwiGLU
from keras_vit.layers.table_patch_embedding import TablePatchEmbedding
from keras_vit.layers.token_dropping import TokenDropping
from keras_vit.layers.token_grid import TokenGrid
from keras_vit.layers.transformer_block import TransformerBlock

__all__ = [
    "BLOCK_KINDS",
    "ClippedDense",
    "DifferentialAttention",
    "DropPath",
    "EncoderBlock",
    "FeatureStandardization",
    "GatedMLP",
    "GridCellPooling",
    "ImagePreprocessor",
    "MAPHead",
    "MixedRotaryEmbedding",
    "MultiHeadSelfAttention",
    "NaFlexMixedRotaryEmbedding",
    "NaFlexPatchEncoder",
    "NaFlexRotaryEmbedding",
    "NormedSelfAttention",
    "ParallelBlock",
    "ParallelScalingBlock",
    "PatchCorruption",
    "PatchEncoder",
    "PatchMerger",
    "PatchTargets",
    "Patches",
    "PostNormBlock",
    "RMSNorm",
    "RelativePositionBias",
    "RelativePositionMLP",
    "RotaryEmbedding2D",
    "SandwichNormBlock",
    "StdConv2D",
    "SwiGLU",
    "TablePatchEmbedding",
    "TokenDropping",
    "TokenGrid",
    "TokenPooling",
    "TransformerBlock",
    "apply_rotary_embedding",
    "apply_split_rotary",
    "conv_stem",
    "dinov3_rotary_embedding_2d",
    "mixed_rotary_embedding",
    "quick_gelu",
    "relative_position_index",
    "resample_patch_embedding",
    "resample_position_embedding",
    "residual_unit",
    "resize_relative_position_table",
    "resnet_d_stem",
    "resnet_d_unit",
    "resnet_stem",
    "rotary_embedding_2d",
    "sincos_2d_position_embedding",
    "split_rotary_table",
]
