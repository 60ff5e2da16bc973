"""`SAMConfig`: the numbers of a SAM / ViTDet image encoder (timm's `VisionTransformerSAM`
arguments in keras_vit's vocabulary), checked once, serialisable."""

import dataclasses

from keras_vit.layers._checks import (
    check_bool,
    check_non_negative_int,
    check_positive_int,
    check_positive_int_pair,
    check_rate,
)
from keras_vit.layers.attention import check_epsilon
from keras_vit.models.preprocessing_config import PreprocessingConfig

__all__ = ["POOLINGS", "SAMConfig"]

POOLINGS = ("avg", None)


@dataclasses.dataclass(frozen=True)
class SAMConfig:
    """A SAM image encoder: patch embedding, windowed and global attention blocks, a neck.

    Attributes:
        image_size: int or `(height, width)`, multiples of `patch_size`. Defaults to 1024.
        patch_size: int. Defaults to 16.
        num_channels: int. Defaults to 3.
        hidden_dim: int. Defaults to 768.
        num_layers: int. Defaults to 12.
        num_heads: int. Defaults to 12.
        mlp_dim: int. The MLP's hidden width. Defaults to 3072.
        window_size: int. The attention windows' side; 0: every block attends globally.
            Defaults to 14.
        global_attention_indexes: tuple of block indexes that attend over the whole grid
            (timm's `global_attn_indexes`). Defaults to (2, 5, 8, 11).
        relative_position: bool. Decomposed relative positions in every block's attention
            (timm's `use_rel_pos`). Defaults to True.
        absolute_position: bool. A learned `(h, w, D)` position embedding added to the patch
            grid (timm's `use_abs_pos`). Defaults to True.
        neck_dim: int or None. The neck's width (1 x 1 conv, LayerNorm, 3 x 3 conv,
            LayerNorm); None: a LayerNorm alone (timm's `neck_chans=None`). Defaults to 256.
        layer_norm_epsilon: float. The blocks' LayerNorms. Defaults to 1e-5 (torch's).
        neck_epsilon: float. The neck's LayerNorms (timm's `LayerNorm2d`). Defaults to 1e-6.
        qkv_bias: bool. Defaults to True.
        pooling: `"avg"` (the neck's map averaged: timm's `global_pool="avg"`) or None (the
            neck's `(B, h, w, C)` map). Defaults to `"avg"`.
        num_classes: int. A linear head's classes after the pooling; 0: none. Defaults to 0.
        dropout_rate, attention_dropout_rate, drop_path_rate: floats in [0, 1). Defaults to 0.
        preprocessing: the input spec (`keras_vit.models.preprocessing_config
            .PreprocessingConfig`, a dict of it, or None for the default). Defaults to None.
        name: str. The Keras model's name. Defaults to `"samvit"`.
    """

    image_size: object = 1024
    patch_size: int = 16
    num_channels: int = 3
    hidden_dim: int = 768
    num_layers: int = 12
    num_heads: int = 12
    mlp_dim: int = 3072
    window_size: int = 14
    global_attention_indexes: tuple = (2, 5, 8, 11)
    relative_position: bool = True
    absolute_position: bool = True
    neck_dim: object = 256
    layer_norm_epsilon: float = 1e-5
    neck_epsilon: float = 1e-6
    qkv_bias: bool = True
    pooling: object = "avg"
    num_classes: int = 0
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
    drop_path_rate: float = 0.0
    preprocessing: object = None
    name: str = "samvit"

    def __post_init__(self):
        def set_(name, value):
            object.__setattr__(self, name, value)

        image = check_positive_int_pair(self.image_size, "image_size")
        set_("image_size", image[0] if image[0] == image[1] else image)
        for name in ("patch_size", "num_channels", "hidden_dim", "num_layers", "num_heads",
                     "mlp_dim"):  # fmt: skip
            set_(name, check_positive_int(getattr(self, name), name))
        set_("window_size", check_non_negative_int(self.window_size, "window_size"))
        if self.neck_dim is not None:
            set_("neck_dim", check_positive_int(self.neck_dim, "neck_dim"))
        for name in ("relative_position", "absolute_position", "qkv_bias"):
            check_bool(getattr(self, name), name)
        for name in ("layer_norm_epsilon", "neck_epsilon"):
            set_(name, check_epsilon(getattr(self, name), name))
        for name in ("dropout_rate", "attention_dropout_rate", "drop_path_rate"):
            set_(name, check_rate(getattr(self, name), name))
        if self.hidden_dim % self.num_heads:
            raise ValueError(
                "num_heads must divide hidden_dim. Received: "
                f"hidden_dim={self.hidden_dim}, num_heads={self.num_heads}"
            )
        if image[0] % self.patch_size or image[1] % self.patch_size:
            raise ValueError(
                f"image_size must be a multiple of patch_size={self.patch_size}. "
                f"Received: image_size={self.image_size!r}"
            )
        indexes = self.global_attention_indexes
        if isinstance(indexes, (str, bytes)) or not isinstance(indexes, (tuple, list)):
            raise ValueError(
                "global_attention_indexes must be a sequence of block indexes. "
                f"Received: global_attention_indexes={indexes!r}"
            )
        for index in indexes:
            if isinstance(index, bool) or not isinstance(index, int) or not (
                0 <= index < self.num_layers
            ):
                raise ValueError(
                    f"global_attention_indexes must be block indexes in [0, {self.num_layers}) "
                    f"(num_layers={self.num_layers}). Received: global_attention_indexes="
                    f"{indexes!r}"
                )
        set_("global_attention_indexes", tuple(sorted(set(indexes))))
        if self.pooling not in POOLINGS:
            raise ValueError(
                f"pooling must be one of {POOLINGS}. Received: pooling={self.pooling!r}"
            )
        if isinstance(self.num_classes, bool) or not isinstance(self.num_classes, int) or (
            self.num_classes < 0
        ):
            raise ValueError(
                "num_classes must be a non-negative int. Received: "
                f"num_classes={self.num_classes!r}"
            )
        if self.num_classes and self.pooling is None:
            raise ValueError(
                "A head classifies the pooled features: num_classes needs pooling='avg'. "
                f"Received: num_classes={self.num_classes}, pooling=None"
            )
        set_("preprocessing", PreprocessingConfig.coerce(self.preprocessing))
        self.preprocessing.check_channels(self.num_channels)
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name must be a non-empty str. Received: name={self.name!r}")

    @property
    def image_shape(self):
        """`(height, width)`."""
        return check_positive_int_pair(self.image_size, "image_size")

    @property
    def grid_size(self):
        """The patch grid `(h, w)`."""
        height, width = self.image_shape
        return height // self.patch_size, width // self.patch_size

    def block_window(self, index):
        """Block `index`'s window side (0: global attention)."""
        return 0 if index in self.global_attention_indexes else self.window_size

    def to_dict(self):
        values = dataclasses.asdict(self)
        values["preprocessing"] = self.preprocessing.to_dict()
        values["global_attention_indexes"] = list(self.global_attention_indexes)
        return values

    @classmethod
    def from_dict(cls, values):
        """The config of `values`; an unknown key is a ValueError naming the known ones."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"Unknown SAMConfig argument(s) {unknown}. Expected some of {sorted(known)}."
            )
        return cls(**values)
