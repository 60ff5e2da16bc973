"""`Gemma4VisionTower`: Gemma 4's vision encoder as a Keras model, built from generic layers.

Images `(B, H, W, C)` in [0, 1] -> `2x - 1` -> `TablePatchEmbedding` (channels-first patches,
a `(2, table, D)` position table) -> `SandwichNormBlock`s with the split 2-D rotary table
(columns, then rows) -> the pooling: `GridCellPooling` (times `sqrt(D)`) and optionally
`FeatureStandardization` (`"soft"`), the token mean (`"avg"`) or none -> optionally an RMSNorm
without scale and a linear head. timm's `Gemma4VitEncoder` / `Gemma4VitClassifier` on dense
image grids.
"""

import keras
from keras import ops

from keras_vit.families.gemma4.config import Gemma4Config
from keras_vit.layers.cell_pooling import GridCellPooling
from keras_vit.layers.rms_norm import RMSNorm
from keras_vit.layers.sandwich_block import SandwichNormBlock
from keras_vit.layers.split_rotary import split_rotary_table
from keras_vit.layers.standardization import FeatureStandardization
from keras_vit.layers.table_patch_embedding import TablePatchEmbedding, grid_coordinates

__all__ = ["Gemma4VisionTower"]


@keras.saving.register_keras_serializable(package="keras_vit")
class Gemma4VisionTower(keras.Model):
    """Gemma 4's vision tower.

    Args:
        config: a `Gemma4Config` or its dict (`Gemma4Config.to_dict`).

    Call arguments:
        images: `(B, H, W, C)` in [0, 1] (timm's pretrained config: mean 0, std 1), H and W
            multiples of the patch (and of the soft pooler's cell).
        training: bool.

    Returns:
        `(B, cells, D)` (`"soft"`), `(B, D)` (`"avg"`), `(B, N, D)` (None), or
        `(B, num_classes)` with a head.

    Example:

    >>> import numpy as np
    >>> config = Gemma4Config(image_size=16, patch_size=4, hidden_dim=16, num_layers=1,
    ...                       num_heads=2, head_dim=8, mlp_dim=32, position_table_size=8,
    ...                       pooling_kernel_size=2)
    >>> tuple(Gemma4VisionTower(config)(np.zeros((1, 16, 16, 3), "float32")).shape)
    (1, 4, 16)
    """

    def __init__(self, config, **kwargs):
        if isinstance(config, dict):
            config = Gemma4Config.from_dict(config)
        if not isinstance(config, Gemma4Config):
            raise ValueError(f"Expected a Gemma4Config or its dict. Received: config={config!r}")
        kwargs.setdefault("name", config.name)
        super().__init__(**kwargs)
        self.config = config
        c = config
        self.rescale = keras.layers.Rescaling(2.0, offset=-1.0, name="rescale")
        self.patch_embedding = TablePatchEmbedding(
            c.hidden_dim, c.patch_size, c.position_table_size, name="patch_embedding"
        )
        rates = [c.drop_path_rate * i / max(c.num_layers - 1, 1) for i in range(c.num_layers)]
        self.blocks = [
            SandwichNormBlock(
                c.num_heads,
                c.head_dim,
                c.mlp_dim,
                num_key_value_heads=c.num_key_value_heads,
                epsilon=c.layer_norm_epsilon,
                clip=c.clip,
                dropout_rate=c.dropout_rate,
                drop_path_rate=rates[i],
                name=f"block_{i}",
            )
            for i in range(c.num_layers)
        ]
        self.pooler = GridCellPooling(c.pooling_kernel_size, name="pooler")
        self.standardization = FeatureStandardization(name="standardization")
        self.final_norm = RMSNorm(c.layer_norm_epsilon, scale=False, name="final_norm")
        self.head = keras.layers.Dense(max(c.num_classes, 1), name="head")

    def build(self, input_shape=None):
        c = self.config
        shape = (None, *c.image_shape, c.num_channels) if input_shape is None else input_shape
        self.patch_embedding.build(shape)
        tokens = self.patch_embedding.compute_output_shape(shape)
        for block in self.blocks:
            block.build(tokens)
        if c.standardize:
            self.standardization.build((None, None, c.hidden_dim))
        if c.final_norm:
            self.final_norm.build((None, c.hidden_dim))
        if c.num_classes:
            self.head.build((None, c.hidden_dim))
        self.built = True

    def call(self, images, training=None):
        c = self.config
        (ph, pw), (height, width) = self.patch_embedding.patch_size, images.shape[1:3]
        grid = (height // ph, width // pw)
        x = self.patch_embedding(self.rescale(images))
        rows, cols = grid_coordinates(*grid)
        cos, sin = split_rotary_table([cols, rows], c.head_dim, c.rope_theta)  # x, then y
        for block in self.blocks:
            x = block(x, rotary_cos=cos, rotary_sin=sin, training=training)
        if c.pooling == "soft":
            x = self.pooler(x, grid_size=grid)
            if c.standardize:
                x = self.standardization(x)
        elif c.pooling == "avg":
            x = ops.mean(x, axis=1)
        if c.final_norm:
            x = self.final_norm(x)
        return self.head(x) if c.num_classes else x

    def get_config(self):
        return {"config": self.config.to_dict(), "name": self.name}

    @classmethod
    def from_config(cls, config):
        return cls(**config)
