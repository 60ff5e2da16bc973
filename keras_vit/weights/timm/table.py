"""timm's `VisionTransformer` checkpoint layout: `timm_name_table(config)`, `fills`.

The `{timm key: (Keras variable path(s), transform)}` table of
`keras_vit.weights.loading.load_state_dict` for a timm state dict of the model a `ViTConfig`
describes: timm's `VisionTransformer` and its options (class / register / distillation tokens,
learned position embedding resampled as timm does, ResNetV2 / ResNet-D / MobileCLIP stems,
parallel and parallel-scaling blocks, differential attention, relative position MLPs, BEiT-3's
inner norms, packed or unpacked SwiGLU, RMSNorm, NaFlex). A family whose timm model class lays its
checkpoint out otherwise (`Eva`, `Beit`, the VLM towers) gives the rows that differ through the
registry (`keras_vit.weights.registry.TimmLayout`). `keras_vit.weights.timm.reader`
(`from_timm`) and `keras_vit.weights.timm.export` read it.
"""

from keras_vit.layers.position_embedding import resample_position_embedding
from keras_vit.models.variable_paths import PATHS, RELATIVE_POSITION_BIAS, block
from keras_vit.weights import loading as L
from keras_vit.weights.registry import timm_layouts_for
from keras_vit.weights.timm.naflex import naflex_name_table
from keras_vit.weights.timm.options import (
    PACKED_BIAS,
    PACKED_WEIGHT,
    adapt_name_table,
    inner_norm,
    proj_fills,
)
from keras_vit.weights.timm.parallel import differential_rows, parallel_scaling_table
from keras_vit.weights.timm.stems import conv_stem_projection, stem_name_table

__all__ = ["fills", "timm_name_table", "timm_position_transform"]

# --- the name table ---------------------------------------------------------------------------

_norm, _linear = L.torch_norm, L.torch_linear


def _mlp(key, path, config):
    """timm's `Mlp` (`fc1`, `fc2`), or `SwiGLUPacked` (DINOv2 giant: `fc1` = gate rows, then up)."""
    if getattr(config, "mlp", "mlp") != "swiglu":
        inner = getattr(config, "mlp_inner_norm", False)  # BEiT-3's scale_mlp_norm
        return {
            **_linear(f"{key}.fc1", f"{path}/mlp_dense_1"),
            **(_norm(f"{key}.norm", f"{path}/mlp_inner_norm") if inner else {}),
            **_linear(f"{key}.fc2", f"{path}/mlp_dense_2"),
        }
    gate_up = (f"{path}/mlp/gate_dense", f"{path}/mlp/up_dense")
    return {
        f"{key}.fc1.weight": (tuple(f"{p}/kernel" for p in gate_up), PACKED_WEIGHT),
        f"{key}.fc1.bias": (tuple(f"{p}/bias" for p in gate_up), PACKED_BIAS),
        **_linear(f"{key}.fc2", f"{path}/mlp/down_dense"),
    }


def _parallel_block(i, config, qkv_bias):
    """timm's ParallelThingsBlock: `attns.{j}` / `ffns.{j}` (norm, attn / mlp, ls) per branch."""
    key, path = f"blocks.{i}", block(i)
    table = {}
    for j in range(config.num_parallel):
        end = f"_{j}" if j else ""
        attn, ffn, attention = f"{key}.attns.{j}", f"{key}.ffns.{j}", f"{path}/attention{end}"
        qkv = tuple(f"{attention}/{name}" for name in ("query", "key", "value"))
        table.update(_norm(f"{attn}.norm", f"{path}/attention_norm{end}"))
        table[f"{attn}.attn.qkv.weight"] = (tuple(f"{p}/kernel" for p in qkv), L.QKV_WEIGHT)
        if qkv_bias:
            table[f"{attn}.attn.qkv.bias"] = (tuple(f"{p}/bias" for p in qkv), L.QKV_BIAS)
        table[f"{attn}.attn.proj.weight"] = (
            f"{attention}/attention_output/kernel",
            L.HEADS_OUT_WEIGHT,
        )
        table[f"{attn}.attn.proj.bias"] = (f"{attention}/attention_output/bias", L.IDENTITY)
        table.update(_norm(f"{ffn}.norm", f"{path}/mlp_norm{end}"))
        table.update(_linear(f"{ffn}.mlp.fc1", f"{path}/mlp_dense_1{end}"))
        table.update(_linear(f"{ffn}.mlp.fc2", f"{path}/mlp_dense_2{end}"))
        if config.layer_scale_init_value is not None:
            table[f"{attn}.ls.gamma"] = (f"{path}/attention_scale{end}", L.IDENTITY)
            table[f"{ffn}.ls.gamma"] = (f"{path}/mlp_scale{end}", L.IDENTITY)
    return table


def _block(i, config, qkv_bias):
    kind = getattr(config, "block_kind", "pre")
    if kind == "parallel":
        return _parallel_block(i, config, qkv_bias)
    if kind == "parallel_scaling":
        return parallel_scaling_table(i, config, qkv_bias)
    key, path = f"blocks.{i}", block(i)
    attention = f"{path}/attention"
    qkv = tuple(f"{attention}/{name}" for name in ("query", "key", "value"))
    table = {
        **_norm(f"{key}.norm1", f"{path}/attention_norm"),
        f"{key}.attn.qkv.weight": (tuple(f"{p}/kernel" for p in qkv), L.QKV_WEIGHT),
        **(inner_norm(f"{key}.attn.norm", attention) if _inner(config) else {}),
        f"{key}.attn.proj.weight": (f"{attention}/attention_output/kernel", L.HEADS_OUT_WEIGHT),
        f"{key}.attn.proj.bias": (f"{attention}/attention_output/bias", L.IDENTITY),
        **_norm(f"{key}.norm2", f"{path}/mlp_norm"),
        **_mlp(f"{key}.mlp", path, config),
    }
    if qkv_bias:
        table[f"{key}.attn.qkv.bias"] = (tuple(f"{p}/bias" for p in qkv), L.QKV_BIAS)
    if getattr(config, "qk_norm", False):
        table.update(_norm(f"{key}.attn.q_norm", f"{attention}/query_norm"))
        table.update(_norm(f"{key}.attn.k_norm", f"{attention}/key_norm"))
    if getattr(config, "attention_type", "standard") == "differential":  # DiffAttention
        for rows in differential_rows(f"{key}.attn", attention):
            table.update(rows)
    if getattr(config, "relative_position_bias", None) == "mlp":  # vit_relpos: RelPosMlp
        table.update(_rel_pos_mlp(f"{key}.attn.rel_pos", f"{path}/{RELATIVE_POSITION_BIAS}"))
    if config.layer_scale_init_value is not None:
        table[f"{key}.ls1.gamma"] = (f"{path}/attention_scale", L.IDENTITY)
        table[f"{key}.ls2.gamma"] = (f"{path}/mlp_scale", L.IDENTITY)
    return table


def _inner(config):
    """BEiT-3's `attn.norm` (timm's `scale_attn_norm`): our attention's `inner_norm`."""
    return getattr(config, "attention_inner_norm", False)


def _rel_pos_mlp(key, path):
    """timm's `RelPosMlp` `key` (`mlp.fc1`, `mlp.fc2`) -> our `RelativePositionMLP` `path`."""
    return {**_linear(f"{key}.mlp.fc1", f"{path}/fc1"), **_linear(f"{key}.mlp.fc2", f"{path}/fc2")}


def _stem(config):
    """timm's ResNetV2 stem (`patch_embed.backbone.*`) -> our `conv_root`, `block{s}_unit{u}_*`."""
    root = "patch_embed.backbone" + (".stem" if config.resnet_units else "")
    table = {
        f"{root}.conv.weight": ("conv_root/kernel", L.CONV),
        **_norm(f"{root}.norm", "gn_root"),
    }
    for s, units in enumerate(config.resnet_units):
        for b in range(units):
            key, unit = f"patch_embed.backbone.stages.{s}.blocks.{b}", f"block{s + 1}_unit{b + 1}"
            for n in (1, 2, 3):
                table[f"{key}.conv{n}.weight"] = (f"{unit}_conv{n}/kernel", L.CONV)
                table.update(_norm(f"{key}.norm{n}", f"{unit}_gn{n}"))
            if b == 0:
                table[f"{key}.downsample.conv.weight"] = (f"{unit}_conv_proj/kernel", L.CONV)
                table.update(_norm(f"{key}.downsample.norm", f"{unit}_gn_proj"))
    return table


def _map_head(prefix):
    table = {"attn_pool.latent": (f"{prefix}/latent", L.IDENTITY)}
    for name in ("q", "kv", "proj"):
        table.update(_linear(f"attn_pool.{name}", f"{prefix}/{name}"))
    table.update(_norm("attn_pool.norm", f"{prefix}/norm"))
    table.update(_linear("attn_pool.mlp.fc1", f"{prefix}/mlp_fc1"))
    table.update(_linear("attn_pool.mlp.fc2", f"{prefix}/mlp_fc2"))
    return table


def timm_position_transform(config, spec=None):
    """timm's `pos_embed` -> ours, resampled as timm does if needed: bicubic, antialiased, or
    the family's resize (`spec.extras["position_resize"]`: FlexiViT's and RADIO's bilinear)."""
    prefix_rows = 0
    if getattr(config, "prefix_position_embedding", True):
        prefix_rows = int(config.class_token) + getattr(config, "num_register_tokens", 0)
        prefix_rows += int(getattr(config, "distillation_token", False))

    resize = dict(interpolation="bicubic", antialias=True)
    if spec is not None:
        resize.update(spec.extras.get("position_resize", {}))

    def resample(posemb, grid, prefix):
        return resample_position_embedding(posemb, grid, prefix, **resize)

    return L.position_embedding(config.grid_size, prefix_rows, resample)


def timm_name_table(config, *, qkv_bias=True, patch_bias=True, spec=None):
    """timm's weight names for the model `config` describes: `{timm key: (path(s), transform)}`.

    Args:
        config: the `keras_vit.models.config.ViTConfig` of the model.
        qkv_bias: bool. Whether the checkpoint has q/k/v biases. Defaults to True.
        patch_bias: bool. Whether it has a patch-embedding bias. Defaults to True.
        spec: optional `TimmArchitecture` (`parse_timm_name`): its `qkv_bias` and
            `patch_bias` win, and a family of timm's `eva.py` (`extras["layout"] == "eva"`)
            gets the `Eva` block names (`keras_vit.families.eva.timm_table`). Defaults to None
            (timm's `VisionTransformer`).

    Returns:
        dict, in timm's order, for `keras_vit.weights.loading.load_state_dict`.

    Example:

    >>> from keras_vit.models.config import ViTConfig
    >>> table = timm_name_table(ViTConfig.from_variant("mu/8", image_size=32))
    >>> table["blocks.1.attn.qkv.weight"][0]
    ('encoderblock_1/attention/query/kernel', 'encoderblock_1/attention/key/kernel', \
'encoderblock_1/attention/value/kernel')
    """
    # Families whose timm model class is not timm's VisionTransformer (keras_vit.families:
    # Beit, Eva, the VLM towers) give the rows that differ (`TimmLayout`).
    layouts = timm_layouts_for(config, spec)
    whole = next((layout.name_table for layout in layouts if layout.name_table), None)
    if whole is not None:
        return whole(config, spec)
    own_blocks = next((layout.block_rows for layout in layouts if layout.block_rows), None)
    if spec is not None:
        qkv_bias, patch_bias = spec.qkv_bias, spec.patch_bias
    p = PATHS
    table = {}
    if config.class_token:
        table["cls_token"] = (p["class_token"], L.IDENTITY)
    if getattr(config, "num_register_tokens", 0):
        table["reg_token"] = (p["register_tokens"], L.IDENTITY)
    if getattr(config, "distillation_token", False):
        table["dist_token"] = (p["distillation_token"], L.IDENTITY)
    if config.position_embedding == "learned":
        table["pos_embed"] = (p["position_embedding"], timm_position_transform(config, spec))
    stem = getattr(config, "stem", None)
    if stem in ("resnet_d", "conv"):  # timm's ResNet-D and MobileCLIP stems
        table.update(stem_name_table(config))
    elif config.resnet_units is not None:
        table.update(_stem(config))
    # MobileCLIP's last stem convolution is the patch embedding (timm's proj=False).
    projection = conv_stem_projection(config) if stem == "conv" else "patch_embed.proj"
    table[f"{projection}.weight"] = (p["patch_kernel"], L.CONV)
    if patch_bias:
        table[f"{projection}.bias"] = (p["patch_bias"], L.IDENTITY)
    for layout in layouts:
        if layout.model_rows:
            table.update(layout.model_rows(config))
    if getattr(config, "pre_norm", False):
        table.update(_norm("norm_pre", p["pre_norm"]))
    if getattr(config, "relative_position_bias", None) == "mlp_shared":  # vit_srelpos
        table.update(_rel_pos_mlp("shared_rel_pos", RELATIVE_POSITION_BIAS))
    for i in range(config.num_layers):
        table.update(own_blocks(i, config, spec) if own_blocks else _block(i, config, qkv_bias))
    if getattr(config, "fc_norm", False):
        table.update(_norm("fc_norm", p["fc_norm"]))
    elif getattr(config, "final_norm", True):
        table.update(_norm("norm", p["encoder_norm"]))
    if config.pooling == "map":
        table.update(_map_head(p["map_head"]))
    if config.include_top:
        table.update(_linear("head", p["head"]))
        if getattr(config, "distillation_token", False):
            table.update(_linear("head_dist", p["head_dist"]))
    if getattr(config, "naflex", False):
        return naflex_name_table(config, table)  # timm's NaFlexVit (naflexvit_*)
    # AIMv2's options: unpacked SwiGLU, no projection biases, patch norm, RMSNorm names.
    extras = {} if spec is None or own_blocks else spec.extras
    table = adapt_name_table(table, config, extras, patch_bias)
    for layout in layouts:
        if layout.finish:
            table = layout.finish(table, config, spec)
    return table


def fills(config, spec):
    """Zeros for the biases our layers have and the checkpoint's (of the parsed name `spec`)
    do not."""
    layouts = timm_layouts_for(config, spec)
    fills = {}
    if not any(layout.own_qkv_fills for layout in layouts):
        fills = {} if spec.qkv_bias else L.zero_qkv_biases(config.num_layers)
        if config.block_kind == "parallel_scaling":  # in_proj/bias: see timm_parallel.py
            fills = {}
    for layout in layouts:  # before the patch bias and projections, as before
        if layout.own_qkv_fills and layout.fills:
            fills.update(layout.fills(config, spec))
    if not spec.patch_bias:
        fills[PATHS["patch_bias"]] = 0.0
    fills.update(proj_fills(config, spec))
    for layout in layouts:
        if layout.fills and not layout.own_qkv_fills:
            fills.update(layout.fills(config, spec))
    return fills
