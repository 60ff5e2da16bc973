"""What `export_timm` can write: `check_timm_expressible(config)`, an allow-list of options.

Each option timm's `VisionTransformer` has no form for is refused with its own reason, in terms
of timm's model classes and options (no keras_vit family is named here: a family's models are
read through the registry, and a reason must stay true when a family is added); every option
not named in `_WRITTEN` must be at its default (`keras_vit.weights.export_options`), so a
new option is refused until `export_timm` learns to write it. Raised before anything is written.
"""

from keras_vit.weights.export_options import SAME_OUTPUTS, check_unwritten_options_default

# What a timm model name fixes (keyword arguments cannot change it): checked per candidate.
HYBRID_FIELDS = (
    "resnet_units",
    "resnet_width",
    "resnet_groups",
    "resnet_conv_epsilon",
    "resnet_conv_epsilon_mode",
    "resnet_norm_epsilon",
    "stem",
)


# ViTConfig options that only timm's `Eva` model class has, and their defaults.
_EVA_OPTIONS = dict(
    mlp="mlp",
    mlp_inner_norm=False,
    key_bias=True,
    attention_inner_norm=False,
    rotary_embedding=None,
    num_key_value_heads=None,  # grouped-query attention (timm's AttentionRope num_kv_heads)
    attention_only_layer_scale=False,  # timm's attn_only_layer_scale
)


def refuse(option, value, why):
    return ValueError(f"export_timm cannot write {option}={value!r}: {why}.")


# Why each block kind but timm's pre-norm `Block` is not written (a kind not named here: no
# timm form known).
_UNWRITTEN_KINDS = dict(
    post="export_timm writes timm's pre-norm VisionTransformer blocks; the residual post-norm "
    "models (*_rpn_*, block_fn=ResPostBlock) load through from_timm but are not exported",
    parallel="export_timm names timm models by their VisionTransformer arguments; the parallel "
    "blocks of *_18x2_* (block_fn=ParallelThingsBlock) are import only",
    parallel_scaling="timm's ParallelScalingBlock models (*_xp_*, vit_pwee_*) load through "
    "from_timm but are not exported",
)


def check_timm_expressible(config):
    """Raises a `ValueError` naming the first option of `config` that timm has no form for."""
    if config.backbone is not None:
        name = getattr(config.backbone, "name", type(config.backbone).__name__)
        raise refuse(
            "backbone",
            name,
            "timm's hybrids are ViTs behind its own ResNetV2 stems (R26, R50, root only), not "
            "an arbitrary Keras backbone",
        )
    if config.stem not in (None, "bit"):  # ResNet-D, conv stems: read by from_timm, not written
        raise refuse(
            "stem",
            config.stem,
            "export_timm writes timm's ResNetV2 hybrids only; the other CNN stems (read by "
            "from_timm) have BatchNorm state (num_batches_tracked) that is not written",
        )
    if config.relative_position_bias is not None:
        raise refuse(
            "relative_position_bias",
            config.relative_position_bias,
            "export_timm writes timm's VisionTransformer, which has no relative position bias "
            "(timm's Beit and VisionTransformerRelPos models load through from_timm but are not "
            "exported)",
        )
    if config.block_kind != "pre":
        why = _UNWRITTEN_KINDS.get(
            config.block_kind, "export_timm writes timm's pre-norm VisionTransformer blocks only"
        )
        raise refuse("block_kind", config.block_kind, why)
    if config.attention_type != "standard":
        raise refuse(
            "attention_type",
            config.attention_type,
            "timm's DiffAttention models (vit_dwee_*, vit_dlittle_*, vit_dpwee_*) load through "
            "from_timm but are not exported",
        )
    for option, default in _EVA_OPTIONS.items():
        if getattr(config, option) != default:
            raise refuse(
                option,
                getattr(config, option),
                "export_timm writes timm's VisionTransformer; this option is one of timm's Eva "
                "model class, which keras_vit reads (from_timm) but does not write yet",
            )
    if config.norm != "layernorm" or config.patch_norm or not config.final_norm:
        option = "norm" if config.norm != "layernorm" else "patch_norm"
        option = option if config.norm != "layernorm" or config.patch_norm else "final_norm"
        raise refuse(
            option,
            getattr(config, option),
            "export_timm writes timm's LayerNorm ViTs with a final norm; timm's "
            "VisionTransformer also takes RmsNorm, embed_norm_layer and final_norm=False "
            "(models with them load through from_timm), but export_timm does not write them "
            "yet",
        )
    for option, default in (("map_num_heads", None), ("map_mlp_dim", None),
                            ("map_prefix_tokens", False)):  # fmt: skip
        if getattr(config, option) != default:
            raise refuse(
                option,
                getattr(config, option),
                "export_timm writes timm's default MAP head (the blocks' heads and MLP width, "
                "patch tokens only); other head widths and pool_include_prefix (read by "
                "from_timm) are not written yet",
            )
    for option in ("merger_size", "final_and_fc_norm"):  # towers' options: read, not written
        if getattr(config, option):
            raise refuse(
                option,
                getattr(config, option),
                "timm's VisionTransformer has no patch-merging projector or second final norm "
                "(timm's vision towers with them load through from_timm but are not exported)",
            )
    if config.representation_size is not None:
        raise refuse(
            "representation_size",
            config.representation_size,
            "timm's VisionTransformer has no pre-logits layer (dense + tanh) before the head",
        )
    if config.classifier_activation is not None:
        raise refuse(
            "classifier_activation",
            config.classifier_activation,
            "timm models return logits; export a model built with classifier_activation=None",
        )
    if config.position_embedding == "sincos2d" and config.dynamic_image_size:
        raise refuse(
            "position_embedding",
            "sincos2d",
            "with dynamic_image_size=True ours is recomputed for each grid, timm resamples its "
            "learned table",
        )
    if config.naflex:
        raise refuse(
            "naflex",
            True,
            "export_timm writes timm's VisionTransformer (image input); NaFlex models load "
            "from timm's naflexvit_* through from_timm but are not exported",
        )
    if config.pooling == "token_gap":
        raise refuse(
            "pooling",
            "token_gap",
            "timm's VisionTransformer has no pooling that concatenates the class token and "
            "the patch-token mean",
        )
    if config.distillation_token and config.pooling is None:
        raise refuse(
            "pooling",
            None,
            "timm's distilled DeiT always returns the mean of its class and distillation "
            "outputs, never the token sequence",
        )
    check_unwritten_options_default(
        config,
        _WRITTEN,
        refuse,
        "export_timm writes timm's VisionTransformer, which has no form for it",
    )


# What `timm_arguments`, the candidate names and the checks above write or decide; any other
# option off its default is refused (an allow-list: a new option is refused until written).
_WRITTEN = (
    "patch_size", "num_layers", "hidden_dim", "mlp_dim", "num_heads", "image_size",
    "num_channels", "dynamic_image_size", "num_classes", "include_top", "pooling",
    "representation_size", "classifier_activation", "fc_norm", "class_token",
    "position_embedding", "approximate_gelu", "layer_norm_epsilon", "layer_scale_init_value",
    "num_register_tokens", "distillation_token", "prefix_position_embedding", "pre_norm",
    "qk_norm", "activation", "relative_position_bias", "block_kind", "num_parallel",
    "attention_type", "norm", "patch_norm", "final_norm", "map_num_heads",
    "map_mlp_dim", "map_prefix_tokens", "merger_size", "final_and_fc_norm", "backbone",
    "naflex", *HYBRID_FIELDS, *_EVA_OPTIONS,
) + SAME_OUTPUTS  # fmt: skip
