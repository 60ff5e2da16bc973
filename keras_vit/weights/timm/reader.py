"""timm checkpoints -> keras_vit models: `from_timm(name, checkpoint)`.

timm is never imported: our own table of timm's weight names (`timm_name_table`, in
`keras_vit.weights.timm.table`; the architectures a model name means are
`keras_vit.weights.timm.names`' `FAMILIES`), and reads the checkpoint with
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

from keras_vit.models.arguments import check_size_arguments, head_arguments
from keras_vit.models.config import ViTConfig
from keras_vit.models.encoder import build_model
from keras_vit.models.variants import parse_variant
from keras_vit.weights import loading as L
from keras_vit.weights.class_names import attach_class_names
from keras_vit.weights.registry import family_of_timm_name, load_callable, timm_layouts_for
from keras_vit.weights.state_dict import read_state_dict
from keras_vit.weights.timm.hub_checkpoint import hub_checkpoint
from keras_vit.weights.timm.input_spec import timm_class_names, timm_input_spec
from keras_vit.weights.timm.names import parse_timm_name
from keras_vit.weights.timm.pretrained import known_architectures
from keras_vit.weights.timm.stems import batch_norm_counters
from keras_vit.weights.timm.table import fills, timm_name_table

logger = logging.getLogger(__name__)

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
    own = family_of_timm_name(_architecture(name))
    if own is not None:
        raise ValueError(
            f"timm model {name!r} is read by the {own.name!r} family's own reader "
            f"({own.timm_reader}): call keras_vit.from_timm({name!r}, checkpoint) instead."
        )
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
        fills=fills(config, spec),
        skip=_head_skips(arrays, config),
    )


def from_timm(
    name,
    checkpoint=None,
    *,
    pretrained=False,
    revision=None,
    cache_dir=None,
    force_download=False,
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

    Families (timm's numerics; outputs equal timm's within 1e-5 in the tests; one folder each
    under `keras_vit/families/`, and tests/families checks this list against the registry):
    - vit: `vit_*_patch*_*` (original and AugReg, tiny to gigantic, `vit_base_patch16_224_miil`,
      `vit_base_*_plus_*`, `vit_small_patch16_36x1_224`, `vit_*_patch16_18x2_*`,
      `vit_*_patch16_rpn_*`), `deit_*` and distilled `deit_*_distilled_*` (timm's eval output:
      the mean of both heads), DeiT III `deit3_*`, `vit_*_gap_*`, register models
      `vit_*_reg{N}_{gap,map}_*`, DINOv2 (`vit_*_patch14_dinov2`, `vit_*_patch14_reg4_dinov2`;
      giant with its SwiGLU MLP), CLIP / OpenCLIP towers (`vit_*_clip_*`,
      `*_clip_quickgelu_*`), SigLIP towers (`*_siglip_*` with the MAP head, `*_siglip_gap_*`),
      BEiT (`beit_*`, `beitv2_*`) and relpos ViTs (`vit_relpos_*`), EVA-01
      `eva_large_patch14_*`, and the hybrids `vit_tiny_r_s16_p8_*`, `vit_small_r26_s32_*`,
      `vit_base_r26_s32_*`, `vit_base_r50_s16_*`, `vit_large_r50_s32_*`;
    - naflex: FlexiViT `flexivit_*` (use `keras_vit.with_patch_size` for other patch sizes)
      and timm's NaFlex ViTs `naflexvit_*` as NaFlex models (`naflex=True`: a dict input of
      `patches`, `patch_coord`, `patch_valid`, made by `keras_vit.data.naflex_batch`);
    - stems: ResNet-D stems (`vit_*_resnet26d_*`, `vit_*_resnet50d_*`) and MobileCLIP's
      `vit_*_mci_*`;
    - eva: timm's `eva.py`: EVA-02 (`eva02_*`, RoPE + SwiGLU), EVA (`eva_giant_*`), rotary
      register ViTs (`vit_*_rope_reg*_gap_256`), RoPE-ViT
      (`vit_*_patch16_rope*_224`), DINOv3 (`vit_*_patch16_dinov3*`, DINOv3's RoPE:
      `rotary_embedding="dinov3"`), LingBot (`vit_*_lingbot`), Sapiens2 (`vit_*_sapiens2*`);
    - aimv2: `aimv2_*` (RMSNorm, `patch_norm`, SwiGLU, no biases);
    - parallel: parallel-block ViTs (`vit_*_xp_*`, `vit_pwee_*`, differential attention
      `vit_dpwee_*`);
    - pe: Perception Encoder (`vit_pe_*`: 'xy' RoPE, `final_norm=False` for lang / spatial,
      the core towers' attention pool);
    - beit: BEiT-3 (`beit3_*`);
    - radio: C-RADIO (`vit_*_patch16_radio_v*`, `naflexvit_*_radio_v*`; its 128 x 128 table
      resized bilinearly as timm does), TIPSv2 (`vit_*_patch14_reg1_tipsv2`),
      `vit_intern300m_patch14_448`, timm's `test_vit*` models;
    - vlm: the vision towers of Qwen3-VL (`qwen3_vit_*`) and DeepSeek-V4 (`deepseek_vit_*`;
      `_merge` / `_align` / `_enc` keep the projector: `model.merger`, its width from the
      name's tag);
    - gemma4: Gemma 4's vision towers (`gemma4_vit_*`), read by the family's own reader
      (`timm_reader`) into a `keras_vit.families.gemma4.model.Gemma4VisionTower` taking images
      in [0, 1].
    Other timm names (SAM, ...) raise a `ValueError` saying what they need.

    By name (timm's `create_model(name, pretrained=True)`): `pretrained=True` downloads the
    tag's checkpoint from the Hugging Face Hub (the repo `timm/<arch>.<tag>` or the tag's
    `hf_hub_id`, its `model.safetensors`; `"<arch>"` alone means timm's default tag;
    `"hf-hub:<org>/<repo>@<revision>"` any repo in timm's layout, at a pinned revision) through
    `huggingface_hub` (the `hub` extra) into the standard Hugging Face cache, and works
    offline from it (`HF_HUB_OFFLINE=1`). Names are looked up in timm's registry
    (`keras_vit.weights.timm.pretrained`), never parsed for numbers: an unknown one is refused
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
        force_download: bool. With `pretrained=True`: download the files again even when
            they are cached, replacing the cached copies (huggingface_hub's flag, as in
            transformers' `from_pretrained`). Defaults to False.
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
        timm's for the name (`keras_vit.weights.timm.input_spec.timm_input_spec`);
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
    if force_download and not pretrained:
        raise ValueError(
            "force_download=True downloads the name's weights again: it needs pretrained=True "
            f"(without it nothing is downloaded). Received name={name!r}, pretrained=False."
        )
    if pretrained or name.startswith(("hf-hub:", "hf_hub:")):
        name, checkpoint = hub_checkpoint(
            name, checkpoint, pretrained, revision, cache_dir, force_download=force_download
        )
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


def reads_timm_name(name):
    """Whether `from_timm` builds the timm model `name` (with or without tag or Hub prefix).

    True for a name a registered family's own reader takes (`keras_vit.weights.registry`) and
    one `parse_timm_name` parses; False for a name refused (unsupported or unknown).

    >>> reads_timm_name("vit_base_patch16_224.augreg2_in21k_ft_in1k"), reads_timm_name("resnet50")
    (True, False)
    """
    architecture = _architecture(name)
    if family_of_timm_name(architecture) is not None:
        return architecture in known_architectures()
    try:
        parse_timm_name(name)
    except ValueError:
        return False
    return True


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
    "reads_timm_name",
    "timm_config",
    "timm_name_table",
]
