"""`Gemma4Config`: the numbers of a Gemma 4 vision tower (timm's `Gemma4VitEncoder` /
`Gemma4VitClassifier` arguments in keras_vit's vocabulary), checked once, serialisable."""

import dataclasses

__all__ = ["POOLINGS", "Gemma4Config"]

POOLINGS = ("soft", "avg", None)


def _positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer. Received: {name}={value!r}")


def _bool(name, value):
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be a bool. Received: {name}={value!r}")


def _positive_number(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"{name} must be a positive number. Received: {name}={value!r}")


@dataclasses.dataclass(frozen=True)
class Gemma4Config:
    """A Gemma 4 vision tower.

    Attributes:
        image_size: int or `(height, width)`. Multiples of `patch_size` (and, with
            `pooling="soft"`, of `patch_size * pooling_kernel_size`). Defaults to 768.
        patch_size: int. Defaults to 16.
        num_channels: int. Defaults to 3.
        hidden_dim: int. Defaults to 768.
        num_layers: int. Defaults to 16.
        num_heads: int. Defaults to 12.
        head_dim: int, a multiple of 4. Defaults to 64.
        num_key_value_heads: int or None (`num_heads`). Defaults to None.
        mlp_dim: int. The gated MLP's hidden width. Defaults to 3072.
        layer_norm_epsilon: float. Every RMSNorm's epsilon. Defaults to 1e-6.
        rope_theta: float. The rotary embedding's base. Defaults to 100.0.
        position_table_size: int. Rows of the position table per axis. Defaults to 10240.
        pooling_kernel_size: int. The soft pooler's cell side. Defaults to 3.
        pooling: `"soft"` (the VLM's `k x k` cell means times `sqrt(D)`), `"avg"` (mean of
            the tokens) or None (the tokens). Defaults to `"soft"`.
        standardize: bool. `(x - bias) * scale` after the soft pooler (26B/31B tower).
            Defaults to False.
        clip: bool. Clamped projections (E2B/E4B tower). Defaults to False.
        final_norm: bool. An RMSNorm without scale after the pooling (timm's classifier).
            Defaults to False.
        num_classes: int. A linear head's classes; 0: none. Defaults to 0.
        dropout_rate, attention_dropout_rate, drop_path_rate: floats in [0, 1). Defaults to 0.
        name: str. The Keras model's name. Defaults to `"gemma4_vit"`.
    """

    image_size: object = 768
    patch_size: int = 16
    num_channels: int = 3
    hidden_dim: int = 768
    num_layers: int = 16
    num_heads: int = 12
    head_dim: int = 64
    num_key_value_heads: object = None
    mlp_dim: int = 3072
    layer_norm_epsilon: float = 1e-6
    rope_theta: float = 100.0
    position_table_size: int = 10240
    pooling_kernel_size: int = 3
    pooling: object = "soft"
    standardize: bool = False
    clip: bool = False
    final_norm: bool = False
    num_classes: int = 0
    dropout_rate: float = 0.0
    drop_path_rate: float = 0.0
    name: str = "gemma4_vit"

    def __post_init__(self):
        size = self.image_size
        if isinstance(size, (list, tuple)):
            object.__setattr__(self, "image_size", tuple(size))
        pair = self.image_size if isinstance(self.image_size, tuple) else (size, size)
        if len(pair) != 2:
            raise ValueError(f"image_size must be an int or a pair. Received: image_size={size!r}")
        for value in pair:
            _positive_int("image_size", value)
        for name in (
            "patch_size",
            "num_channels",
            "hidden_dim",
            "num_layers",
            "num_heads",
            "head_dim",
            "mlp_dim",
            "position_table_size",
            "pooling_kernel_size",
        ):
            _positive_int(name, getattr(self, name))
        if self.num_key_value_heads is not None:
            _positive_int("num_key_value_heads", self.num_key_value_heads)
            if self.num_heads % self.num_key_value_heads:
                raise ValueError(
                    "num_key_value_heads must divide num_heads. Received: num_heads="
                    f"{self.num_heads}, num_key_value_heads={self.num_key_value_heads}"
                )
        if self.head_dim % 4:
            raise ValueError(
                "head_dim must be a multiple of 4 (two rotary parts of pairs). Received: "
                f"head_dim={self.head_dim}"
            )
        for name in ("layer_norm_epsilon", "rope_theta"):
            _positive_number(name, getattr(self, name))
        if self.pooling not in POOLINGS:
            raise ValueError(
                f"pooling must be one of {POOLINGS}. Received: pooling={self.pooling!r}"
            )
        for name in ("standardize", "clip", "final_norm"):
            _bool(name, getattr(self, name))
        if self.standardize and self.pooling != "soft":
            raise ValueError(
                "standardize applies after the soft pooler: it needs pooling='soft'. Received: "
                f"pooling={self.pooling!r}"
            )
        if (
            isinstance(self.num_classes, bool)
            or not isinstance(self.num_classes, int)
            or (self.num_classes < 0)
        ):
            raise ValueError(
                "num_classes must be a non-negative int. Received: "
                f"num_classes={self.num_classes!r}"
            )
        for name in ("dropout_rate", "drop_path_rate"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
                raise ValueError(f"{name} must be a number in [0, 1). Received: {name}={value!r}")
        step = self.patch_size * (self.pooling_kernel_size if self.pooling == "soft" else 1)
        if pair[0] % step or pair[1] % step:
            what = (
                "patch_size * pooling_kernel_size (pooling='soft')"
                if step != self.patch_size
                else "patch_size"
            )
            raise ValueError(
                f"image_size must be a multiple of {what} = {step}. Received: image_size={size!r}"
            )

    @property
    def image_shape(self):
        """`(height, width)`."""
        size = self.image_size
        return size if isinstance(size, tuple) else (size, size)

    def to_dict(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values):
        """The config of `values`; an unknown key is a ValueError naming the known ones."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"Unknown Gemma4Config argument(s) {unknown}. Expected some of {sorted(known)}."
            )
        return cls(**values)
