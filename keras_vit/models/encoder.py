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

from keras_vit.layers import attention as attention_module
from keras_vit.layers._quantization import quantized_sublayers, recorded_dtype, split_dtype
from keras_vit.layers.fake_quant import apply_settings, quantization_aware_settings
from keras_vit.models import inputs as model_inputs
from keras_vit.models import pretrained
from keras_vit.models.config import ViTConfig
from keras_vit.models.fused_optimizer import FusedOptimizerCompile

# The graph builders and the layer names of the roles live in keras_vit.models.graph; they are
# importable from here too (the checkpoint tables and older code import them from this module).
from keras_vit.models.graph import (  # noqa: F401
    BLOCK_NAME,
    FINAL_NORM,
    PATCH_DROPOUT,
    PATCH_ENCODER,
    PRE_NORM,
    RELATIVE_POSITION_BIAS,
    ROTARY_EMBEDDING,
    apply_blocks,
    build_graph,
    build_outputs,
    encode_tokens,
    encoder_options,
    make_patch_encoder,
    make_rotary_embedding,
    num_prefix_tokens,
    rotary_table,
)
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
from keras_vit.models.merger import MERGER
from keras_vit.models.preprocessing_config import InputSpecMixin

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
        config = {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(policy),
            "config": self.config.to_dict(),
        }
        qat = quantization_aware_settings(self)
        if qat is not None:  # keras_vit.quantization_aware: rebuilt so by from_config
            config["quantization_aware"] = qat
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        qat = config.pop("quantization_aware", None)
        model = cls(ViTConfig.from_dict(config.pop("config")), **config)
        if qat is not None:
            apply_settings(model, qat)
        return model

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
