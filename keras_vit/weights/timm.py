"""timm checkpoints -> keras_vit models: `from_timm(name, checkpoint)`.

timm is never imported: this module holds our own table of timm's weight names
(`timm_name_table`; the architectures a model name means are `keras_vit.weights.timm_names`'
`FAMILIES`), and reads the checkpoint with
`keras_vit.weights.state_dict.read_state_dict` (`.safetensors`, `.pth`/`.bin`, or a dict). A
model name may carry timm's pretrained tag (`"vit_small_patch16_224.augreg_in21k"`) or the Hub
prefix (`"timm/vit_small_patch16_224.augreg_in21k"`): the tag does not change the architecture.

timm's numerics are kept: exact erf GELU (timm's `nn.GELU`, also for the AugReg weights that
were trained with the tanh approximation), LayerNorm epsilon 1e-6 (CLIP towers 1e-5), timm's
hybrid ResNet (`StdConv2dSame` with epsilon 1e-8 under the square root, GroupNorm epsilon
1e-5), and timm's position-embedding resampling (bicubic with antialiasing, `F.interpolate`
exactly: `keras_vit.layers.bicubic`; FlexiViT's and C-RADIO's bilinear without antialiasing)
when the image size differs from the checkpoint's.
Architectures keras_vit does not implement (SwiGLU, rotary embeddings, ...: `UNSUPPORTED`) are
refused with a `ValueError` saying what they need.
"""

import logging

from keras_vit.layers.position_embedding import resample_position_embedding
from keras_vit.models.arguments import check_size_arguments, head_arguments
from keras_vit.models.config import ViTConfig
from keras_vit.models.encoder import BLOCK_NAME, RELATIVE_POSITION_BIAS, build_model
from keras_vit.models.variants import parse_variant
from keras_vit.weights import loading as L
from keras_vit.weights.input_specs import attach_class_names, timm_class_names, timm_input_spec
from keras_vit.weights.registry import family_of_timm_name, load_callable, timm_layouts_for
from keras_vit.weights.state_dict import read_state_dict
from keras_vit.weights.timm_hub import hub_checkpoint
from keras_vit.weights.timm_naflex import naflex_name_table
from keras_vit.weights.timm_names import parse_timm_name
from keras_vit.weights.timm_options import (
    PACKED_BIAS,
    PACKED_WEIGHT,
    adapt_name_table,
    inner_norm,
    proj_fills,
)
from keras_vit.weights.timm_parallel import differential_rows, parallel_scaling_table
from keras_vit.weights.timm_stems import batch_norm_counters, conv_stem_projection, stem_name_table

logger = logging.getLogger(__name__)

# --- the name table ---------------------------------------------------------------------------

# Model variables of keras_vit features the table maps (one place to change if they move).
PATHS = {
    "patch_kernel": "patch_encoder/kernel",
    "patch_bias": "patch_encoder/bias",
    "class_token": "patch_encoder/class_embedding",
    "register_tokens": "patch_encoder/register_embeddings",
    "distillation_token": "patch_encoder/distillation_embedding",
    "position_embedding": "patch_encoder/position_embeddings",
    "pre_norm": "pre_norm",
    "encoder_norm": "encoder_norm",
    "fc_norm": "fc_norm",
    "map_head": "pooling",
    "head": "head",
    "head_dist": "head_dist",
}


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
    key, path = f"blocks.{i}", BLOCK_NAME.format(i)
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
    if getattr(config, "num_parallel", 1) > 1:
        return _parallel_block(i, config, qkv_bias)
    if getattr(config, "block_type", "standard") == "parallel_scaling":
        return parallel_scaling_table(i, config, qkv_bias)
    key, path = f"blocks.{i}", BLOCK_NAME.format(i)
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


def _position_transform(config, spec=None):
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
        table["pos_embed"] = (p["position_embedding"], _position_transform(config, spec))
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


def _fills(config, spec):
    """Zeros for the biases our layers have and the checkpoint's do not."""
    layouts = timm_layouts_for(config, spec)
    fills = {}
    if not any(layout.own_qkv_fills for layout in layouts):
        fills = {} if spec.qkv_bias else L.zero_qkv_biases(config.num_layers)
        if config.block_type == "parallel_scaling":  # in_proj/bias: see timm_parallel.py
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


# --- from_timm --------------------------------------------------------------------------------


def _head_skips(arrays, config):
    """Checkpoint arrays left out on purpose: a head the model does not have, pre_logits."""
    head = arrays.get("head.weight")
    file_classes = int(head.shape[0]) if head is not None and head.ndim == 2 else None
    skip = {}
    if file_classes is not None and (not config.include_top or config.num_classes != file_classes):
        why = (
            "the model has no head (include_top=False)"
            if not config.include_top
            else f"the model's head has {config.num_classes} classes (a new zero head)"
        )
        for key in arrays:
            if key.split(".")[0] in ("head", "head_dist"):
                skip[key] = f"dropped the checkpoint's {key} {L.shape_of(arrays[key])}: {why}"
    for key in arrays:
        if key.startswith("pre_logits."):
            skip[key] = f"dropped {key} (timm drops pre_logits too)"
    if getattr(config, "stem", None) in ("resnet_d", "conv"):
        for key in batch_norm_counters(config):
            skip[key] = f"left out {key}: BatchNorm's step count, which Keras does not keep"
    return skip


def load_timm_weights(model, name, checkpoint):
    """Loads a timm checkpoint into a keras_vit model of that architecture, all or nothing.

    `from_timm` builds the model and calls this; call it yourself to load another
    checkpoint of the same architecture into a model you have. The position embedding is
    resampled to the model's grid as timm does; a head of another class count than the
    model's is left out (the model keeps its own).

    Args:
        model: a keras_vit model of the architecture `name` describes (e.g. from `from_timm`).
        name: str. The timm model name (it says whether the checkpoint has q/k/v and
            patch-embedding biases).
        checkpoint: a path or a dict (see `keras_vit.weights.state_dict.read_state_dict`).

    Returns:
        The model.

    Raises:
        ValueError: listing every missing, unexpected or mis-shaped array; the model's
            weights are unchanged.
    """
    return _load(model, parse_timm_name(name), read_state_dict(checkpoint), checkpoint)


def _load(model, spec, arrays, checkpoint, config=None):
    config = config or ViTConfig.from_model(model)
    table = timm_name_table(config, spec=spec)
    head = ("head.weight", "head.bias", "head_dist.weight", "head_dist.bias")
    return L.load_state_dict(
        model,
        arrays,
        L.without_new_head(table, arrays, head, logger),
        source=_describe(checkpoint),
        logger=logger,
        fills=_fills(config, spec),
        skip=_head_skips(arrays, config),
    )


def from_timm(
    name,
    checkpoint=None,
    *,
    pretrained=False,
    revision=None,
    cache_dir=None,
    image_size=None,
    num_classes=None,
    dynamic_image_size=None,
    **kwargs,
):
    """Builds the keras_vit model of a timm ViT and loads a timm checkpoint into it.

    The architecture comes from our table of timm's model names (timm itself is not needed):
    the families below, with or without timm's pretrained tag. The checkpoint is a timm state
    dict (what `model.state_dict()` holds and timm's Hub files contain): a `.safetensors`
    file, a `.pth`/`.bin` file (read with `torch.load(weights_only=True)`, needs PyTorch), or
    a dict of arrays or tensors. Loading is strict: one `ValueError` lists every missing,
    unexpected or mis-shaped array, and nothing is assigned.

    Families (timm's numerics; outputs equal timm's within 1e-5 in the tests): `vit_*_patch*_*`
    (original and AugReg, tiny to gigantic, `vit_base_patch16_224_miil`, `vit_base_*_plus_*`,
    `vit_small_patch16_36x1_224`), `deit_*` and distilled `deit_*_distilled_*` (timm's eval
    output: the mean of both heads), DeiT III `deit3_*`, `vit_*_gap_*`, register models
    `vit_*_reg{N}_{gap,map}_*`, DINOv2 (`vit_*_patch14_dinov2`, `vit_*_patch14_reg4_dinov2`;
    giant with its SwiGLU MLP), CLIP / OpenCLIP towers (`vit_*_clip_*`,
    `*_clip_quickgelu_*`), SigLIP towers (`*_siglip_*` with the MAP head, `*_siglip_gap_*`) and
    the hybrids
    `vit_tiny_r_s16_p8_*`, `vit_small_r26_s32_*`, `vit_base_r26_s32_*`, `vit_base_r50_s16_*`,
    `vit_large_r50_s32_*`, FlexiViT `flexivit_*` (use `keras_vit.with_patch_size` for other
    patch sizes), and timm's NaFlex ViTs `naflexvit_*` (C-RADIO's included) as NaFlex
    models (`naflex=True`: a dict input of `patches`, `patch_coord`, `patch_valid`, made by
    `keras_vit.data.naflex_batch`); timm's `eva.py` EVA-02 (`eva02_*`, RoPE + SwiGLU), EVA
    (`eva_giant_*`), rotary register ViTs (`vit_*_rope_reg*_gap_256`) and DINOv3
    (`vit_*_patch16_dinov3*`, DINOv3's RoPE: `rotary_embedding="dinov3"`); EVA-01
    `eva_large_patch14_*`; BEiT and relpos ViTs; AIMv2 (`aimv2_*`: RMSNorm, `patch_norm`,
    SwiGLU, no biases); Perception Encoder (`vit_pe_*`: 'xy' RoPE, `final_norm=False` for
    lang / spatial, the core towers' attention pool); C-RADIO (`vit_*_patch16_radio_v*`,
    its 128 x 128 table resized bilinearly as timm does), TIPSv2 (`vit_*_patch14_reg1_tipsv2`),
    `vit_intern300m_patch14_448`, timm's `test_vit*` models, and the VLM vision towers of
    Qwen3-VL (`qwen3_vit_*`) and DeepSeek-V4 (`deepseek_vit_*`; `_merge` / `_align` / `_enc`
    keep the projector: `model.merger`, its width from the name's tag). Other timm names (SAM,
    Gemma 4's towers, ...) raise a `ValueError` saying what they need.

    By name (timm's `create_model(name, pretrained=True)`): `pretrained=True` downloads the
    tag's checkpoint from the Hugging Face Hub (the repo `timm/<arch>.<tag>` or the tag's
    `hf_hub_id`, its `model.safetensors`; `"<arch>"` alone means timm's default tag;
    `"hf-hub:<org>/<repo>@<revision>"` any repo in timm's layout, at a pinned revision) through
    `huggingface_hub` (the `hub` extra) into the standard Hugging Face cache, and works
    offline from it (`HF_HUB_OFFLINE=1`). Names are looked up in timm's registry
    (`keras_vit.weights.timm_pretrained`), never parsed for numbers: an unknown one is refused
    with the nearest known names.

    Args:
        name: str. A timm model name, e.g. `"vit_base_patch16_224.augreg2_in21k_ft_in1k"`,
            `"timm/<arch>.<tag>"` or `"hf-hub:timm/<arch>.<tag>@<revision>"`.
        checkpoint: None (random initialisation of the architecture, or the Hub's weights
            with `pretrained=True`), a path, or a dict.
        pretrained: bool. Download the name's weights from the Hub (safetensors only).
            Defaults to False (timm's default: a random model).
        revision: optional str. The Hub branch, tag or commit (as `@<revision>` in the name).
        cache_dir: optional path. The Hub cache folder; defaults to huggingface_hub's
            (`HF_HUB_CACHE`, or `$HF_HOME/hub`, or `~/.cache/huggingface/hub`).
        image_size: optional int or (height, width). Defaults to the name's resolution;
            another one resamples the position embedding as timm's loader does (bicubic,
            antialiased; bilinear without antialiasing for FlexiViT and C-RADIO).
        num_classes: optional int. Defaults to the checkpoint head's class count (no head
            when the checkpoint has none), or timm's default for the name without a
            checkpoint. Another count gives a new zero-initialised head.
        dynamic_image_size: optional bool. Accept any image size the patch divides at call
            time (input `(None, None, C)`), resampling the position embedding at every call
            as timm's `dynamic_img_size=True` does. Defaults to None: the name's default in
            timm (True for `vit_intern300m_patch14_448`, `test_vit`, `test_vit2`,
            `test_vit4`; False for the others).
        **kwargs: other `keras_vit.ViT` arguments (`include_top`, `classifier_activation`,
            dropout rates, `name`, size overrides for tests, ...).

    Returns:
        A functional `keras.Model` taking `(B, H, W, C)` images normalised as timm's
        pretrained config says (mean 0.5, std 0.5 for AugReg and SigLIP: the [-1, 1] of
        `keras_vit.preprocess_input`; the ImageNet mean and std for DeiT and DINOv2). It
        carries that input spec (`model.preprocessing`, `model.preprocessor`: timm's eval
        transform): the `pretrained_cfg` of a `config.json` beside the checkpoint file, else
        timm's for the name (`keras_vit.weights.input_specs.timm_input_spec`);
        `preprocessing=` overrides it.

    Raises:
        ValueError: an unknown or unsupported name, or a checkpoint that does not fit
            (listing every problem; nothing is assigned).
        ImportError: `pretrained=True` without huggingface_hub (`pip install "keras-vit[hub]"`).
        FileNotFoundError: offline and not cached (saying what to download and where), or a
            Hub repo without safetensors.

    Example:

    >>> model = from_timm("vit_tiny_patch16_224", image_size=32, num_classes=10, num_layers=1)
    >>> model.output_shape
    (None, 10)
    """
    check_size_arguments(
        image_size=image_size, num_classes=num_classes, patch_size=kwargs.get("patch_size")
    )
    if pretrained or name.startswith(("hf-hub:", "hf_hub:")):
        name, checkpoint = hub_checkpoint(name, checkpoint, pretrained, revision, cache_dir)
    own = family_of_timm_name(_architecture(name))
    if own is not None:  # a family with a model of its own (keras_vit.weights.registry)
        if dynamic_image_size is not None:
            kwargs["dynamic_image_size"] = dynamic_image_size
        reader = load_callable(own.timm_reader)
        return reader(name, checkpoint, image_size=image_size, num_classes=num_classes, **kwargs)
    spec = parse_timm_name(name)
    if "preprocessing" not in kwargs:  # the checkpoint's pretrained_cfg, or timm's for the name
        kwargs["preprocessing"] = timm_input_spec(name, checkpoint)
    if dynamic_image_size is not None:
        kwargs["dynamic_image_size"] = dynamic_image_size
    arrays = None if checkpoint is None else read_state_dict(checkpoint)
    if num_classes is None and arrays is not None:
        head = arrays.get("head.weight")
        num_classes = int(head.shape[0]) if head is not None and head.ndim == 2 else 0
    config = timm_config(spec, image_size=image_size, num_classes=num_classes, **kwargs)
    model = build_model(config)
    if arrays is not None:
        _load(model, spec, arrays, checkpoint, config)
        attach_class_names(model, timm_class_names(name, checkpoint))  # when they fit the head
    return model


def timm_config(spec, *, image_size=None, num_classes=None, **kwargs):
    """The `ViTConfig` of a timm architecture (what `from_timm` builds).

    Args:
        spec: a `TimmArchitecture` (`parse_timm_name`) or a timm model name.
        image_size: optional int or (height, width). Defaults to the name's resolution.
        num_classes: optional int. Defaults to timm's default class count for the name;
            0 means no head.
        **kwargs: other `keras_vit.ViT` arguments (they override the table's).

    Returns:
        A `keras_vit.models.config.ViTConfig`.

    Example:

    >>> config = timm_config("vit_small_patch14_reg4_dinov2", num_layers=1)
    >>> config.num_register_tokens, config.include_top, config.image_size
    (4, False, (518, 518))
    """
    check_size_arguments(
        image_size=image_size, num_classes=num_classes, patch_size=kwargs.get("patch_size")
    )
    spec = parse_timm_name(spec) if isinstance(spec, str) else spec
    arguments = dict(spec.arguments)
    num_classes = spec.num_classes if num_classes is None else num_classes
    num_classes, include_top = head_arguments(num_classes, kwargs.pop("include_top", None))
    # A family's arguments that depend on the tag (keras_vit.families: the VLM projector width).
    for layout in timm_layouts_for(None, spec):
        if layout.config_arguments:
            arguments = layout.config_arguments(spec, arguments, kwargs)
    ratio = spec.extras.get("mlp_ratio")
    hidden = kwargs.get("hidden_dim") or arguments.get("hidden_dim")
    hidden = hidden or parse_variant(arguments["variant"])["hidden_dim"]
    map_ratio = spec.extras.get("map_mlp_ratio")  # Perception Encoder core's attention pool
    if map_ratio is not None and kwargs.get("map_mlp_dim") is None:
        arguments["map_mlp_dim"] = int(hidden * map_ratio)
    kv_heads = spec.extras.get("kv_heads")  # Sapiens2: (grouped count, MHA blocks at each end)
    if kv_heads is not None and "num_key_value_heads" not in kwargs:
        arguments["num_key_value_heads"] = _kv_heads(kv_heads, kwargs, arguments)
    if ratio is not None and kwargs.get("mlp_dim") is None:
        # timm: int(hidden * mlp_ratio), also for a hidden_dim override.
        # A packed SwiGLU's ratio counts both halves (timm's SwiGLUPacked fc1).
        halves = 2 if spec.extras.get("mlp_ratio_packed") else 1
        arguments["mlp_dim"] = int(hidden * ratio) // halves
        align = spec.extras.get("mlp_align")  # timm's swiglu_align_to: round up to a multiple
        if align:
            arguments["mlp_dim"] += -arguments["mlp_dim"] % align
    return ViTConfig.from_variant(
        arguments.pop("variant"),
        **{
            "image_size": spec.image_size if image_size is None else image_size,
            "num_classes": num_classes,
            "include_top": include_top,
            "name": spec.name,
            **arguments,
            **kwargs,
        },
    )


def _kv_heads(kv_heads, kwargs, arguments):
    """timm's `_sapiens2_args` rule for the final depth: grouped-query attention with `count`
    key / value heads except in the first and last `full` blocks (None: all heads)."""
    count, full = kv_heads
    layers = kwargs.get("num_layers") or arguments.get("num_layers")
    layers = layers or parse_variant(arguments["variant"])["num_layers"]
    heads = tuple(None if i < full or i >= layers - full else count for i in range(layers))
    return heads if any(heads) else None


def _architecture(name):
    """The architecture of a timm name: no Hub prefix, tag or revision."""
    if not isinstance(name, str):
        return ""
    full = name.strip()
    for prefix in ("hf-hub:", "hf_hub:", "timm/"):
        if full.startswith(prefix):
            full = full[len(prefix) :]
    return full.partition("@")[0].partition(".")[0]


def _describe(checkpoint):
    return "the given state dict" if isinstance(checkpoint, dict) else repr(str(checkpoint))


__all__ = [
    "from_timm",
    "load_timm_weights",
    "timm_config",
    "timm_name_table",
]
