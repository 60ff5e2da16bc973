"""`ViT(...)`: the Vision Transformer builder (plain and hybrid) and the named ones.

`ViT` turns its arguments into one `keras_vit.models.config.ViTConfig` and builds it with
`keras_vit.models.encoder.build_model` (a `VisionTransformer`); hybrid codes only change the
stem. Preset names in `weights=` are resolved through `keras_vit.models.pretrained`.
"""

from keras_vit.models import pretrained, variants
from keras_vit.models.arguments import check_size_arguments, nearest_keys
from keras_vit.models.config import HYBRID_KWARGS, ViTConfig
from keras_vit.models.encoder import build_model

__all__ = [
    "ViT",
    "ViTB8",
    "ViTB16",
    "ViTB32",
    "ViTH14",
    "ViTL16",
    "ViTL32",
    "ViTS16",
    "ViTS32",
    "ViTTi16",
    "named_builder",
]


def ViT(
    variant="B/16",
    *,
    image_size=None,
    num_classes=None,
    include_top=True,
    weights=None,
    num_channels=3,
    pooling="token",
    representation_size=None,
    classifier_activation=None,
    dropout_rate=0.0,
    attention_dropout_rate=0.0,
    drop_path_rate=0.0,
    patch_dropout_rate=0.0,
    approximate_gelu=True,
    layer_norm_epsilon=1e-6,
    layer_scale_init_value=None,
    remat=False,
    position_embedding="learned",
    class_token=None,
    num_register_tokens=0,
    distillation_token=False,
    prefix_position_embedding=True,
    pre_norm=False,
    qk_norm=False,
    fc_norm=False,
    activation="gelu",
    # EVA / EVA-02 / rotary ViTs (issue 30, families)
    mlp="mlp",
    mlp_inner_norm=False,
    attention_inner_norm=False,
    rotary_embedding=None,
    rotary_temperature=10000.0,
    rotary_reference_grid=None,
    rotary_grid_offset=0.0,
    rotary_normalize_coords="separate",
    block_norm="pre",
    # timm's ParallelScalingBlock and differential attention (issue 30, parallel)
    block_type="standard",
    attention_type="standard",
    num_key_value_heads=None,
    attention_only_layer_scale=False,
    # RMSNorm and the patch-embedding norm (issue 30: AIMv2, Perception Encoder)
    norm="layernorm",
    patch_norm=False,
    final_norm=True,
    map_num_heads=None,
    map_mlp_dim=None,
    map_prefix_tokens=False,
    # VLM vision towers (Qwen3-VL, DeepSeek-V4)
    merger_size=None,
    merger_dim=None,
    merger_hidden_dim=None,
    merger_norm=False,
    merger_padding=False,
    final_and_fc_norm=False,
    dynamic_image_size=False,
    key_bias=True,
    relative_position_bias=None,
    relative_position_mlp_dim=None,
    num_parallel=1,
    naflex=False,
    position_embedding_interpolation="bicubic",
    position_embedding_antialias=True,
    position_embedding_align_corners=False,
    position_embedding_aspect_preserving=False,
    num_layers=None,
    hidden_dim=None,
    mlp_dim=None,
    num_heads=None,
    patch_size=None,
    preprocessing=None,
    class_names=None,
    name=None,
    **hybrid_kwargs,
):
    """Builds a (plain or hybrid) Vision Transformer, a `VisionTransformer` model.

    Args:
        variant: str. Size and patch code: `"Ti/16"`, `"S/16"`, `"S/32"`,
            `"B/8"`, `"B/16"`, `"B/32"`, `"L/16"`, `"L/32"`, `"H/14"` (any
            size with any patch works, plus `"mu"` for tests), or a hybrid
            code `"R{depth}+SIZE/STRIDE"`: `"R50+B/16"`, `"R50+L/32"`,
            `"R26+S/32"`, `"R26+B/32"`, `"R+Ti/16"` (official, see
            `keras_vit.models.variants.OFFICIAL_HYBRIDS`) or e.g. `"R26+B/64"`;
            a plain code with `resnet_units` or `backbone` also makes a hybrid.
            Defaults to `"B/16"`.
        image_size: int or (height, width). Input size in pixels. Defaults to
            224, or the resolution of the preset named by `weights`.
        num_classes: int. Classifier outputs (with `include_top`). Defaults to
            1000, or the class count of the preset named by `weights`.
        include_top: bool. Whether to add the (pre-logits and) classifier head.
            Defaults to True.
        weights: None, a preset name for this variant (`"imagenet21k"`,
            `"imagenet21k+imagenet2012"`, `"augreg_in21k"`,
            `"augreg_in21k_ft_in1k"`, ...; see `keras_vit.list_presets(variant)`),
            or a path to an official `.npz` checkpoint or a `.weights.h5` file.
            A preset is downloaded once into the Keras cache (base URL from
            `$KERAS_VIT_WEIGHTS_URL`) and loaded strictly; the model takes the
            preset's image size and class count unless given. Given another
            class count, the head is new (zeros) and `pre_logits` is dropped
            unless `representation_size` is set; with the preset's own class
            count, an ImageNet-21k original keeps its `pre_logits`. Given
            another image size, the position embedding is resampled.
            Defaults to None.
        num_channels: int. Input channels. Defaults to 3.
        pooling: `"token"` (class token), `"gap"` (mean of patch tokens),
            `"map"` (attention pooling with a learned query, SigLIP's MAP head:
            `keras_vit.layers.MAPHead`), `"token_gap"` (class token and patch-token
            mean concatenated, `(B, 2 * D)`: transformers'
            `Dinov2ForImageClassification`) or None (only with `include_top=False`:
            returns the `(B, T, D)` tokens). Defaults to `"token"`.
        representation_size: optional int. Adds the pre-logits layer
            (Dense + tanh) used in pre-training. Defaults to None.
        classifier_activation: optional activation of the classifier (e.g.
            `"softmax"`); None returns logits. Defaults to None.
        dropout_rate: float in [0, 1). Dropout after the position embedding and
            inside every block. Defaults to 0.
        attention_dropout_rate: float in [0, 1). Defaults to 0.
        drop_path_rate: float in [0, 1). Stochastic depth of the last block,
            increasing linearly from 0 at the first. Defaults to 0.
        patch_dropout_rate: float in [0, 1). Patch dropout (FLIP, timm's
            `patch_drop_rate`): in training, each image keeps a random
            `int(N * (1 - rate))` of its N patch tokens after the position
            embedding (prefix tokens always kept; `keras_vit.layers.TokenDropping`);
            the identity at inference. Defaults to 0.
        approximate_gelu: bool. tanh GELU (official) or exact. Defaults to True.
        layer_norm_epsilon: float. Defaults to 1e-6.
        layer_scale_init_value: optional float enabling LayerScale. Defaults to None.
        remat: bool. Rematerialise every transformer block in the backward
            pass (gradient checkpointing through `keras.remat`): training keeps
            only each block's input and recomputes the rest, for about one more
            forward pass of compute; outputs and gradients are unchanged. A
            ViT-S/16 step at batch 16 on CPU: peak memory -47% on TensorFlow,
            -12 to -20% on PyTorch, unchanged on JAX, 15-23% slower (see
            `TransformerBlock`).
            Defaults to False.
        position_embedding: `"learned"`, `"sincos2d"` or None. Defaults to `"learned"`.
        class_token: optional bool; defaults to True unless `pooling` is `"gap"`
            or `"map"` (the official GAP models and SigLIP have no class token).
        num_register_tokens: int. Learned register tokens after the class
            (and distillation) token (Darcet et al., 2024; timm `reg_tokens`).
            Defaults to 0.
        distillation_token: bool. DeiT's distillation token after the class
            token; with `include_top` a second classifier `head_dist` reads it
            and the model returns `(head(cls) + head_dist(dist)) / 2`; with
            `include_top=False, pooling="token"` it returns
            `(cls + dist) / 2`. Defaults to False.
        prefix_position_embedding: bool. Whether the learned position
            embedding has rows for the prefix (class, distillation, register)
            tokens, as the original ViT; False adds it to the patch tokens only
            and prepends the prefix tokens afterwards (timm's
            `no_embed_class=True`: DeiT III, register models). Defaults to True.
        pre_norm: bool. A LayerNorm (`pre_norm`) after the position embedding,
            before the blocks (CLIP's `norm_pre`). Defaults to False.
        qk_norm: bool. LayerNorm over the head width on queries and keys in
            every block (timm `qk_norm=True`). Defaults to False.
        fc_norm: bool. Apply the final LayerNorm (`fc_norm`) to the pooled
            vector instead of the token sequence (no `encoder_norm` then);
            timm's GAP models. Defaults to False.
        activation: `"gelu"` (tanh or exact as `approximate_gelu` says) or
            `"quick_gelu"` (`x * sigmoid(1.702 x)`, CLIP). Defaults to `"gelu"`.
        mlp: `"mlp"` or `"swiglu"` (gated SiLU MLP of hidden width `mlp_dim`,
            `keras_vit.layers.SwiGLU`: EVA-02). Defaults to `"mlp"`.
        mlp_inner_norm: bool. A norm on the MLP's hidden activations: EVA-02's
            inside the SwiGLU, BEiT-3's after the GELU. Defaults to False.
        attention_inner_norm: bool. EVA-CLIP's LayerNorm over the heads before
            each attention's output projection. Defaults to False.
        rotary_embedding: None, `"eva02"`, `"axial"`, `"mixed"` or `"dinov3"`: 2-D
            rotary position embeddings on the patch queries and keys, computed for the
            grid of each input (`model.rotary_embedding`): EVA-02's
            (`keras_vit.layers.RotaryEmbedding2D`), RoPE-ViT's axial one (the same
            with column angles first, timm's `rope_grid_indexing='xy'`), RoPE-ViT's
            mixed one (learned frequencies per block and head,
            `keras_vit.layers.MixedRotaryEmbedding`) or DINOv3's (patch centres
            normalised to [-1, 1]). Defaults to None.
        rotary_temperature, rotary_reference_grid, rotary_grid_offset,
            rotary_normalize_coords: its settings (timm's `rope_temperature`,
            `ref_feat_shape`, `rope_grid_offset`, DINOv3's `normalize_coords`;
            `"mixed"`: the temperature of the initial frequencies only). Default to
            10000, None, 0, `"separate"`.
        block_norm: `"pre"` or `"post"`: residual post-norm blocks
            (`x + LN(f(x))`, timm's `ResPostBlock`, EVA-02 enormous). Defaults to
            `"pre"`.
        block_type: `"standard"` or `"parallel_scaling"`: timm's `ParallelScalingBlock`
            (`keras_vit.layers.ParallelScalingBlock`: ViT-22B's parallel attention and MLP
            with fused projections; `*_xp_*`, `vit_pwee_*`). Defaults to `"standard"`.
        attention_type: `"standard"` or `"differential"`: timm's `DiffAttention`
            (`keras_vit.layers.DifferentialAttention`; `vit_dwee_*`, `vit_dlittle_*`, and
            with `"parallel_scaling"` timm's `DiffParallelScalingBlock`). Defaults to
            `"standard"`.
        num_key_value_heads: None, an int, or one entry (int or None) per block:
            grouped-query attention (Sapiens2), the key / value heads shared by groups of
            `num_heads / num_key_value_heads` query heads; None is multi-head attention.
            Defaults to None.
        attention_only_layer_scale: bool. LayerScale on the attention branches only
            (Sapiens2). Defaults to False.
        norm: `"layernorm"` or `"rmsnorm"`: the kind of every norm of the model
            (`keras.layers.RMSNormalization`, timm's `RmsNorm`: AIMv2). Defaults
            to `"layernorm"`.
        patch_norm: bool. A norm (kind `norm`) on the patch embeddings before
            the position embedding (timm's `embed_norm_layer`: AIMv2). Defaults
            to False.
        final_norm: bool. Whether a norm follows the blocks (without `fc_norm`);
            False: none (Perception Encoder's lang / spatial towers). Defaults to True.
        map_num_heads, map_mlp_dim, map_prefix_tokens: the MAP head's heads and
            MLP width (None: `num_heads`, `mlp_dim`), and whether it pools the
            prefix tokens too (Perception Encoder core). Default to None, None,
            False.
        merger_size, merger_dim, merger_hidden_dim, merger_norm, merger_padding:
            a VLM projector (`model.merger`, `keras_vit.layers.PatchMerger`) after
            the blocks, before the pooling: each `merger_size` squared block of
            patch tokens merged into one token of width `merger_dim` (`fc1` width
            `merger_hidden_dim`, None: `merger_size ** 2 * hidden_dim`; a norm
            before the merge; the grid zero-padded to a multiple). No prefix
            tokens; `pooling` `"gap"` or None (the merged tokens: Qwen3-VL's
            merger, DeepSeek-V4's aligner). Default to None, None, None, False,
            False (none).
        final_and_fc_norm: bool. With `fc_norm`, keep the final norm too
            (DeepSeek-V4's classifiers). Defaults to False.
        dynamic_image_size: bool. The model takes `(B, H, W, C)` images of any
            size the patch divides (input shape `(None, None, C)`), resampling
            the learned position embedding (made for `image_size`) at every
            call as timm's `dynamic_img_size=True`. Defaults to False.
        key_bias: bool. Whether the attention's key projection has a bias;
            False gives BEiT's and EVA's q/v-only biases. Defaults to True.
        relative_position_bias: None, `"block"`, `"shared"`: BEiT's learned
            relative position bias in every block's attention (a table per
            block, or one shared table), for the grid of `image_size` and a
            class token (no registers, fixed image size); `"mlp"` /
            `"mlp_shared"`: timm's `RelPosMlp` of log-spaced offsets
            (`vit_relpos_*`, `vit_srelpos_*`). Defaults to None.
        relative_position_mlp_dim: optional int. Hidden width of the `"mlp"`
            biases (None: 128). Defaults to None.
        num_parallel: int. Parallel attention and MLP branches per block
            (timm's `ParallelThingsBlock`, `*_18x2_*`). Defaults to 1.
        naflex: bool. A NaFlex model (NaViT / SigLIP 2, timm's `NaFlexVit`): the
            input is a dict of `patches` `(B, N, ph * pw * C)`, `patch_coord`
            `(B, N, 2)` int `(y, x)` and `patch_valid` `(B, N)` bool
            (`keras_vit.data.naflex_batch` makes one from images of any sizes);
            each image's position embedding (a table for `image_size`, or
            `position_embedding="factorized"`) is resized to its own grid and
            padding is masked in attention and pooling. Defaults to False.
        position_embedding_interpolation, position_embedding_antialias,
            position_embedding_align_corners, position_embedding_aspect_preserving:
            NaFlex's per-image resize of the position table: `"bicubic"` or
            `"bilinear"`, antialiased, align_corners (without antialias),
            resized to the longer side's square then cropped (timm's
            `pos_embed_ar_preserving`). Default to timm's `"bicubic"`, True,
            False, False. The first three also apply to the resize at every
            call of `dynamic_image_size` (Qwen3-VL: bilinear, align_corners).
        preprocessing: None, a dict or a `keras_vit.models.PreprocessingConfig`: the
            model's input spec (mean, std, scale, interpolation, crop_pct, crop_mode,
            resize), saved with it and read by `model.preprocessor`, the pipelines and the
            exports. Defaults to None: the official `[-1, 1]`.
        class_names: optional sequence of str, one per class (saved with the model;
            `keras_vit.decode_predictions(..., model=model)`). Defaults to None.
        num_layers, hidden_dim, mlp_dim, num_heads, patch_size: override the
            variant's numbers.
        name: optional model name; defaults to e.g. `"vit_b16"`.
        **hybrid_kwargs: the stem of a hybrid (Sec. 3.1, Hybrid Architecture):
            resnet_units: optional sequence of int. Units per ResNet stage,
                overriding the code's (e.g. `(1, 1)` for tests, `()` for the root
                only). Stage 1 has stride 1 and every later stage stride 2,
                after the root's stride 4.
            resnet_width: int. Root width of the ResNet (64 = the official width
                factor 1); stage `s` has bottleneck width `resnet_width * 2**(s-1)`
                and outputs 4x that. Defaults to 64.
            resnet_groups: int. GroupNorm groups in the ResNet (32 in the
                official models); must divide `resnet_width`. Defaults to 32.
            resnet_conv_epsilon, resnet_conv_epsilon_mode, resnet_norm_epsilon:
                the stem's numerics: `StdConv2D` `epsilon` / `epsilon_mode` and
                the GroupNorm epsilon. Default to the official 1e-5, `"std"`,
                1e-6 (timm's hybrids: 1e-8, `"variance"`, 1e-5;
                `keras_vit.from_timm` sets them).
            backbone: optional Keras model mapping `(B, H, W, C)` images to one
                rank-4 `(B, h, w, c)` feature map (a functional CNN, or a
                `keras.applications` model with `include_top=False`), used
                instead of the ResNet stem; its static output grid sets the
                token grid (with the variant's `patch_size` applied to it: use a
                hybrid code or `patch_size=1` for one token per feature-map cell).

    Returns:
        A `keras_vit.models.VisionTransformer` (a functional `keras.Model`) taking
        `(B, H, W, C)` images in [-1, 1] (see `keras_vit.preprocess_input`); its
        parts by role: `model.patch_encoder`, `model.blocks`, `model.head`, ...;
        ResNet layers are named like the official checkpoint (`conv_root`,
        `gn_root`, `block1_unit1_conv1`, ...).

    Example:

    >>> model = ViT("mu/8", image_size=32, num_classes=10)
    >>> model.output_shape
    (None, 10)
    >>> hybrid = ViT("mu/1", resnet_units=(1, 1), resnet_width=8,
    ...     resnet_groups=4, image_size=32, num_classes=10)
    >>> hybrid.patch_encoder.grid_size
    (4, 4)

    Reference:
        Dosovitskiy et al., 2021, "An Image is Worth 16x16 Words", Sec. 3.1.
    """
    # Every argument but these is a ViTConfig field: the signature above is the one list.
    arguments = dict(locals())
    del arguments["variant"], arguments["weights"], arguments["hybrid_kwargs"]
    unknown = sorted(set(hybrid_kwargs) - set(HYBRID_KWARGS))
    if unknown:
        valid = [*ViTConfig.field_names(), "variant", "weights"]
        raise TypeError(
            f"ViT() got unexpected keyword arguments {unknown}{nearest_keys(unknown, valid)}. "
            f"Hybrid arguments are {list(HYBRID_KWARGS)}."
        )
    check_size_arguments(
        image_size=image_size, num_classes=num_classes, patch_size=arguments.get("patch_size")
    )
    weights, arguments = pretrained.resolve_arguments(variant, weights, arguments)
    config = ViTConfig.from_variant(variant, **arguments, **hybrid_kwargs)
    return build_model(config, weights)


_BUILDER_DOC = (
    "Builds ViT-{code} ({layers} layers, hidden {hidden}, MLP {mlp}, {heads} heads{extra}).\n"
    """
    A one-line wrapper of `keras_vit.ViT("{code}", **kwargs)`; every argument of
    `ViT` except `variant` is accepted (`image_size`, `num_classes`,
    `include_top`, `weights`, `pooling`, `representation_size`,
    `classifier_activation`, dropout rates, size overrides, ...).

    Returns:
        A `VisionTransformer` named `"{name}"`.

    Example:

    >>> model = {fn}(image_size={demo_size}, num_layers=1, include_top=False,
    ...     pooling="gap")  # doctest: +SKIP

    Reference:
        Dosovitskiy et al., 2021, Table 1{ref}.
    """
)


def named_builder(code, module=__name__):
    """The one-line builder `fn(**kwargs) -> ViT(code, **kwargs)`, named and documented.

    `named_builder("B/16")` is `ViTB16`: the name is `"ViT"` + the code without `/` and `+`.

    Args:
        code: str. The variant code, e.g. `"B/16"` or `"R50+B/16"`.
        module: str. The module the builder is listed in. Defaults to this one.

    Returns:
        A function taking every argument of `ViT` except `variant`.
    """

    def builder(**kwargs):
        return ViT(code, **kwargs)

    config = variants.parse_variant(code)
    hybrid = "resnet_units" in config
    builder.__name__ = builder.__qualname__ = "ViT" + code.replace("/", "").replace("+", "")
    builder.__module__ = module
    builder.__doc__ = _BUILDER_DOC.format(
        code=code,
        fn=builder.__name__,
        name=variants.model_name(code),
        layers=config["num_layers"],
        hidden=config["hidden_dim"],
        mlp=config["mlp_dim"],
        heads=config["num_heads"],
        extra=f", BiT ResNet stem {config['resnet_units']}" if hybrid else "",
        demo_size=64 if hybrid else 32,
        ref=" and Sec. 3.1 (Hybrid Architecture)" if hybrid else "",
    )
    return builder


ViTTi16 = named_builder("Ti/16")
ViTS16 = named_builder("S/16")
ViTS32 = named_builder("S/32")
ViTB8 = named_builder("B/8")
ViTB16 = named_builder("B/16")
ViTB32 = named_builder("B/32")
ViTL16 = named_builder("L/16")
ViTL32 = named_builder("L/32")
ViTH14 = named_builder("H/14")
