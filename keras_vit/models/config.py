"""`ViTConfig`: every argument of the ViT builders, declared and validated once.

`keras_vit.ViT`, the named builders, masked-patch prediction (`keras_vit.models.mpp`) and the
recipes all describe a model with one frozen dataclass. Its fields are grouped
(`ViTConfig.field_names("size")`, ...), so code that needs "the encoder arguments" or "the hybrid
arguments" reads one list instead of writing its own:

- `"size"`: `patch_size`, `num_layers`, `hidden_dim`, `mlp_dim`, `num_heads` (the variant table);
- `"input"`: `image_size`, `num_channels`, `dynamic_image_size`, `naflex`, `preprocessing`
  (the input spec, a `keras_vit.models.PreprocessingConfig`: not architecture, but carried with
  it through every rebuild and saved with it);
- `"head"`: `num_classes`, `include_top`, `pooling`, `representation_size`,
  `classifier_activation`, `fc_norm`, `class_names` (the head's labels);
- `"encoder"`: `class_token`, `position_embedding`, the dropout rates, `approximate_gelu`,
  `layer_norm_epsilon`, `layer_scale_init_value`, `remat`, `num_register_tokens`,
  `distillation_token`, `prefix_position_embedding`, `pre_norm`, `qk_norm`, `activation`,
  `key_bias`, `relative_position_bias`, `relative_position_mlp_dim`, `num_parallel`,
  the NaFlex position-embedding resize (`position_embedding_interpolation`,
  `position_embedding_antialias`, `position_embedding_align_corners`,
  `position_embedding_aspect_preserving`), and the EVA / EVA-02 / rotary-ViT options `mlp`,
  `mlp_inner_norm`, `attention_inner_norm`, `rotary_embedding`, `rotary_temperature`,
  `rotary_reference_grid`, `rotary_grid_offset`, `rotary_normalize_coords`, the norms
  `norm`, `patch_norm`, `final_norm`, `block_norm` (pre- or residual post-norm blocks),
  `block_type` (timm's ParallelScalingBlock) and `attention_type` (differential attention),
  `num_key_value_heads` (grouped-query attention) and `attention_only_layer_scale`;
- `"hybrid"`: `resnet_units`, `resnet_width`, `resnet_groups`, the ResNet epsilons
  (`resnet_conv_epsilon`, `resnet_conv_epsilon_mode`, `resnet_norm_epsilon`), `backbone` (the stem),
  `stem` (`"bit"`, `"resnet_d"`, `"conv"`), `stem_widths`, `stem_strides`;
- `"name"`: the Keras model name.
"""

import dataclasses
import functools
import math

import keras

from keras_vit.models import config_checks as checks
from keras_vit.models import config_stem_checks as stem_checks
from keras_vit.models import merger, variants
from keras_vit.models.arguments import nearest_keys, unknown_keys_message
from keras_vit.models.config_checks import (  # noqa: F401  (the option tables, here too)
    BOOLS,
    MLPS,
    NAFLEX_RESIZE,
    POOLINGS,
    RATES,
    RELATIVE_POSITION_BIASES,
    ROTARY_EMBEDDINGS,
)
from keras_vit.models.preprocessing_config import PreprocessingConfig

GROUPS = ("size", "input", "head", "encoder", "hybrid", "name")
# Overrides where None means "the variant table's value" (or the builder default) in
# `ViTConfig.from_variant`; for every other field None is a value of its own.
_NONE_KEEPS_DEFAULT = ("patch_size", "num_layers", "hidden_dim", "mlp_dim", "num_heads")
_NONE_KEEPS_DEFAULT += ("image_size", "num_classes", "resnet_units", "name")
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
        patch_size, num_layers, hidden_dim, mlp_dim, num_heads: the sizes (required; see
            `ViTConfig.from_variant` to take them from a code like `"B/16"`). For hybrids
            `patch_size` applies to the stem's feature map.
        image_size: int or (height, width). Defaults to 224 (with
            `dynamic_image_size`, the size the position embedding is made for).
        num_channels: int. Defaults to 3.
        dynamic_image_size: bool. Defaults to False.
        num_classes: int. Defaults to 1000.
        include_top: bool. Defaults to True.
        pooling: `"token"`, `"gap"`, `"map"`, `"token_gap"` (the class token and the
            patch-token mean concatenated, `2 * hidden_dim` wide: transformers'
            `Dinov2ForImageClassification`) or None. Defaults to `"token"`.
        representation_size: optional int. Defaults to None.
        classifier_activation: optional activation. Defaults to None.
        fc_norm: bool. Defaults to False.
        class_token: optional bool. Defaults to None (`pooling in ("token", None)`).
        position_embedding: `"learned"`, `"sincos2d"` or None. Defaults to `"learned"`.
        dropout_rate, attention_dropout_rate, drop_path_rate: floats in [0, 1).
            Default to 0.
        patch_dropout_rate: float in [0, 1). Fraction of the patch tokens dropped at random
            per image in training (timm's `patch_drop_rate`). Defaults to 0.
        approximate_gelu: bool. Defaults to True.
        layer_norm_epsilon: float. Defaults to 1e-6.
        layer_scale_init_value: optional float. Defaults to None.
        remat: bool. Defaults to False.
        num_register_tokens: int. Defaults to 0.
        distillation_token: bool. Defaults to False.
        prefix_position_embedding: bool. Defaults to True.
        pre_norm: bool. Defaults to False.
        qk_norm: bool. Defaults to False.
        activation: `"gelu"` or `"quick_gelu"`. Defaults to `"gelu"`.
        key_bias: bool. Whether the attention's key projection has a bias (False: the
            q/v-only biases of BEiT and EVA). Defaults to True.
        relative_position_bias: None, `"block"`, `"shared"`, `"mlp"` or `"mlp_shared"`.
            A relative position bias added to the attention logits of every block:
            BEiT's table (`keras_vit.layers.RelativePositionBias`, for a class token) or
            timm's `RelPosMlp` (`keras_vit.layers.RelativePositionMLP`, `vit_relpos_*`),
            one per block or one for all (layer `relative_position_bias`). Made for the grid
            of `image_size`: no register or distillation token, a fixed image size (timm's
            BEiT and relpos ViTs have none either). Defaults to None.
        relative_position_mlp_dim: optional int. Hidden width of the `"mlp"` biases; None
            means timm's 128 with them. Defaults to None.
        num_parallel: int. Parallel attention and MLP branches in every block (timm's
            `ParallelThingsBlock`; `TransformerBlock(num_parallel=...)`). Defaults to 1.
        mlp: `"mlp"` (dense, activation, dense) or `"swiglu"` (`keras_vit.layers.SwiGLU` of
            hidden width `mlp_dim`; EVA-02). Defaults to `"mlp"`.
        mlp_inner_norm: bool. A norm on the MLP's hidden activations before its output
            projection: EVA-02's sub-LN in the SwiGLU, or BEiT-3's after the GELU (timm's
            `scale_mlp_norm`). Defaults to False.
        attention_inner_norm: bool. EVA-CLIP's LayerNorm over the concatenated heads before
            each attention's output projection. Defaults to False.
        rotary_embedding: None, `"eva02"`, `"axial"`, `"mixed"` or `"dinov3"`: 2-D rotary
            position embeddings on the patch queries and keys of every block, computed for the
            token grid of each input (class and register tokens not rotated): EVA-02's
            (`keras_vit.layers.RotaryEmbedding2D`), RoPE-ViT's axial (the same with the
            column angles first: timm's `rope_grid_indexing='xy'`), RoPE-ViT's mixed
            (`keras_vit.layers.MixedRotaryEmbedding`: trainable frequencies per block and
            head; no reference grid or offset), or DINOv3's (`RotaryEmbedding2D(kind=
            "dinov3")`: patch centres normalised to [-1, 1], eval mode; no reference grid).
            Works with or without `position_embedding`. Defaults to None.
        rotary_temperature: float. Defaults to 10000 (`"mixed"`: of the initial
            frequencies; DINOv3's checkpoints: 100).
        rotary_reference_grid: optional int or (rows, columns): every grid's positions are
            rescaled to span this one (timm's `ref_feat_shape`). Defaults to None.
        rotary_grid_offset: float added to the grid positions. Defaults to 0.
        rotary_normalize_coords: `"separate"`, `"min"` or `"max"`: with `"dinov3"`, the
            patch centres are divided by each axis's size or by the min / max of both.
            Defaults to `"separate"`.
        block_norm: `"pre"` (`x + f(LN(x))`, the ViT's) or `"post"` (residual post-norm:
            `x + LN(f(x))`, timm's `ResPostBlock` / `ResPostRelPosBlock` /
            `EvaBlockPostNorm`; no LayerScale or parallel branches with it). Defaults to
            `"pre"`.
        block_type: `"standard"` (`keras_vit.layers.TransformerBlock`) or
            `"parallel_scaling"` (`keras_vit.layers.ParallelScalingBlock`: timm's
            `ParallelScalingBlock`, ViT-22B's parallel attention and MLP with one fused input
            projection; with differential attention its fused output projection, timm's
            `DiffParallelScalingBlock`). No parallel branches, RoPE, relative position bias,
            q/v-only biases, inner norms, SwiGLU, post-norm or remat with it. Defaults to
            `"standard"`.
        attention_type: `"standard"` or `"differential"` (`keras_vit.layers.
            DifferentialAttention`: timm's `DiffAttention`, `lambda_init` from each block's
            index; 2 * `num_heads` must divide `hidden_dim`). Defaults to `"standard"`.
        num_key_value_heads: None, an int or one entry (int or None) per block.
            Grouped-query attention (Sapiens2, timm's `num_kv_heads`): the key / value heads
            of the blocks' attention, each shared by `num_heads / num_key_value_heads`
            consecutive query heads; None (or an entry None) is multi-head attention.
            Defaults to None.
        attention_only_layer_scale: bool. With `layer_scale_init_value`, LayerScale on the
            attention branches only (timm's `attn_only_layer_scale`). Defaults to False.
        norm: `"layernorm"` or `"rmsnorm"`: the kind of every norm of the model (blocks,
            QK / inner norms, `pre_norm`, the final norm, `fc_norm`, the MAP head,
            `patch_norm`); RMSNorm is `keras.layers.RMSNormalization` (timm's `RmsNorm`,
            epsilon `layer_norm_epsilon` inside the square root, no bias). Defaults to
            `"layernorm"`.
        patch_norm: bool. A norm (kind `norm`) on the patch embeddings right after the
            projection, before the position embedding (timm's `embed_norm_layer`, AIMv2;
            layer `patch_encoder/patch_norm`). Defaults to False.
        final_norm: bool. With `fc_norm=False`, whether a norm (`encoder_norm`) follows the
            blocks; False: none at all (timm's `Eva` with `use_post_transformer_norm=False`,
            `use_fc_norm=False`: Perception Encoder's lang and spatial towers). Defaults to True.
        map_num_heads, map_mlp_dim: optional ints. With `pooling="map"`, the MAP head's heads
            and MLP width; None means `num_heads` and `mlp_dim`. Default to None.
        map_prefix_tokens: bool. With `pooling="map"`, whether the MAP head pools the prefix
            (class, register) tokens too (Perception Encoder core; timm's `Eva` attention pool).
            Defaults to False (the patch tokens only).
        merger_size, merger_dim, merger_hidden_dim, merger_norm, merger_padding: a VLM
            projector after the blocks, before the pooling (`keras_vit.models.merger`: each
            `merger_size` squared block of patch tokens merged into one of width `merger_dim`;
            `fc1` width (None: `merger_size ** 2 * hidden_dim`), a norm before the merge,
            zero padding of the grid). Default to None, None, None, False, False (none).
        final_and_fc_norm: bool. With `fc_norm`, the final norm too (DeepSeek-V4).
            Defaults to False.
        resnet_units: optional sequence of int: a BiT ResNet stem with these units per stage.
            Defaults to None (no ResNet stem).
        resnet_width: optional int. Root width of the ResNet stem; None means 64 with a
            ResNet stem. Defaults to None.
        resnet_groups: optional int. GroupNorm groups of the ResNet stem; None means 32
            with a ResNet stem. Defaults to None.
        resnet_conv_epsilon, resnet_conv_epsilon_mode: optional float and `"std"` or
            `"variance"`: the weight standardisation of the stem's `StdConv2D`s; None means
            the official 1e-5 added to the standard deviation. timm's hybrids use 1e-8
            under the square root (`"variance"`). Default to None.
        resnet_norm_epsilon: optional float. GroupNorm epsilon of the stem; None means the
            official 1e-6 (timm: 1e-5). Defaults to None.
        backbone: optional Keras model used as the stem instead of a ResNet. Defaults to None.
        stem: None, `"bit"`, `"resnet_d"` or `"conv"`: the CNN stem. `"bit"` (what None
            means with `resnet_units`) is the BiT ResNetV2 (`keras_vit.layers.resnet_stem`);
            `"resnet_d"` timm's ResNet-D (`keras_vit.layers.resnet_d_stem`: deep root,
            BatchNorm, average-pool shortcuts; `resnet_units`, `resnet_width`,
            `resnet_norm_epsilon` (None: timm's 1e-5) apply); `"conv"` MobileCLIP's
            non-overlapping conv -> BatchNorm -> GELU layers (`keras_vit.layers.conv_stem`,
            `stem_widths`, `stem_strides`; no `resnet_*`). Defaults to None.
        stem_widths, stem_strides: optional sequences of int, one per convolution of the
            `"conv"` stem: its output channels and its kernel size = stride. Default to None.
        naflex: bool. A NaFlex model: its input is a dict of `patches` `(B, N, ph * pw * C)`,
            `patch_coord` `(B, N, 2)` int `(y, x)` and `patch_valid` `(B, N)` bool (timm's
            NaFlex convention, `keras_vit.data.naflex_batch`), each image at its own grid;
            the position embedding (grid `image_size / patch_size`, patches only: the prefix
            tokens get none) is resized per image, attention and pooling ignore padding;
            a `rotary_embedding` is computed per token from its coordinates and its image's
            grid (`keras_vit.layers.NaFlexRotaryEmbedding`). Defaults to False.
        position_embedding_interpolation: `"bicubic"` or `"bilinear"`: the NaFlex resize of
            a learned table. Defaults to `"bicubic"` (timm's).
        position_embedding_antialias: bool. Antialiased resize. Defaults to True.
        position_embedding_align_corners: bool. Only without antialias. Defaults to False.
        position_embedding_aspect_preserving: bool. Resize to the longer side's square and
            keep the top-left block (timm's `pos_embed_ar_preserving`). Defaults to False.
        With `naflex=True`, `position_embedding` may also be `"factorized"` (a row and a
        column table, resized linearly).
        preprocessing: None, a dict or a `keras_vit.models.PreprocessingConfig`: how the model
            wants its images (resize, crop, mean, std, scale; `model.preprocessor`). None is
            the official `[-1, 1]` (`x / 127.5 - 1`). Stored as a `PreprocessingConfig`.
            Defaults to None.
        class_names: optional sequence of str, one per class of the head: the checkpoint's
            labels (transformers' `id2label`, timm's label set), which
            `keras_vit.decode_predictions(..., model=model)` names. Defaults to None.
        name: optional Keras model name. Defaults to None.

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
    # Patch dropout (issue 44): a random fraction of the patch tokens dropped in training only.
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
    # Parallel branches per block (timm's ParallelThingsBlock, the *_18x2_* models).
    num_parallel: int = _field("encoder", 1)
    # EVA, EVA-02 and timm's rotary ViTs (issue 30, `families`): SwiGLU MLPs, q/v-only biases,
    # EVA-CLIP's attention inner norm, 2-D rotary position embeddings.
    mlp: str = _field("encoder", "mlp")
    mlp_inner_norm: bool = _field("encoder", False)
    attention_inner_norm: bool = _field("encoder", False)
    rotary_embedding: object = _field("encoder", None)
    rotary_temperature: float = _field("encoder", 10000.0)
    rotary_reference_grid: object = _field("encoder", None)
    rotary_grid_offset: float = _field("encoder", 0.0)
    # DINOv3 (issue 30, `dinov3`): rotary_embedding="dinov3"'s coordinate normalisation.
    rotary_normalize_coords: str = _field("encoder", "separate")
    # Residual post-norm blocks (issue 30, rope): x + norm(f(x)) (timm's ResPostBlock,
    # ResPostRelPosBlock, EvaBlockPostNorm).
    block_norm: str = _field("encoder", "pre")
    # timm's ParallelScalingBlock / DiffParallelScalingBlock and differential attention (issue
    # 30, `parallel`): vit_*_xp_*, vit_pwee_*, vit_dwee_*, vit_dlittle_*, vit_dpwee_*.
    block_type: str = _field("encoder", "standard")
    attention_type: str = _field("encoder", "standard")
    # Grouped-query attention (one count, or one per block) and LayerScale on the attention
    # branch only (issue 30, `evafam`: Sapiens2).
    num_key_value_heads: object = _field("encoder", None)
    attention_only_layer_scale: bool = _field("encoder", False)
    # RMSNorm and the patch-embedding norm (issue 30, AIMv2 / Perception Encoder): the kind of
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
    # ResNet-D and MobileCLIP conv stems (issue 30, `resnetd`): the kind of CNN stem, and the
    # conv stem's widths and strides.
    stem: object = _field("hybrid", None)
    stem_widths: object = _field("hybrid", None)
    stem_strides: object = _field("hybrid", None)
    # NaFlex (issue 31): dict inputs, per-image position embeddings, masks.
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
        checks.check_core(self, normalize)
        checks.check_relative_position_bias(self, normalize)
        checks.check_families(self, normalize)
        checks.check_block_norm(self)
        checks.check_block_type(self)
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

    @classmethod
    def field_names(cls, *groups):
        """Field names in declaration order, of the given groups (see the module docstring)."""
        unknown = sorted(set(groups) - set(GROUPS))
        if unknown:
            raise ValueError(f"Unknown field groups {unknown}. Expected some of {GROUPS}.")
        return tuple(
            f.name
            for f in dataclasses.fields(cls)
            if not groups or f.metadata["group"] in groups
        )

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
        unknown = sorted(set(overrides) - set(cls.field_names()))
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
        """The fields as a JSON-ready dict (pairs as lists, a `backbone` serialized by Keras).

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
        return fields

    @classmethod
    def from_dict(cls, fields):
        """The config `to_dict` wrote (a serialized `backbone` is rebuilt, without weights)."""
        fields = dict(fields)
        unknown = sorted(set(fields) - set(cls.field_names()), key=str)
        if unknown:
            raise TypeError(
                unknown_keys_message(unknown, cls.field_names(), "The ViTConfig dict")
                + f". Expected some of {list(cls.field_names())}."
            )
        if isinstance(fields.get("backbone"), dict):
            fields["backbone"] = keras.saving.deserialize_keras_object(fields["backbone"])
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
            extract = {
                "MaskedAutoencoder": "extract_mae_encoder",
                "MaskedPatchPredictor": "extract_encoder",
            }.get(type(model).__name__)
            hint = (
                f" A {type(model).__name__} is a pre-training model: its encoder "
                f"(keras_vit.models.{extract}(model)) is a VisionTransformer."
                if extract
                else ""
            )
            raise ValueError(
                "ViTConfig.from_model needs a model built by keras_vit (a VisionTransformer; "
                ".keras files of earlier versions load as one through keras_vit.load_model). "
                f"Received: {type(model).__name__} {getattr(model, 'name', '')!r}.{hint}"
            )
        return config


HYBRID_KWARGS = ViTConfig.field_names("hybrid")
