"""What each `ViTConfig` field means, written once: `ViTConfig`'s and `keras_vit.ViT`'s `Args:`.

`OPTIONS` holds one Google-style entry per option (or per group of options documented together:
`"rotary_temperature, rotary_reference_grid, ...: ..."`), in the fields' order. `ViTConfig`'s
docstring shows them all; `keras_vit.ViT`'s shows them all but the few it documents itself (the
sizes, `image_size`, `num_classes`, `name`: there None means "the variant's" or "the preset's"),
with the hybrid ones under its `**hybrid_kwargs` (`args_section`). `tests/models/test_config.py`
checks that every field is in exactly one entry.
"""

import textwrap

OPTIONS = """\
patch_size, num_layers, hidden_dim, mlp_dim, num_heads: the sizes (required; see
    `ViTConfig.from_variant` to take them from a code like `"B/16"`). For hybrids
    `patch_size` applies to the stem's feature map.
image_size: int or (height, width). Input size in pixels. Defaults to 224 (with
    `dynamic_image_size`, the size the position embedding is made for).
num_channels: int. Input channels. Defaults to 3.
dynamic_image_size: bool. The model takes `(B, H, W, C)` images of any size the patch
    divides (input shape `(None, None, C)`), resampling the learned position embedding (made
    for `image_size`) at every call as timm's `dynamic_img_size=True`. Defaults to False.
num_classes: int. Classifier outputs (with `include_top`). Defaults to 1000.
include_top: bool. Whether to add the (pre-logits and) classifier head. Defaults to True.
pooling: `"token"` (class token), `"gap"` (mean of patch tokens), `"map"` (attention pooling
    with a learned query, SigLIP's MAP head: `keras_vit.layers.MAPHead`), `"token_gap"` (class
    token and patch-token mean concatenated, `(B, 2 * D)`: transformers'
    `Dinov2ForImageClassification`) or None (only with `include_top=False`: returns the
    `(B, T, D)` tokens). Defaults to `"token"`.
representation_size: optional int. Adds the pre-logits layer (Dense + tanh) used in
    pre-training. Defaults to None.
classifier_activation: optional activation of the classifier (e.g. `"softmax"`); None returns
    logits. Defaults to None.
fc_norm: bool. Apply the final norm (`fc_norm`) to the pooled vector instead of the token
    sequence (no `encoder_norm` then); timm's GAP models. Defaults to False.
class_token: optional bool. Defaults to None: True unless `pooling` is `"gap"` or `"map"` (the
    official GAP models and SigLIP have no class token), i.e. `pooling in ("token", None)`.
position_embedding: `"learned"`, `"sincos2d"` or None; with `naflex=True` also `"factorized"`
    (a row and a column table, resized linearly). Defaults to `"learned"`.
dropout_rate: float in [0, 1). Dropout after the position embedding and inside every block.
    Defaults to 0.
attention_dropout_rate: float in [0, 1). Dropout on the attention weights. Defaults to 0.
drop_path_rate: float in [0, 1). Stochastic depth of the last block, increasing linearly from
    0 at the first. Defaults to 0.
patch_dropout_rate: float in [0, 1). Patch dropout (FLIP, timm's `patch_drop_rate`): in
    training, each image keeps a random `int(N * (1 - rate))` of its N patch tokens after the
    position embedding (prefix tokens always kept; `keras_vit.layers.TokenDropping`); the
    identity at inference. Defaults to 0.
approximate_gelu: bool. tanh GELU (official) or exact. Defaults to True.
layer_norm_epsilon: float. Epsilon of every norm. Defaults to 1e-6.
layer_scale_init_value: optional float enabling LayerScale. Defaults to None.
remat: bool. Rematerialise every transformer block in the backward pass (gradient
    checkpointing through `keras.remat`): training keeps only each block's input and recomputes
    the rest, for about one more forward pass of compute; outputs and gradients are unchanged.
    A ViT-S/16 step at batch 16 on CPU: peak memory -47% on TensorFlow, -12 to -20% on PyTorch,
    unchanged on JAX, 15-23% slower (see `TransformerBlock`). Defaults to False.
num_register_tokens: int. Learned register tokens after the class (and distillation) token
    (Darcet et al., 2024; timm `reg_tokens`). Defaults to 0.
distillation_token: bool. DeiT's distillation token after the class token; with `include_top`
    a second classifier `head_dist` reads it and the model returns
    `(head(cls) + head_dist(dist)) / 2`; with `include_top=False, pooling="token"` it returns
    `(cls + dist) / 2`. Defaults to False.
prefix_position_embedding: bool. Whether the learned position embedding has rows for the
    prefix (class, distillation, register) tokens, as the original ViT; False adds it to the
    patch tokens only and prepends the prefix tokens afterwards (timm's `no_embed_class=True`:
    DeiT III, register models). Defaults to True.
pre_norm: bool. A norm (`pre_norm`) after the position embedding, before the blocks (CLIP's
    `norm_pre`). Defaults to False.
qk_norm: bool. A norm over the head width on queries and keys in every block (timm
    `qk_norm=True`). Defaults to False.
activation: `"gelu"` (tanh or exact as `approximate_gelu` says) or `"quick_gelu"`
    (`x * sigmoid(1.702 x)`, CLIP). Defaults to `"gelu"`.
key_bias: bool. Whether the attention's key projection has a bias (False: the q/v-only biases
    of BEiT and EVA). Defaults to True.
relative_position_bias: None, `"block"`, `"shared"`, `"mlp"` or `"mlp_shared"`. A relative
    position bias added to the attention logits of every block: BEiT's table
    (`keras_vit.layers.RelativePositionBias`, for a class token) or timm's `RelPosMlp` of
    log-spaced offsets (`keras_vit.layers.RelativePositionMLP`, `vit_relpos_*`,
    `vit_srelpos_*`), one per block or one for all (layer `relative_position_bias`). Made for
    the grid of `image_size`: no register or distillation token, a fixed image size (timm's
    BEiT and relpos ViTs have none either). Defaults to None.
relative_position_mlp_dim: optional int. Hidden width of the `"mlp"` biases; None means timm's
    128 with them. Defaults to None.
block_kind: str. The kind of every transformer block, by value: a key of
    `keras_vit.layers.BLOCK_KINDS`: `"pre"` (`TransformerBlock`, `x + f(LN(x))`, the ViT's),
    `"post"` (`PostNormBlock`, residual post-norm `x + LN(f(x))`: timm's `ResPostBlock` /
    `ResPostRelPosBlock` / `EvaBlockPostNorm`, EVA-02 enormous; no LayerScale),
    `"parallel"` (`ParallelBlock`: `num_parallel` parallel attention and MLP branches, timm's
    `ParallelThingsBlock`, `*_18x2_*`; no relative position bias, SwiGLU, inner norms or
    differential attention) or `"parallel_scaling"` (`ParallelScalingBlock`: timm's
    `ParallelScalingBlock`, ViT-22B's parallel attention and MLP from one norm and one fused
    input projection, `*_xp_*`, `vit_pwee_*`; with differential attention its fused output
    projection, timm's `DiffParallelScalingBlock`; no RoPE, relative position bias, q/v-only
    biases, inner norms, SwiGLU or remat). Earlier versions' `block_norm="post"` and
    `block_type="parallel_scaling"` still work (deprecated) and mean `"post"` and
    `"parallel_scaling"`. Defaults to `"pre"`, or `"parallel"` when `num_parallel > 1`.
num_parallel: int. The branch count of `block_kind="parallel"` (refused above 1 with any other
    kind). Defaults to 2 with `"parallel"`, else 1.
mlp: `"mlp"` (dense, activation, dense) or `"swiglu"` (gated SiLU MLP of hidden width
    `mlp_dim`, `keras_vit.layers.SwiGLU`: EVA-02). Defaults to `"mlp"`.
mlp_inner_norm: bool. A norm on the MLP's hidden activations before its output projection:
    EVA-02's sub-LN in the SwiGLU, or BEiT-3's after the GELU (timm's `scale_mlp_norm`).
    Defaults to False.
attention_inner_norm: bool. EVA-CLIP's LayerNorm over the concatenated heads before each
    attention's output projection. Defaults to False.
rotary_embedding: None, `"eva02"`, `"axial"`, `"mixed"` or `"dinov3"`: 2-D rotary position
    embeddings on the patch queries and keys of every block, computed for the token grid of
    each input (`model.rotary_embedding`; class and register tokens not rotated): EVA-02's
    (`keras_vit.layers.RotaryEmbedding2D`), RoPE-ViT's axial (the same with the column angles
    first: timm's `rope_grid_indexing='xy'`), RoPE-ViT's mixed
    (`keras_vit.layers.MixedRotaryEmbedding`: trainable frequencies per block and head; no
    reference grid or offset), or DINOv3's (`RotaryEmbedding2D(kind="dinov3")`: patch centres
    normalised to [-1, 1], eval mode; no reference grid). Works with or without
    `position_embedding`. Defaults to None.
rotary_temperature, rotary_reference_grid, rotary_grid_offset, rotary_normalize_coords: its
    settings: the temperature (timm's `rope_temperature`; `"mixed"`: of the initial
    frequencies only; DINOv3's checkpoints: 100), an optional int or (rows, columns) grid every
    grid's positions are rescaled to span (timm's `ref_feat_shape`), a float added to the grid
    positions (`rope_grid_offset`), and with `"dinov3"` whether the patch centres are divided
    by each axis's size (`"separate"`) or by the `"min"` / `"max"` of both (DINOv3's
    `normalize_coords`). Default to 10000, None, 0, `"separate"`.
attention_type: `"standard"` or `"differential"` (`keras_vit.layers.DifferentialAttention`:
    timm's `DiffAttention`, `lambda_init` from each block's index; `vit_dwee_*`,
    `vit_dlittle_*`; 2 * `num_heads` must divide `hidden_dim`). Defaults to `"standard"`.
num_key_value_heads: None, an int or one entry (int or None) per block. Grouped-query
    attention (Sapiens2, timm's `num_kv_heads`): the key / value heads of the blocks'
    attention, each shared by `num_heads / num_key_value_heads` consecutive query heads; None
    (or an entry None) is multi-head attention. Defaults to None.
attention_only_layer_scale: bool. With `layer_scale_init_value`, LayerScale on the attention
    branches only (Sapiens2, timm's `attn_only_layer_scale`). Defaults to False.
norm: `"layernorm"` or `"rmsnorm"`: the kind of every norm of the model (blocks, QK / inner
    norms, `pre_norm`, the final norm, `fc_norm`, the MAP head, `patch_norm`); RMSNorm is
    `keras.layers.RMSNormalization` (timm's `RmsNorm`, AIMv2; epsilon `layer_norm_epsilon`
    inside the square root, no bias). Defaults to `"layernorm"`.
patch_norm: bool. A norm (kind `norm`) on the patch embeddings right after the projection,
    before the position embedding (timm's `embed_norm_layer`, AIMv2; layer
    `patch_encoder/patch_norm`). Defaults to False.
final_norm: bool. With `fc_norm=False`, whether a norm (`encoder_norm`) follows the blocks;
    False: none at all (timm's `Eva` with `use_post_transformer_norm=False`,
    `use_fc_norm=False`: Perception Encoder's lang and spatial towers). Defaults to True.
map_num_heads, map_mlp_dim, map_prefix_tokens: with `pooling="map"`, the MAP head's heads and
    MLP width (optional ints; None: `num_heads`, `mlp_dim`), and whether it pools the prefix
    (class, register) tokens too (Perception Encoder core; timm's `Eva` attention pool; False:
    the patch tokens only). Default to None, None, False.
merger_size, merger_dim, merger_hidden_dim, merger_norm, merger_padding: a VLM projector
    (`model.merger`, `keras_vit.layers.PatchMerger`, `keras_vit.models.merger`) after the
    blocks, before the pooling: each `merger_size` squared block of patch tokens merged into one
    token of width `merger_dim` (`fc1` width `merger_hidden_dim`, None:
    `merger_size ** 2 * hidden_dim`; a norm before the merge; the grid zero-padded to a
    multiple). No prefix tokens; `pooling` `"gap"` or None (the merged tokens: Qwen3-VL's
    merger, DeepSeek-V4's aligner). Default to None, None, None, False, False (none).
final_and_fc_norm: bool. With `fc_norm`, keep the final norm too (DeepSeek-V4's
    classifiers). Defaults to False.
resnet_units: optional sequence of int: a BiT ResNet stem with these units per stage (e.g.
    `(1, 1)` for tests, `()` for the root only); stage 1 has stride 1 and every later stage
    stride 2, after the root's stride 4. A hybrid code (`"R50+B/16"`) sets it. Defaults to
    None (no ResNet stem).
resnet_width: optional int. Root width of the ResNet stem (64 = the official width factor 1);
    stage `s` has bottleneck width `resnet_width * 2**(s-1)` and outputs 4x that. None means 64
    with a ResNet stem. Defaults to None.
resnet_groups: optional int. GroupNorm groups of the ResNet stem (32 in the official models);
    must divide `resnet_width`. None means 32 with a ResNet stem. Defaults to None.
resnet_conv_epsilon, resnet_conv_epsilon_mode, resnet_norm_epsilon: the stem's numerics:
    `StdConv2D`'s weight standardisation `epsilon` (optional float) and `epsilon_mode` (`"std"`:
    added to the standard deviation, or `"variance"`: under the square root), and the GroupNorm
    epsilon (optional float). None means the official 1e-5, `"std"`, 1e-6; timm's hybrids use
    1e-8, `"variance"`, 1e-5 (`keras_vit.from_timm` sets them). Default to None.
backbone: optional Keras model mapping `(B, H, W, C)` images to one rank-4 `(B, h, w, c)`
    feature map (a functional CNN, or a `keras.applications` model with `include_top=False`),
    used as the stem instead of a ResNet; its static output grid sets the token grid (with
    `patch_size` applied to it: use a hybrid code or `patch_size=1` for one token per
    feature-map cell). Defaults to None.
stem: None, `"bit"`, `"resnet_d"` or `"conv"`: the CNN stem. `"bit"` (what None means with
    `resnet_units`) is the BiT ResNetV2 (`keras_vit.layers.resnet_stem`); `"resnet_d"` timm's
    ResNet-D (`keras_vit.layers.resnet_d_stem`: deep root, BatchNorm, average-pool shortcuts;
    `resnet_units`, `resnet_width`, `resnet_norm_epsilon` (None: timm's 1e-5) apply); `"conv"`
    MobileCLIP's non-overlapping conv -> BatchNorm -> GELU layers (`keras_vit.layers.conv_stem`,
    `stem_widths`, `stem_strides`; no `resnet_*`). Defaults to None.
stem_widths, stem_strides: optional sequences of int, one per convolution of the `"conv"`
    stem: its output channels and its kernel size = stride. Default to None.
naflex: bool. A NaFlex model (NaViT / SigLIP 2, timm's `NaFlexVit`): its input is a dict of
    `patches` `(B, N, ph * pw * C)`, `patch_coord` `(B, N, 2)` int `(y, x)` and `patch_valid`
    `(B, N)` bool (`keras_vit.data.naflex_batch` makes one from images of any sizes), each image
    at its own grid; the position embedding (grid `image_size / patch_size`, patches only: the
    prefix tokens get none; or `position_embedding="factorized"`) is resized per image,
    attention and pooling ignore padding; a `rotary_embedding` is computed per token from its
    coordinates and its image's grid (`keras_vit.layers.NaFlexRotaryEmbedding`). Defaults to
    False.
position_embedding_interpolation, position_embedding_antialias,
    position_embedding_align_corners, position_embedding_aspect_preserving: NaFlex's per-image
    resize of the position table: `"bicubic"` or `"bilinear"`, antialiased, align_corners
    (only without antialias), resized to the longer side's square then the top-left block kept
    (timm's `pos_embed_ar_preserving`). Default to timm's `"bicubic"`, True, False, False. The
    first three also apply to the resize at every call of `dynamic_image_size` (Qwen3-VL:
    bilinear, align_corners).
preprocessing: None, a dict or a `keras_vit.models.PreprocessingConfig`: the model's input
    spec (mean, std, scale, interpolation, crop_pct, crop_mode, resize), saved with it and read
    by `model.preprocessor`, the pipelines and the exports; stored as a `PreprocessingConfig`.
    Defaults to None: the official `[-1, 1]` (`x / 127.5 - 1`).
class_names: optional sequence of str, one per class of the head: the checkpoint's labels
    (transformers' `id2label`, timm's label set), saved with the model and named by
    `keras_vit.decode_predictions(..., model=model)`. Defaults to None.
name: optional Keras model name. Defaults to None.
"""


def entries(text=OPTIONS):
    """`[(names, entry text)]` of `text`: an entry starts at column 0 with `name[, name...]:`
    (a head too long for one line continues, indented, up to its colon)."""
    found = []
    for line in text.splitlines():
        if line and not line.startswith(" "):
            found.append([line])
        else:
            found[-1].append(line)
    for lines in found:
        head = " ".join(line.strip() for line in lines).split(":", 1)[0]
        names = tuple(name.strip() for name in head.split(",") if name.strip())
        yield names, "\n".join(lines)


def documented_names(text=OPTIONS):
    """Every name of an entry head, in order (a name twice: documented twice)."""
    return [name for names, _ in entries(text) for name in names]


def args_section(indent, *, only=None, leave_out=()):
    """The entries (those naming only fields of `only`, None: all; none of `leave_out`) as
    `Args:` lines indented by `indent` spaces."""
    kept = [
        entry
        for names, entry in entries()
        if (only is None or set(names) <= set(only)) and not set(names) & set(leave_out)
    ]
    return textwrap.indent("\n".join(kept), " " * indent)
