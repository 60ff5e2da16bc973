"""The transformer blocks of a `ViTConfig`: `make_block`, one per depth, of the kind the config
names (`block_kind`, a key of `keras_vit.layers.BLOCK_KINDS`), with only the options that differ
from the class's defaults (so that the layer configs of models without them stay as in earlier
versions).
"""

import inspect

from keras_vit.layers.block_kinds import block_class
from keras_vit.layers.transformer_block import TransformerBlock


def make_block(config, index, drop_path_rate, name, dtype):
    """Block `index` of `config`: the class `config.block_kind` names, with its options.

    Example:

    >>> from keras_vit.models.config import ViTConfig
    >>> config = ViTConfig.from_variant("mu/8", image_size=32, block_kind="parallel_scaling")
    >>> type(make_block(config, 0, 0.0, "encoderblock_0", None)).__name__
    'ParallelScalingBlock'
    """
    kind = config.block_kind
    cls = block_class(kind)
    options = dict(
        num_heads=config.num_heads,
        mlp_dim=config.mlp_dim,
        dropout_rate=config.dropout_rate,
        attention_dropout_rate=config.attention_dropout_rate,
        drop_path_rate=drop_path_rate,
        layer_norm_epsilon=config.layer_norm_epsilon,
        approximate_gelu=config.approximate_gelu,
        name=name,
        dtype=dtype,
    )
    if kind != "post":  # residual post-norm blocks have no LayerScale (config_checks)
        options["layer_scale_init_value"] = config.layer_scale_init_value
    differential = config.attention_type == "differential"
    if differential:  # lambda_init by depth (timm's DiffAttention)
        options.update(attention_type="differential", block_index=index)
    if kind == "parallel_scaling":
        options.update(qk_norm=config.qk_norm, activation=config.activation, norm=config.norm)
        return cls(fused_output=differential, **options)  # timm's blocks
    options.update(_grouped_query(config, index))
    if kind == "parallel":
        options["num_parallel"] = config.num_parallel
    return cls(remat=config.remat, **_block_options(config, cls), **options)


def _grouped_query(config, index):
    """Block `index`'s grouped-query attention and attention-only LayerScale, if any (so that
    the layer configs of models without them stay as before)."""
    heads = config.num_key_value_heads
    heads = heads[index] if isinstance(heads, tuple) else heads
    options = {} if heads in (None, config.num_heads) else {"num_key_value_heads": heads}
    if config.attention_only_layer_scale:
        options["attention_only_layer_scale"] = True
    return options


# Block arguments passed only when they differ from the defaults (read off TransformerBlock's
# signature: every kind taking one has the same default), so that the layer configs of models
# without them stay as before.
_DEFAULTS = {
    name: inspect.signature(TransformerBlock.__init__).parameters[name].default
    for name in ("qk_norm", "activation", "mlp", "mlp_inner_norm", "key_bias",
                 "attention_inner_norm", "norm")
}  # fmt: skip


def _block_options(config, cls):
    """The block options of `config` that differ from the defaults (configs stay as before);
    a ValueError naming those `cls` does not take (config_checks refuses them first)."""
    options = {
        name: getattr(config, name)
        for name, default in _DEFAULTS.items()
        if getattr(config, name) != default
    }
    if config.relative_position_bias in ("block", "mlp"):
        options["relative_position_grid"] = config.grid_size
    if config.relative_position_bias == "mlp":
        options["relative_position_mlp_dim"] = config.relative_position_mlp_dim
    takes = cls.arguments()
    refused = [f"{name}={value!r}" for name, value in options.items() if name not in takes]
    if refused:
        raise ValueError(
            f"A {cls.__name__} block takes no {', '.join(refused)}. Received: "
            f"block_kind={config.block_kind!r}"
        )
    return options
