"""The transformer blocks of a `ViTConfig`: `make_block`, one per depth, with only the options
that differ from the layers' defaults (so that the layer configs of models without them stay as
in earlier versions).
"""

import inspect

from keras_vit.layers import ParallelScalingBlock, TransformerBlock


def make_block(config, index, drop_path_rate, name, dtype):
    """Block `index` of `config`: a `TransformerBlock`, or a `ParallelScalingBlock` (`block_type`).

    Example:

    >>> from keras_vit.models.config import ViTConfig
    >>> config = ViTConfig.from_variant("mu/8", image_size=32, block_type="parallel_scaling")
    >>> type(make_block(config, 0, 0.0, "encoderblock_0", None)).__name__
    'ParallelScalingBlock'
    """
    options = dict(
        num_heads=config.num_heads,
        mlp_dim=config.mlp_dim,
        dropout_rate=config.dropout_rate,
        attention_dropout_rate=config.attention_dropout_rate,
        drop_path_rate=drop_path_rate,
        layer_norm_epsilon=config.layer_norm_epsilon,
        approximate_gelu=config.approximate_gelu,
        layer_scale_init_value=config.layer_scale_init_value,
        name=name,
        dtype=dtype,
    )
    differential = config.attention_type == "differential"
    if differential:  # lambda_init by depth (timm's DiffAttention)
        options.update(attention_type="differential", block_index=index)
    if config.block_type == "parallel_scaling":
        options.update(qk_norm=config.qk_norm, activation=config.activation, norm=config.norm)
        return ParallelScalingBlock(fused_output=differential, **options)  # timm's blocks
    options.update(_grouped_query(config, index))
    return TransformerBlock(remat=config.remat, **_block_options(config), **options)


def _grouped_query(config, index):
    """Block `index`'s grouped-query attention and attention-only LayerScale, if any (so that
    the layer configs of models without them stay as before)."""
    heads = config.num_key_value_heads
    heads = heads[index] if isinstance(heads, tuple) else heads
    options = {} if heads in (None, config.num_heads) else {"num_key_value_heads": heads}
    if config.attention_only_layer_scale:
        options["attention_only_layer_scale"] = True
    return options


# TransformerBlock arguments passed only when they differ from its own defaults (read off its
# signature), so that the layer configs of models without them stay as before.
_BLOCK_DEFAULTS = {
    name: inspect.signature(TransformerBlock).parameters[name].default
    for name in ("qk_norm", "activation", "mlp", "mlp_inner_norm", "key_bias",
                 "attention_inner_norm", "norm", "block_norm")
}  # fmt: skip


def _block_options(config):
    """The block options of `config` that differ from the defaults (configs stay as before)."""
    options = {
        name: getattr(config, name)
        for name, default in _BLOCK_DEFAULTS.items()
        if getattr(config, name) != default
    }
    if config.relative_position_bias in ("block", "mlp"):
        options["relative_position_grid"] = config.grid_size
    if config.relative_position_bias == "mlp":
        options["relative_position_mlp_dim"] = config.relative_position_mlp_dim
    if config.num_parallel > 1:
        options["num_parallel"] = config.num_parallel
    return options
