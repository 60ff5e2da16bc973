"""`ViTConfig`: every argument of the ViT builders, declared and validated once.

`keras_vit.ViT`, the named builders, masked-patch prediction (`keras_vit.models.mpp`) and the
recipes all describe a model with one frozen dataclass. Its fields are grouped
(`ViTConfig.field_names("size")`, ...), so code that needs "the encoder arguments" or "the hybrid
arguments" reads one list instead of writing its own:

- `"size"`: the variant table's numbers (`patch_size`, `num_layers`, `hidden_dim`, `mlp_dim`,
  `num_heads`);
- `"input"`: what the model takes (`image_size`, `num_channels`, `dynamic_image_size`, `naflex`,
  and `preprocessing`, the input spec: not architecture, but carried through every rebuild and
  saved with the model);
- `"head"`: pooling and classifier (`num_classes`, `include_top`, `pooling`, the MAP head, the
  VLM projector, `class_names`, ...);
- `"encoder"`: everything between the patches and the pooling (tokens, position schemes,
  dropouts, norms, attention and MLP kinds, block kinds);
- `"hybrid"`: the CNN stem (`resnet_*`, `backbone`, `stem`, `stem_widths`, `stem_strides`);
- `"name"`: the Keras model name.

Each field is declared once below (its default and group); what it means is written once, in
`keras_vit.models.config_docs` (both `ViTConfig`'s and `keras_vit.ViT`'s docstrings show it);
its checks are in `config_checks` / `config_stem_checks`; `to_dict` / `from_dict` serialise
every field alike.
"""

import dataclasses
import functools
import math
import warnings

import keras

from keras_vit.models import config_checks as checks
from keras_vit.models import config_stem_checks as stem_checks
from keras_vit.models import merger, variants
from keras_vit.models.arguments import nearest_keys, unknown_keys_message
from keras_vit.models.block_kind_arguments import block_kind_arguments, legacy_names
from keras_vit.models.config_checks import (  # noqa: F401  (the option tables, here too)
    MLPS,
    NAFLEX_RESIZE,
    POOLINGS,
    RATES,
    RELATIVE_POSITION_BIASES,
    ROTARY_EMBEDDINGS,
)
from keras_vit.models.config_docs import args_section
from keras_vit.models.preprocessing_config import PreprocessingConfig

GROUPS = ("size", "input", "head", "encoder", "hybrid", "name")
# Earlier versions' block arguments: accepted wherever the fields are (with a
# DeprecationWarning; silently in saved configs) and mapped onto `block_kind`, never stored.
LEGACY_ARGUMENTS = ("block_type", "block_norm")
# Overrides where None means "the variant table's value" (or the builder default) in
# `ViTConfig.from_variant`; for every other field None is a value of its own.
_NONE_KEEPS_DEFAULT = ("patch_size", "num_layers", "hidden_dim", "mlp_dim", "num_heads")
_NONE_KEEPS_DEFAULT += ("image_size", "num_classes", "resnet_units", "name")
# None: the block kind the other arguments imply ("parallel" for num_parallel > 1, as in
# earlier versions; else "pre"), and 2 branches for block_kind="parallel" (else 1).
_NONE_KEEPS_DEFAULT += ("block_kind", "num_parallel")


def _field(group, default=dataclasses.MISSING):
    return dataclasses.field(default=default, metadata={"group": group})


@dataclasses.dataclass(frozen=True, kw_only=True)
class ViTConfig:
    """The architecture of a (plain or hybrid) Vision Transformer, validated on creation.

    Frozen: derive a changed copy with `dataclasses.replace(config, num_layers=6)` (validated
    again). `image_size` and `patch_size` are stored as `(height, width)` pairs,
    `resnet_units` as a tuple, and `class_token=None` becomes `pooling in ("token", None)`.
    Every field means what the argument of the same name of `keras_vit.ViT` means; build a
    model with `keras_vit.models.encoder.build_model(config)` (or
    `keras_vit.models.VisionTransformer(config)`), and read it back with `model.config`.

    Args:
        (the entries of `keras_vit.models.config_docs.OPTIONS`)

    Example:

    >>> config = ViTConfig.from_variant("mu/8", image_size=32, num_layers=1)
    >>> config.num_layers, config.hidden_dim, config.patch_size, config.image_size
    (1, 32, (8, 8), (32, 32))
    >>> config.grid_size
    (4, 4)
    """

    patch_size: object = _field("size")
    num_layers: int = _field("size")
    hidden_dim: int = _field("size")
    mlp_dim: int = _field("size")
    num_heads: int = _field("size")
    image_size: object = _field("input", 224)
    num_channels: int = _field("input", 3)
    dynamic_image_size: bool = _field("input", False)
    num_classes: int = _field("head", 1000)
    include_top: bool = _field("head", True)
    pooling: object = _field("head", "token")
    representation_size: object = _field("head", None)
    classifier_activation: object = _field("head", None)
    fc_norm: bool = _field("head", False)
    class_token: object = _field("encoder", None)
    position_embedding: object = _field("encoder", "learned")
    dropout_rate: float = _field("encoder", 0.0)
    attention_dropout_rate: float = _field("encoder", 0.0)
    drop_path_rate: float = _field("encoder", 0.0)
    # Patch dropout: a random fraction of the patch tokens dropped in training only.
    patch_dropout_rate: float = _field("encoder", 0.0)
    approximate_gelu: bool = _field("encoder", True)
    layer_norm_epsilon: float = _field("encoder", 1e-6)
    layer_scale_init_value: object = _field("encoder", None)
    remat: bool = _field("encoder", False)
    num_register_tokens: int = _field("encoder", 0)
    distillation_token: bool = _field("encoder", False)
    prefix_position_embedding: bool = _field("encoder", True)
    pre_norm: bool = _field("encoder", False)
    qk_norm: bool = _field("encoder", False)
    activation: str = _field("encoder", "gelu")
    # q/v-only attention biases (BEiT, EVA: timm's q_bias / v_bias, no key bias).
    key_bias: bool = _field("encoder", True)
    # BEiT's relative position bias (a learned table per block, or one shared by all blocks).
    relative_position_bias: object = _field("encoder", None)
    relative_position_mlp_dim: object = _field("encoder", None)
    # The block kind, by value: a key of keras_vit.layers.BLOCK_KINDS ("pre", "post",
    # "parallel", "parallel_scaling"); num_parallel is the "parallel" kind's branch count
    # (timm's ParallelThingsBlock, the *_18x2_* models). Earlier versions' block_type /
    # block_norm arguments map onto block_kind (`_legacy_init` below).
    block_kind: str = _field("encoder", "pre")
    num_parallel: int = _field("encoder", 1)
    # EVA, EVA-02 and timm's rotary ViTs: SwiGLU MLPs, q/v-only biases,
    # EVA-CLIP's attention inner norm, 2-D rotary position embeddings.
    mlp: str = _field("encoder", "mlp")
    mlp_inner_norm: bool = _field("encoder", False)
    attention_inner_norm: bool = _field("encoder", False)
    rotary_embedding: object = _field("encoder", None)
    rotary_temperature: float = _field("encoder", 10000.0)
    rotary_reference_grid: object = _field("encoder", None)
    rotary_grid_offset: float = _field("encoder", 0.0)
    # DINOv3: rotary_embedding="dinov3"'s coordinate normalisation.
    rotary_normalize_coords: str = _field("encoder", "separate")
    # Differential attention (timm's DiffAttention / DiffParallelScalingBlock): vit_dwee_*,
    # vit_dlittle_*, vit_dpwee_*.
    attention_type: str = _field("encoder", "standard")
    # Grouped-query attention (one count, or one per block) and LayerScale on the attention
    # branch only (Sapiens2).
    num_key_value_heads: object = _field("encoder", None)
    attention_only_layer_scale: bool = _field("encoder", False)
    # RMSNorm and the patch-embedding norm (AIMv2, Perception Encoder): the kind of
    # every norm of the model, and a norm right after the patch projection.
    norm: str = _field("encoder", "layernorm")
    patch_norm: bool = _field("encoder", False)
    # Perception Encoder's lang / spatial towers: no norm after the blocks (nor after pooling).
    final_norm: bool = _field("encoder", True)
    # Perception Encoder core's attention-pool head: its own heads and MLP width, prefix tokens
    # (the class token) pooled too.
    map_num_heads: object = _field("head", None)
    map_mlp_dim: object = _field("head", None)
    map_prefix_tokens: bool = _field("head", False)
    # VLM vision towers (Qwen3-VL, DeepSeek-V4): the projector, both final norms.
    merger_size: object = _field("head", None)
    merger_dim: object = _field("head", None)
    merger_hidden_dim: object = _field("head", None)
    merger_norm: bool = _field("head", False)
    merger_padding: bool = _field("head", False)
    final_and_fc_norm: bool = _field("head", False)
    resnet_units: object = _field("hybrid", None)
    resnet_width: object = _field("hybrid", None)
    resnet_groups: object = _field("hybrid", None)
    resnet_conv_epsilon: object = _field("hybrid", None)
    resnet_conv_epsilon_mode: object = _field("hybrid", None)
    resnet_norm_epsilon: object = _field("hybrid", None)
    backbone: object = _field("hybrid", None)
    # ResNet-D and MobileCLIP conv stems: the kind of CNN stem, and the
    # conv stem's widths and strides.
    stem: object = _field("hybrid", None)
    stem_widths: object = _field("hybrid", None)
    stem_strides: object = _field("hybrid", None)
    # NaFlex: dict inputs, per-image position embeddings, masks.
    naflex: bool = _field("input", False)
    position_embedding_interpolation: str = _field("encoder", "bicubic")
    position_embedding_antialias: bool = _field("encoder", True)
    position_embedding_align_corners: bool = _field("encoder", False)
    position_embedding_aspect_preserving: bool = _field("encoder", False)
    # Issue 42: the input spec and the class names travel with the model (not architecture:
    # no layer reads them).
    preprocessing: object = _field("input", None)
    class_names: object = _field("head", None)
    name: object = _field("name", None)

    def __post_init__(self):
        normalize = functools.partial(object.__setattr__, self)
        normalize("preprocessing", PreprocessingConfig.coerce(self.preprocessing))
        checks.check_block_kind(self)
        checks.check_core(self, normalize)
        checks.check_relative_position_bias(self, normalize)
        checks.check_families(self, normalize)
        checks.check_post_norm(self)
        checks.check_attention_type(self)
        checks.check_grouped_query(self, normalize)
        checks.check_norms(self)
        checks.check_map_head(self)
        merger.check_merger(self)
        checks.check_naflex(self, normalize)
        checks.check_distillation(self)
        stem_checks.check_stem(self, normalize)
        self.preprocessing.check_channels(self.num_channels)
        checks.check_class_names(self, normalize)
        checks.check_patch_dropout(self)

    @property
    def is_hybrid(self):
        """True when a CNN stem (ResNet, conv stem or `backbone`) feeds the patch encoder."""
        return self.resnet_units is not None or self.backbone is not None or self.stem == "conv"

    @property
    def stem_stride(self):
        """The stem's total stride (1: no stem); None for a `backbone` (known once it runs)."""
        if self.backbone is not None:
            return None
        if self.stem == "conv":
            return math.prod(self.stem_strides)
        return 1 if self.resnet_units is None else variants.resnet_stride(self.resnet_units)

    @property
    def grid_size(self):
        """Token grid `(rows, columns)`; None for a `backbone`, whose grid shows once it runs."""
        if self.backbone is not None:
            return None
        stride = self.stem_stride
        (height, width), (ph, pw) = self.image_size, self.patch_size
        return (height // (stride * ph), width // (stride * pw))

    @property
    def block_norm(self):
        """Earlier versions' name, read-only: `"post"` for `block_kind="post"`, else `"pre"`.

        Deprecated: read `block_kind`."""
        return _deprecated_read(self, "block_norm")

    @property
    def block_type(self):
        """Earlier versions' name, read-only: `"parallel_scaling"` for that `block_kind`, else
        `"standard"`. Deprecated: read `block_kind`."""
        return _deprecated_read(self, "block_type")

    @classmethod
    def field_names(cls, *groups):
        """Field names in declaration order, of the given groups (see the module docstring)."""
        unknown = sorted(set(groups) - set(GROUPS))
        if unknown:
            raise ValueError(f"Unknown field groups {unknown}. Expected some of {GROUPS}.")
        return tuple(
            f.name for f in dataclasses.fields(cls) if not groups or f.metadata["group"] in groups
        )

    @classmethod
    def argument_names(cls):
        """What `ViTConfig(...)` and the builders accept: the fields, then earlier versions'
        names that map onto one (`LEGACY_ARGUMENTS`: `block_type`, `block_norm`)."""
        return cls.field_names() + LEGACY_ARGUMENTS

    def to_kwargs(self, *groups):
        """The fields as builder keyword arguments (all, or those of the given groups).

        Example:

        >>> config = ViTConfig.from_variant("mu/8", image_size=32)
        >>> config.to_kwargs("size")
        {'patch_size': (8, 8), 'num_layers': 2, 'hidden_dim': 32, 'mlp_dim': 64, 'num_heads': 2}
        >>> ViTConfig(**config.to_kwargs()) == config
        True
        """
        # Not dataclasses.asdict: it deep-copies values, backbone models included.
        return {name: getattr(self, name) for name in self.field_names(*groups)}

    @classmethod
    def from_variant(cls, variant, **overrides):
        """The config of a variant code (`"B/16"`, `"R50+B/16"`, ...); overrides win.

        Args:
            variant: str. A code `keras_vit.models.variants.parse_variant` reads.
            **overrides: any field. For the sizes, `image_size`, `num_classes`,
                `resnet_units` and `name`, None keeps the table's value or the default
                (`name` defaults to e.g. `"vit_b16"`). A `backbone` replaces the code's
                ResNet stem.

        Returns:
            A validated `ViTConfig`.

        Example:

        >>> config = ViTConfig.from_variant("B/16", num_layers=6)
        >>> config.num_layers, config.hidden_dim, config.name
        (6, 768, 'vit_b16')
        """
        table = variants.parse_variant(variant)
        unknown = sorted(set(overrides) - set(cls.argument_names()))
        if unknown:
            raise TypeError(
                f"Unknown ViT arguments {unknown}{nearest_keys(unknown, cls.field_names())}. "
                f"Expected some of {list(cls.field_names())}."
            )
        if overrides.get("backbone") is not None:
            table.pop("resnet_units", None)  # the backbone is the stem
        overrides = {
            key: value
            for key, value in overrides.items()
            if value is not None or key not in _NONE_KEEPS_DEFAULT
        }
        return cls(**{"name": variants.model_name(variant), **table, **overrides})

    def to_dict(self):
        """The fields as a JSON-ready dict (pairs as lists, a `backbone` serialized by Keras);
        `num_parallel` only with `block_kind="parallel"`, the one kind it applies to.

        Example:

        >>> config = ViTConfig.from_variant("mu/8", image_size=32)
        >>> ViTConfig.from_dict(config.to_dict()) == config
        True
        """
        fields = self.to_kwargs()
        for name, value in fields.items():
            if isinstance(value, tuple):
                fields[name] = list(value)
        if self.backbone is not None:
            fields["backbone"] = keras.saving.serialize_keras_object(self.backbone)
        fields["preprocessing"] = self.preprocessing.to_dict()
        if self.block_kind != "parallel":
            del fields["num_parallel"]
        return fields

    @classmethod
    def from_dict(cls, fields):
        """The config `to_dict` wrote (a serialized `backbone` is rebuilt, without weights).

        Dicts of earlier versions (saved `.keras` files: `block_type`, `block_norm` and
        `num_parallel` instead of `block_kind`) are read as the same block kind, silently.

        Example:

        >>> old = ViTConfig.from_variant("mu/8", image_size=32).to_dict()
        >>> del old["block_kind"]
        >>> old.update(block_type="standard", block_norm="post", num_parallel=1)
        >>> ViTConfig.from_dict(old).block_kind
        'post'
        """
        fields = dict(fields)
        unknown = sorted(set(fields) - set(cls.argument_names()), key=str)
        if unknown:
            raise TypeError(
                unknown_keys_message(unknown, cls.field_names(), "The ViTConfig dict")
                + f". Expected some of {list(cls.field_names())}."
            )
        if isinstance(fields.get("backbone"), dict):
            fields["backbone"] = keras.saving.deserialize_keras_object(fields["backbone"])
        legacy = {name: fields.pop(name) for name in LEGACY_ARGUMENTS if name in fields}
        fields.update(block_kind_arguments(fields, **legacy))  # no warning: a file
        return cls(**fields)

    @classmethod
    def from_model(cls, model):
        """The config of a model built by `keras_vit.ViT` (plain or hybrid): `model.config`.

        Args:
            model: a `keras_vit.models.VisionTransformer` (what every builder returns and
                `keras_vit.load_model` loads, `.keras` files of earlier versions included).

        Returns:
            The model's `ViTConfig`; `keras_vit.models.encoder.build_model(config)` builds the
            same architecture.

        Raises:
            ValueError: `model` is not a `VisionTransformer`.

        Example:

        >>> from keras_vit.models.encoder import build_model
        >>> config = ViTConfig.from_variant("mu/8", image_size=32, pooling="gap")
        >>> ViTConfig.from_model(build_model(config)) == config
        True
        """
        config = getattr(model, "config", None)
        if not isinstance(config, cls):
            hint = pretraining_hint(type(model).__name__)
            raise ValueError(
                "ViTConfig.from_model needs a model built by keras_vit (a VisionTransformer; "
                ".keras files of earlier versions load as one through keras_vit.load_model). "
                f"Received: {type(model).__name__} {getattr(model, 'name', '')!r}.{hint}"
            )
        return config


# The pre-training models (encoder + decoder or prediction head) and their encoder's extractor.
PRETRAINING_MODELS = {
    "MaskedAutoencoder": "extract_mae_encoder",
    "MaskedPatchPredictor": "extract_encoder",
}


def pretraining_hint(class_name):
    """`" A MaskedAutoencoder is a pre-training model: its encoder (...) is a
    VisionTransformer."`, or "" for any other class."""
    extract = PRETRAINING_MODELS.get(class_name)
    if extract is None:
        return ""
    return (
        f" A {class_name} is a pre-training model: its encoder "
        f"(keras_vit.models.{extract}(model)) is a VisionTransformer."
    )


def check_not_pretraining_model(model, what, class_name=None, use="Export or inspect that"):
    """Refuses a pre-training model (an MAE, a masked patch predictor: no single image-to-output
    graph) where `what` (an exporter, inspection, few-shot evaluation) takes a
    VisionTransformer, saying how to get its encoder (`use`: what to do with it).
    `class_name`: the class of a `.keras` file's model, read without loading."""
    name = class_name or type(model).__name__
    if name in PRETRAINING_MODELS:
        raise ValueError(
            f"{what} takes a VisionTransformer (images in, features or logits out). Received: "
            f"a {name}{f' {model.name!r}' if hasattr(model, 'name') else ''}, which trains an "
            f"encoder by reconstruction.{pretraining_hint(name)} {use} "
            "(keras-vit finetune --init loads it too)."
        )


def override_defaults(*groups):
    """`{field: default}` of `ViTConfig.from_variant`'s overrides (of the given groups; all
    without): each field's own default, None where None keeps the variant's (or a preset's)."""
    return {
        field.name: None
        if field.name in _NONE_KEEPS_DEFAULT or field.default is dataclasses.MISSING
        else field.default
        for field in dataclasses.fields(ViTConfig)
        if field.name in ViTConfig.field_names(*groups)
    }


_fields_init = ViTConfig.__init__


@functools.wraps(_fields_init)
def _legacy_init(self, *, block_type=None, block_norm=None, **fields):
    """The dataclass `__init__`, after `block_kind` / `num_parallel` are decided from the
    arguments (`models.block_kind_arguments`: None or absent means "implied"; earlier
    versions' `block_type` / `block_norm` map onto `block_kind`, with a DeprecationWarning)."""
    if block_type is not None or block_norm is not None:
        given = {"block_type": block_type, "block_norm": block_norm}
        shown = ", ".join(f"{k}={v!r}" for k, v in given.items() if v is not None)
        warnings.warn(
            f"ViT's block_type and block_norm are deprecated: pass block_kind, one of "
            f"keras_vit.layers.BLOCK_KINDS. Received: {shown}",
            DeprecationWarning,
            stacklevel=2,
        )
    fields.update(block_kind_arguments(fields, block_type, block_norm))
    _fields_init(self, **fields)


ViTConfig.__init__ = _legacy_init


def _deprecated_read(config, name):
    warnings.warn(
        f"ViTConfig.{name} is deprecated: read block_kind. Received: block_kind="
        f"{config.block_kind!r}",
        DeprecationWarning,
        stacklevel=3,
    )
    return legacy_names(config.block_kind)[name]


ViTConfig.__doc__ = ViTConfig.__doc__.replace(
    "        (the entries of `keras_vit.models.config_docs.OPTIONS`)\n", args_section(8) + "\n"
)
HYBRID_KWARGS = ViTConfig.field_names("hybrid")
# The bool options (checked by `checks.check_core`, which reads the same annotations).
BOOLS = tuple(f.name for f in dataclasses.fields(ViTConfig) if f.type in (bool, "bool"))
