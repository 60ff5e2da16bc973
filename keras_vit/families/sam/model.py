"""`SAMImageEncoder`: SAM's image encoder (timm's `VisionTransformerSAM`) as a Keras model.

Images `(B, H, W, C)` -> a patch convolution to a `(B, h, w, D)` grid -> a learned grid
position embedding (`GridPositionEmbedding`) -> `WindowedAttentionBlock`s (windowed attention,
global in the blocks of `global_attention_indexes`, decomposed relative positions) -> the neck
(1 x 1 conv, LayerNorm, 3 x 3 conv, LayerNorm; or a LayerNorm alone) -> the pooling (the map's
mean) -> optionally a linear head. A functional `keras.Model` subclass: its graph is fixed by
its `SAMConfig`, it round-trips through `.keras` files, and it exports like any image model
(ONNX, SavedModel with a head).
"""

import keras

from keras_vit.families.sam.config import SAMConfig
from keras_vit.layers.grid_position_embedding import GridPositionEmbedding
from keras_vit.layers.windowed_block import WindowedAttentionBlock

__all__ = ["SAMImageEncoder"]

# The layer names (the checkpoint table maps them).
PATCH_EMBEDDING, POSITION_EMBEDDING, BLOCK = "patch_embedding", "position_embedding", "block_{}"
NECK_LAYERS = ("neck_conv_1", "neck_norm_1", "neck_conv_2", "neck_norm_2")
NECK_NORM, POOLING, HEAD = "neck_norm", "pooling", "head"


def build_graph(config):
    """`(inputs, neck map, output)` of the encoder `config` describes."""
    c = config
    inputs = keras.Input((*c.image_shape, c.num_channels), name="images")
    x = keras.layers.Conv2D(
        c.hidden_dim, c.patch_size, strides=c.patch_size, name=PATCH_EMBEDDING
    )(inputs)
    if c.absolute_position:
        x = GridPositionEmbedding(c.grid_size, name=POSITION_EMBEDDING)(x)
    for i in range(c.num_layers):
        window = c.block_window(i)
        x = WindowedAttentionBlock(
            c.num_heads,
            c.mlp_dim,
            window_size=window,
            relative_position_size=(window or c.grid_size) if c.relative_position else None,
            qkv_bias=c.qkv_bias,
            layer_norm_epsilon=c.layer_norm_epsilon,
            dropout_rate=c.dropout_rate,
            attention_dropout_rate=c.attention_dropout_rate,
            drop_path_rate=c.drop_path_rate * i / max(c.num_layers - 1, 1),
            name=BLOCK.format(i),
        )(x)
    if c.neck_dim:
        conv_1, norm_1, conv_2, norm_2 = NECK_LAYERS
        x = keras.layers.Conv2D(c.neck_dim, 1, use_bias=False, name=conv_1)(x)
        x = keras.layers.LayerNormalization(epsilon=c.neck_epsilon, name=norm_1)(x)
        x = keras.layers.Conv2D(c.neck_dim, 3, padding="same", use_bias=False, name=conv_2)(x)
        x = keras.layers.LayerNormalization(epsilon=c.neck_epsilon, name=norm_2)(x)
    else:
        x = keras.layers.LayerNormalization(epsilon=c.neck_epsilon, name=NECK_NORM)(x)
    neck = x
    if c.pooling == "avg":
        x = keras.layers.GlobalAveragePooling2D(name=POOLING)(x)
        if c.num_classes:
            x = keras.layers.Dense(c.num_classes, name=HEAD)(x)
    return inputs, neck, x


@keras.saving.register_keras_serializable(package="keras_vit")
class SAMImageEncoder(keras.Model):
    """SAM's image encoder (and timm's classifier on it).

    Args:
        config: a `SAMConfig` or its dict (`SAMConfig.to_dict`).
        **kwargs: `name` (defaults to `config.name`) and `trainable`.

    Call arguments:
        images: `(B, H, W, C)` of the config's image size, normalised as
            `model.preprocessing` says (timm's: ImageNet's mean and std).

    Returns:
        `(B, C)` (the neck's mean, `pooling="avg"`), `(B, num_classes)` with a head, or the
        neck's `(B, h, w, C)` map (`pooling=None`).

    Attributes (roles):
        config; patch_embedding (the Conv2D), position_embedding (or None), blocks, neck (its
        layers), head (or None); feature_map: a model from the images to the neck's map.

    Example:

    >>> import numpy as np
    >>> config = SAMConfig(image_size=32, patch_size=8, hidden_dim=16, num_layers=2,
    ...                    num_heads=2, mlp_dim=32, window_size=2,
    ...                    global_attention_indexes=(1,), neck_dim=8)
    >>> model = SAMImageEncoder(config)
    >>> model.output_shape, model.feature_map.output_shape
    ((None, 8), (None, 4, 4, 8))

    Reference:
        Kirillov et al., 2023, "Segment Anything", Sec. 3 and Appendix A.
    """

    def __init__(self, config, **kwargs):
        if isinstance(config, dict):
            config = SAMConfig.from_dict(config)
        if not isinstance(config, SAMConfig):
            raise ValueError(f"Expected a SAMConfig or its dict. Received: config={config!r}")
        inputs, _, outputs = build_graph(config)
        kwargs.setdefault("name", config.name)
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self._sam_config = config

    @property
    def config(self):
        """The `SAMConfig` the model was built from."""
        return self._sam_config

    @property
    def preprocessing(self):
        """The model's input spec (`config.preprocessing`)."""
        return self.config.preprocessing

    def get_config(self):
        return {"name": self.name, "trainable": self.trainable, "config": self.config.to_dict()}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(SAMConfig.from_dict(config.pop("config")), **config)

    @property
    def patch_embedding(self):
        return self.get_layer(PATCH_EMBEDDING)

    @property
    def position_embedding(self):
        return self.get_layer(POSITION_EMBEDDING) if self.config.absolute_position else None

    @property
    def blocks(self):
        return [self.get_layer(BLOCK.format(i)) for i in range(self.config.num_layers)]

    @property
    def neck(self):
        names = NECK_LAYERS if self.config.neck_dim else (NECK_NORM,)
        return [self.get_layer(name) for name in names]

    @property
    def head(self):
        return self.get_layer(HEAD) if self.config.num_classes else None

    @property
    def feature_map(self):
        """A functional model from the images to the neck's `(B, h, w, C)` map, sharing this
        model's layers (a new view on each access)."""
        return keras.Model(self.inputs[0], self.neck[-1].output, name=f"{self.name}_features")
