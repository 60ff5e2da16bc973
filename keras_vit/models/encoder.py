"""The one transformer, `VisionTransformer`: patch encoder -> blocks -> norm -> pooling -> head.

`VisionTransformer` is the model every builder returns: a functional `keras.Model` subclass in
the style of KerasHub's `Backbone`. `__init__` takes a `ViTConfig` and builds the graph
(`build_graph`); `get_config` / `from_config` round-trip through that config (`.keras` files),
with the dtype policies of mixed precision and quantized layers. Plain and hybrid models differ
only in their stem (`keras_vit.models.stems`); masked-patch pre-training (`keras_vit.models.mpp`)
reuses `make_patch_encoder` and `apply_blocks`.

Consumers (weight loaders, LoRA, quantization, export, inspection, `feature_extractor`) find
the parts by role, properties of the model:

- `config`: the `ViTConfig`;
- `stem`: None (plain ViT), the `backbone` model, or a functional view images -> ResNet
  feature map (sharing the stem's layers);
- `patch_encoder`: the `PatchEncoder`;
- `rotary_embedding`: the `RotaryEmbedding2D` whose table every block's attention rotates
  by (computed from the grid of each input), the `MixedRotaryEmbedding` giving each block
  its own, or None;
- `pre_norm`: the LayerNorm before the blocks, or None;
- `blocks`: the `TransformerBlock`s (or `ParallelScalingBlock`s) in depth order;
- `final_norm`: the norm after the blocks, or None with `fc_norm` or `final_norm=False`;
- `merger`: the `PatchMerger` (a VLM projector, `keras_vit.models.merger`), or None;
- `pooling`: the `TokenPooling` / `MAPHead` (the class-token pooling of a distilled model),
  or None with `pooling=None`;
- `fc_norm`: the LayerNorm on the pooled vector, or None;
- `pre_logits`: the Dense + tanh pre-logits layer, or None;
- `head`: the classifier Dense, or None without a top; `heads`: every classifier (`head`, and
  `head_dist` of a distilled model), in that order;
- `output_activation`: a distilled model's `classifier_activation` layer (after the averaged
  heads), or None.

Layer names (what the checkpoint name tables map; the constants below): `patch_encoder`,
`rotary_embedding` (no weights),
`pre_norm`, `encoderblock_{i}`, `encoder_norm`, `merger`, `pooling` (`TokenPooling` or `MAPHead`),
`fc_norm`, `pre_logits`, `head`; a distilled model's classifier is `head` on the class token
(`pooling`) and `head_dist` on the distillation token (`pooling_dist`), averaged by
`head_average` (then `classifier_activation`, if any); the ResNet stem's are in
`keras_vit.layers.resnet`.
"""

import keras

from keras_vit.layers import (
    MixedRotaryEmbedding,
    NaFlexMixedRotaryEmbedding,
    NaFlexRotaryEmbedding,
    PatchEncoder,
    RelativePositionBias,
    RelativePositionMLP,
    RotaryEmbedding2D,
    TokenDropping,
)
from keras_vit.layers import attention as attention_module
from keras_vit.layers._quantization import quantized_sublayers, recorded_dtype, split_dtype
from keras_vit.layers.norms import make_norm
from keras_vit.models import inputs as model_inputs
from keras_vit.models import naflex, pretrained
from keras_vit.models.blocks import make_block
from keras_vit.models.config import NAFLEX_RESIZE, ViTConfig
from keras_vit.models.fused_optimizer import FusedOptimizerCompile
from keras_vit.models.heads import (  # noqa: F401  (the top's layer names, also ours)
    CLASSIFIER_ACTIVATION,
    FC_NORM,
    HEAD,
    HEAD_AVERAGE,
    HEAD_DIST,
    POOLING,
    POOLING_DIST,
    PRE_LOGITS,
    build_top,
    head_dtype,
)
from keras_vit.models.merger import MERGER, merge_tokens
from keras_vit.models.preprocessing_config import InputSpecMixin
from keras_vit.models.stems import stem_features

# The layer names of the roles (`VisionTransformer` finds its parts by them; the checkpoint
# name tables map them). Block `i` is `BLOCK_NAME.format(i)`.
PATCH_ENCODER = "patch_encoder"
ROTARY_EMBEDDING = "rotary_embedding"
PRE_NORM = "pre_norm"
PATCH_DROPOUT = "patch_dropout"
BLOCK_NAME = "encoderblock_{}"
FINAL_NORM = "encoder_norm"
RELATIVE_POSITION_BIAS = "relative_position_bias"


def _default_dtype(name):
    """Without a model's policies: every layer takes the global dtype policy."""
    del name
    return None


def make_patch_encoder(config, dtype=None, **kwargs):
    """The `PatchEncoder` named `patch_encoder` of `config`; `kwargs` e.g. `use_mask_embedding`."""
    return PatchEncoder(
        config.hidden_dim,
        config.patch_size,
        class_token=config.class_token,
        position_embedding=config.position_embedding,
        dropout_rate=config.dropout_rate,
        name=PATCH_ENCODER,
        dtype=dtype,
        **encoder_options(config),
        **kwargs,
    )


def encoder_options(config):
    """The `PatchEncoder` arguments of `config` beyond the original ViT's (defaults left out).

    Only options that differ from the layer's defaults are passed, so that models without
    them keep exactly the layer configs of earlier versions.
    """
    options = dict(
        num_register_tokens=config.num_register_tokens,
        distillation_token=config.distillation_token,
        prefix_position_embedding=config.prefix_position_embedding,
        dynamic_image_size=config.dynamic_image_size,
    )
    defaults = dict(
        num_register_tokens=0,
        distillation_token=False,
        prefix_position_embedding=True,
        dynamic_image_size=False,
    )
    options = {k: v for k, v in options.items() if v != defaults[k]}
    if config.dynamic_image_size:
        options["position_embedding_grid"] = config.grid_size
        for name in ("interpolation", "antialias", "align_corners"):  # Qwen3-VL: bilinear
            name = f"position_embedding_{name}"
            if getattr(config, name) != NAFLEX_RESIZE[name]:
                options[name] = getattr(config, name)
    if config.patch_norm:  # AIMv2's norm on the patch embeddings (timm's embed_norm_layer)
        options["patch_norm"] = config.norm
        options["patch_norm_epsilon"] = config.layer_norm_epsilon
    return options


def num_prefix_tokens(config):
    """Class, distillation and register tokens before the patch tokens."""
    return int(config.class_token) + int(config.distillation_token) + config.num_register_tokens


def _layer_norm(config, name, dtype_of):
    """The model's norm `name` (`pre_norm`, `encoder_norm`, `fc_norm`) of kind `config.norm`."""
    return make_norm(config.norm, config.layer_norm_epsilon, name, dtype_of(name))


def rotary_table(features, config, dtype_of=_default_dtype):
    """The `rotary_embedding` layer's `(N, 2 * head_dim)` table for the grid of `features`.

    `features` is what the patch encoder embeds (images, or a stem's map; a NaFlex model's
    input dict, giving `(B, N, 1, 2 * head_dim)` per-token tables); None without
    `config.rotary_embedding`; with `"mixed"`, a list of one `(N, heads, 2 * head_dim)` table
    per block.
    """
    if config.rotary_embedding is None:
        return None
    layer = make_rotary_embedding(config, dtype_of(ROTARY_EMBEDDING))
    if config.naflex:  # per-token tables from the NaFlex inputs (`features`: their dict)
        return layer(features["patch_coord"], features["patch_valid"])
    return layer(features)


def make_rotary_embedding(config, dtype=None):
    """The `rotary_embedding` layer of `config` (which has one): plain or NaFlex, axial or mixed.

    Plain models' layers read the grid of the patch encoder's input (`patch_size`); NaFlex
    models' (`NaFlexRotaryEmbedding`, `NaFlexMixedRotaryEmbedding`) each token's coordinates.
    """
    head_dim = config.hidden_dim // config.num_heads
    common = dict(temperature=config.rotary_temperature, name=ROTARY_EMBEDDING, dtype=dtype)
    if not config.naflex:
        common["patch_size"] = config.patch_size
    if config.rotary_embedding == "mixed":
        layer = NaFlexMixedRotaryEmbedding if config.naflex else MixedRotaryEmbedding
        return layer(config.num_layers, config.num_heads, head_dim, **common)
    options = {"grid_indexing": "xy"} if config.rotary_embedding == "axial" else {}
    layer = NaFlexRotaryEmbedding if config.naflex else RotaryEmbedding2D
    return layer(
        head_dim,
        reference_grid_size=config.rotary_reference_grid,
        grid_offset=config.rotary_grid_offset,
        kind="dinov3" if config.rotary_embedding == "dinov3" else "eva02",
        normalize_coords=config.rotary_normalize_coords,
        **common,
        **options,
    )


def apply_blocks(tokens, config, dtype_of=_default_dtype, features=None, attention_mask=None):
    """`pre_norm`, `encoderblock_0` ... `encoderblock_{L-1}` and `encoder_norm` on tokens.

    `pre_norm` only with `config.pre_norm`; no `encoder_norm` with `config.fc_norm` (the
    final norm then follows the pooling). `dtype_of(layer name)` gives each layer's dtype
    policy (None: the global policy). With `config.rotary_embedding`, `features` (what the
    patch encoder embedded) gives the grid of the rotary table every block is called with.
    `attention_mask` (NaFlex: `patch_valid`) goes to every block's attention.
    """
    if config.rotary_embedding is not None and features is None:
        raise ValueError(
            "A model with rotary_embedding needs the patch encoder's input (features) to "
            f"compute its rotary table. Received: rotary_embedding={config.rotary_embedding!r}, "
            "features=None"
        )
    rotary = rotary_table(features, config, dtype_of)
    if config.patch_dropout_rate:  # timm's patch_drop: after the position embedding
        dropped = TokenDropping(
            config.patch_dropout_rate,
            num_prefix_tokens(config),
            training_only=True,
            name=PATCH_DROPOUT,
            dtype=dtype_of(PATCH_DROPOUT),
        )(tokens, rotary_embedding=rotary)
        tokens, rotary = dropped["tokens"], dropped.get("rotary_embedding")
    per_block = isinstance(rotary, (list, tuple))  # mixed RoPE: one table per block
    mask = {} if attention_mask is None else {"attention_mask": attention_mask}
    x = tokens
    if config.pre_norm:
        x = _layer_norm(config, PRE_NORM, dtype_of)(x)
    shared = {}
    name, dtype = RELATIVE_POSITION_BIAS, dtype_of(RELATIVE_POSITION_BIAS)
    if config.relative_position_bias == "shared":
        layer = RelativePositionBias(config.num_heads, config.grid_size, name=name, dtype=dtype)
        shared["attention_bias"] = layer(x)
    elif config.relative_position_bias == "mlp_shared":
        layer = RelativePositionMLP(
            config.num_heads,
            config.grid_size,
            config.relative_position_mlp_dim,
            num_prefix_tokens=num_prefix_tokens(config),
            name=name,
            dtype=dtype,
        )
        shared["attention_bias"] = layer(x)
    for i in range(config.num_layers):
        # Stochastic depth grows linearly with depth (timm / DeiT convention).
        rate = config.drop_path_rate * i / max(config.num_layers - 1, 1)
        name = BLOCK_NAME.format(i)
        x = make_block(config, i, rate, name, dtype_of(name))(
            x, **shared, **_rotary_option(rotary, i if per_block else None), **mask
        )
    if (config.fc_norm and not config.final_and_fc_norm) or not config.final_norm:
        return x
    return _layer_norm(config, FINAL_NORM, dtype_of)(x)


def _rotary_option(rotary, index):
    """Block call arguments: the rotary table (block `index`'s of a per-block list), if any."""
    if rotary is None:
        return {}
    return {"rotary_embedding": rotary if index is None else rotary[index]}


def build_outputs(features, config, dtype_of=_default_dtype):
    """Assembles the transformer part on top of `features` (images, or a stem's feature map).

    Args:
        features: functional `(B, h, w, c)` tensor the patch encoder reads.
        config: a `keras_vit.models.config.ViTConfig`.
        dtype_of: callable mapping a layer name to its dtype policy (None: the global one).

    Returns:
        The functional output tensor.
    """
    x = make_patch_encoder(config, dtype=dtype_of(PATCH_ENCODER))(features)
    return encode_tokens(x, config, dtype_of, features=features)


def encode_tokens(x, config, dtype_of=_default_dtype, patch_valid=None, features=None):
    """Blocks, norm, pooling and head on the patch encoder's tokens (`build_outputs`' rest).

    `patch_valid`: NaFlex validity `(B, N)` of the patch tokens, masking attention and
    pooling (`keras_vit.models.naflex`). `features`: what the patch encoder embedded (the
    grid of a rotary model's table).
    """
    x = apply_blocks(x, config, dtype_of, features=features, attention_mask=patch_valid)
    x = merge_tokens(x, features, config, dtype_of)  # a VLM projector, if any
    return build_top(x, config, num_prefix_tokens(config), dtype_of, patch_valid)


def build_graph(config, dtype_of=_default_dtype):
    """The functional `(inputs, outputs)` of the model `config` describes (plain or hybrid).

    Example:

    >>> from keras_vit.models.config import ViTConfig
    >>> inputs, outputs = build_graph(ViTConfig.from_variant("mu/8", image_size=32))
    >>> outputs.shape
    (None, 1000)
    """
    if config.naflex:
        return _naflex_graph(config, dtype_of)
    size = (None, None) if config.dynamic_image_size else config.image_size
    inputs = keras.Input((*size, config.num_channels), name="images")
    features = stem_features(inputs, config, dtype_of(None))
    return inputs, build_outputs(features, config, dtype_of)


def _naflex_graph(config, dtype_of):
    """A NaFlex model's `(inputs dict, outputs)` (`keras_vit.models.naflex`).

    Example:

    >>> from keras_vit.models.config import ViTConfig
    >>> config = ViTConfig.from_variant("mu/8", image_size=32, naflex=True, pooling="gap")
    >>> inputs, outputs = build_graph(config)
    >>> sorted(inputs), outputs.shape
    (['patch_coord', 'patch_valid', 'patches'], (None, 1000))
    """
    inputs = naflex.naflex_inputs(config)
    patch_encoder = naflex.make_naflex_patch_encoder(
        config, PATCH_ENCODER, dtype=dtype_of(PATCH_ENCODER)
    )
    valid = inputs["patch_valid"]
    x = patch_encoder(inputs["patches"], inputs["patch_coord"], valid)
    return inputs, encode_tokens(x, config, dtype_of, patch_valid=valid, features=inputs)


# Layers that compute in float32 under a mixed-precision policy (float32 logits).
_HEAD_LAYERS = (HEAD, HEAD_DIST, HEAD_AVERAGE, CLASSIFIER_ACTIVATION)


def _policy_of(default, recorded, name):
    """The dtype of layer `name`: its recorded (quantized) policy or a map of its recorded
    sublayers', float32 for the heads under mixed precision, else the model's policy."""
    policy = recorded_dtype(default, recorded, name)
    if policy is default and name in _HEAD_LAYERS:
        return head_dtype(default)
    return policy


def _no_mask(mask):
    """Whether `mask` (None, or one entry per input as `Layer.__call__` gathers them) masks
    nothing."""
    if isinstance(mask, dict):
        return all(value is None for value in mask.values())
    if isinstance(mask, (list, tuple)):
        return all(value is None for value in mask)
    return mask is None


@keras.saving.register_keras_serializable(package="keras_vit")
class VisionTransformer(
    model_inputs.CheckedInputs, FusedOptimizerCompile, InputSpecMixin, keras.Model
):
    """A (plain or hybrid) Vision Transformer built from a `ViTConfig`.

    What `keras_vit.ViT`, the named builders (`ViTB16`, `ViTR50B16`, ...) and
    `keras_vit.load_model` return. Prefer the builders; this class is the model they make.
    Its `compile` is Keras' own, with Keras' `AdamW` / `Adam` running keras_vit's fused update
    on PyTorch (`fused_optimizer=False` keeps Keras' update; see `FusedOptimizerCompile`).

    Args:
        config: a `keras_vit.models.ViTConfig` (or the dict `ViTConfig.to_dict` writes).
        dtype: optional dtype policy of the model's layers (the classifier computes in float32
            under a mixed policy); a `keras.dtype_policies.DTypePolicyMap` also gives the
            policies of quantized layers, keyed by their path in the model (what `get_config`
            writes for a quantized model). Defaults to None (the global policy).
        **kwargs: `name` (defaults to `config.name`) and `trainable`.

    Attributes (roles):
        config, stem, patch_encoder, pre_norm, blocks, final_norm, pooling, fc_norm,
        pre_logits, head, heads, output_activation: see the module docstring;
        preprocessing, preprocessor, set_preprocessing: the input spec (`InputSpecMixin`).

    Example:

    >>> from keras_vit.models.config import ViTConfig
    >>> model = VisionTransformer(ViTConfig.from_variant("mu/8", image_size=32, num_classes=10))
    >>> model.name, model.output_shape, len(model.blocks)
    ('vit_mu8', (None, 10), 2)
    >>> model.patch_encoder.grid_size, model.final_norm.name, model.stem is None
    ((4, 4), 'encoder_norm', True)

    Reference:
        Dosovitskiy et al., 2021, "An Image is Worth 16x16 Words", Sec. 3.1.
    """

    def __init__(self, config, *, dtype=None, **kwargs):
        if isinstance(config, dict):
            config = ViTConfig.from_dict(config)
        if not isinstance(config, ViTConfig):
            raise ValueError(
                f"VisionTransformer needs a keras_vit.models.ViTConfig. Received: config={config!r}"
            )
        options = {"dtype": dtype}
        recorded = split_dtype(options)
        default = keras.dtype_policies.get(options["dtype"] or keras.config.dtype_policy())
        inputs, outputs = build_graph(
            config, lambda name: _policy_of(default, recorded, name) if name else default
        )
        kwargs.setdefault("name", config.name)
        super().__init__(inputs=inputs, outputs=outputs, dtype=default, **kwargs)
        self._vit_config = config

    def call(self, inputs, training=None, mask=None, **kwargs):
        # PyTorch fast path: the same graph walk, each layer's `call` without Keras'
        # per-layer `__call__` machinery (keras_vit/layers/_torch_kernels.py `run_graph`).
        # Keras passes a dict input's (absent) masks as a dict of Nones: no mask either.
        if _no_mask(mask) and not kwargs and attention_module.torch_fast_path():
            from keras_vit.layers import _torch_kernels

            outputs = _torch_kernels.run_graph(self, inputs, training)
            if outputs is not None:
                return outputs
        return super().call(inputs, training=training, mask=mask, **kwargs)

    @property
    def config(self):
        """The `ViTConfig` the model was built from."""
        return self._vit_config

    def get_config(self):
        policy = self.dtype_policy
        quantized = quantized_sublayers(self)
        if quantized:
            policy = keras.dtype_policies.DTypePolicyMap(policy, quantized)
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(policy),
            "config": self.config.to_dict(),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(ViTConfig.from_dict(config.pop("config")), **config)

    def _optional(self, name):
        try:
            return self.get_layer(name)
        except ValueError:
            return None

    @property
    def stem(self):
        """What feeds the patch encoder: None (images), the `backbone`, or a ResNet view.

        The view is a functional `keras.Model` from the images to the ResNet feature map that
        shares the model's stem layers (a new view on each access).
        """
        if not self.config.is_hybrid:
            return None
        if self.config.backbone is not None:
            return self.get_layer(self.config.backbone.name)
        return keras.Model(self.inputs[0], self.patch_encoder.input, name=f"{self.name}_stem")

    @property
    def patch_encoder(self):
        """The `PatchEncoder` (patch projection, prefix tokens, position embedding)."""
        return self.get_layer(PATCH_ENCODER)

    @property
    def rotary_embedding(self):
        """The `RotaryEmbedding2D` feeding every block (its `output` is the table), or None."""
        return self.get_layer(ROTARY_EMBEDDING) if self.config.rotary_embedding else None

    @property
    def pre_norm(self):
        """The LayerNorm before the blocks (CLIP's `norm_pre`), or None."""
        return self.get_layer(PRE_NORM) if self.config.pre_norm else None

    @property
    def relative_position_bias(self):
        """The relative position bias layer shared by the blocks, or None (none, or per block)."""
        return self._optional(RELATIVE_POSITION_BIAS)

    @property
    def blocks(self):
        """The `TransformerBlock`s, first to last."""
        return [self.get_layer(BLOCK_NAME.format(i)) for i in range(self.config.num_layers)]

    @property
    def final_norm(self):
        """The norm on the token sequence after the blocks, or None (`fc_norm`, `final_norm`)."""
        config = self.config
        keep = config.final_norm and (not config.fc_norm or config.final_and_fc_norm)
        return self.get_layer(FINAL_NORM) if keep else None

    @property
    def merger(self):
        """The `PatchMerger` after the blocks (a VLM projector), or None."""
        return self.get_layer(MERGER) if self.config.merger_size else None

    @property
    def pooling(self):
        """The pooling layer (`TokenPooling` or `MAPHead`), or None for token outputs."""
        return self._optional(POOLING)

    @property
    def fc_norm(self):
        """The LayerNorm on the pooled vector (timm's `fc_norm`), or None."""
        return self._optional(FC_NORM)

    @property
    def pre_logits(self):
        """The pre-logits Dense (+ tanh), or None."""
        return self._optional(PRE_LOGITS)

    @property
    def head(self):
        """The classifier Dense (on the class token of a distilled model), or None."""
        return self._optional(HEAD)

    @property
    def heads(self):
        """Every classifier Dense: `[head]`, `[head, head_dist]` (distilled), or `[]`."""
        found = (self._optional(name) for name in (HEAD, HEAD_DIST))
        return [layer for layer in found if layer is not None]

    @property
    def output_activation(self):
        """A distilled model's activation after the averaged heads, or None.

        (A single head applies `classifier_activation` itself: `head.activation`.)
        """
        return self._optional(CLASSIFIER_ACTIVATION)


def build_model(config, weights=None):
    """Builds the `VisionTransformer` `config` describes and loads `weights` into it.

    Args:
        config: a `keras_vit.models.config.ViTConfig`.
        weights: None or a path to an official `.npz` or a `.weights.h5` file (see
            `keras_vit.models.pretrained.load_weights`; preset names are resolved by
            `keras_vit.ViT`). Defaults to None.

    Returns:
        A `VisionTransformer` taking `(B, H, W, C)` images.

    Example:

    >>> from keras_vit.models.config import ViTConfig
    >>> build_model(ViTConfig.from_variant("mu/8", image_size=32, num_classes=10)).output_shape
    (None, 10)
    """
    return pretrained.load_weights(VisionTransformer(config), weights)
