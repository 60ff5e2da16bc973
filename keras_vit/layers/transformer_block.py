"""`TransformerBlock`: the pre-norm encoder block of ViT (the paper's Eq. 2-3)."""

import inspect

import keras

from keras_vit.layers._checks import check_bool, check_layer_scale, check_positive_int
from keras_vit.layers._token_mixer import BLOCK_CONFIG, config_values
from keras_vit.layers.block_base import BLOCK_NORMS, COMMON_ARGUMENTS, EncoderBlock
from keras_vit.layers.block_kinds import register_block_kind
from keras_vit.layers.differential_attention import check_attention_type
from keras_vit.layers.parallel_block import ParallelBlock
from keras_vit.layers.post_norm_block import PostNormBlock

__all__ = ["TransformerBlock"]


@register_block_kind("pre")
@keras.saving.register_keras_serializable(package="keras_vit")
class TransformerBlock(EncoderBlock):
    """Pre-norm Transformer encoder block: `x + MSA(LN(x))`, then `x + MLP(LN(x))`.

    Weights are laid out as in the official checkpoints: the attention is a
    `keras_vit.layers.MultiHeadSelfAttention` (the layout and attribute names of
    `keras.layers.MultiHeadAttention`, which earlier versions used: their `.keras`
    files load unchanged) whose query/key/value kernels are `(D, heads, D / heads)`
    and output kernel `(heads, D / heads, D)`. Sublayer names map one to one to the
    official ones: `attention_norm` (LayerNorm_0), `attention`
    (MultiHeadDotProductAttention_1), `mlp_norm` (LayerNorm_2), `mlp_dense_1` /
    `mlp_dense_2` (MlpBlock_3/Dense_0, Dense_1). With `qk_norm`, `attention` also
    holds `query_norm` and `key_norm` (timm's `attn.q_norm`, `attn.k_norm`).

    The sublayers are created in `build()` rather than `__init__()` because the
    attention's per-head width depends on the input width D.

    On the PyTorch backend the block computes with the same variables through
    plain `torch.nn.functional` calls (`F.layer_norm`, `F.linear`,
    `F.scaled_dot_product_attention`, `F.gelu`) without a Keras call per sublayer
    (`keras_vit/layers/_torch_kernels.py`): the same outputs, gradients and dropout
    draws as the `keras.ops` path, at a fraction of its per-step host cost.
    `KERAS_VIT_TORCH_KERNELS=0` (read at import) or
    `keras_vit.layers.attention.portable_path()` keeps the `keras.ops` path.

    Args:
        num_heads: int. Number of attention heads; must divide the input width.
        mlp_dim: int. Hidden width of the MLP.
        dropout_rate: float in [0, 1). Dropout after the attention output and
            after each MLP dense layer. Defaults to 0.
        attention_dropout_rate: float in [0, 1). Dropout on the attention
            weights. Defaults to 0.
        drop_path_rate: float in [0, 1). Stochastic-depth rate of both residual
            branches. Defaults to 0.
        layer_norm_epsilon: float. Defaults to 1e-6 (official).
        approximate_gelu: bool. tanh-approximated GELU (official, Flax default)
            when True, exact erf GELU when False. Defaults to True.
        layer_scale_init_value: optional float. When set, each residual branch
            is multiplied by a learned per-channel scale initialised to it
            (LayerScale, Touvron et al. 2021). Defaults to None (off).
        remat: bool. Rematerialise the block in the backward pass
            (`keras.remat`: `jax.checkpoint`, `tf.recompute_grad`,
            `torch.utils.checkpoint`): only the block's input is kept for the
            gradient and its activations are recomputed in the backward pass,
            for about one more forward pass of compute. Same outputs and
            gradients (JAX and PyTorch replay the dropout and drop-path masks).
            Measured on CPU for a ViT-S/16 step at batch 16
            (benchmarks/RESULTS.md): peak memory -47% on TensorFlow, -12 to
            -20% on PyTorch, unchanged on JAX (XLA on CPU keeps the same
            buffers), at 15-23% lower speed. Needs Keras >= 3.9. On
            TensorFlow, training with dropout or drop path runs without remat
            (with a warning), because `tf.recompute_grad` would redraw the
            masks. On JAX on CPU, remat under `mixed_float16` fails in XLA
            ("The precision 'F16_F16_F32' is not supported by dot_general on
            CPU"; Keras' own `MultiHeadAttention` under `keras.remat` fails the
            same way): use `mixed_bfloat16` there. Defaults to False.
        qk_norm: bool. LayerNorm (epsilon `layer_norm_epsilon`) over the head width
            on the queries and keys before the dot product, as timm's
            `qk_norm=True`. Defaults to False.
        activation: `"gelu"` (tanh or exact as `approximate_gelu` says) or
            `"quick_gelu"` (`x * sigmoid(1.702 x)`, CLIP). Defaults to `"gelu"`.
        mlp: `"mlp"` (`mlp_dense_1`, activation, `mlp_dense_2`) or `"swiglu"` (a
            `keras_vit.layers.SwiGLU` named `mlp` of hidden width `mlp_dim`: EVA-02,
            DINOv2-giant; `activation` and `approximate_gelu` then unused). Defaults to `"mlp"`.
        mlp_inner_norm: bool. A norm on the MLP's hidden activations before its output
            projection: EVA-02's sub-LN in the SwiGLU (timm's `scale_mlp`), or with
            `mlp="mlp"` BEiT-3's (timm's `scale_mlp_norm`: `mlp_inner_norm` after the
            activation and dropout). Defaults to False.
        key_bias: bool. Whether the attention's key projection has a bias (False: BEiT's and
            EVA's q/v-only biases). Defaults to True.
        attention_inner_norm: bool. EVA-CLIP's LayerNorm over the concatenated heads before
            the attention's output projection (`attention/inner_norm`). Defaults to False.
        relative_position_grid: optional (rows, columns). BEiT's per-block relative position
            bias for a class token and this patch grid: a
            `keras_vit.layers.RelativePositionBias` sublayer `relative_position_bias` (timm's
            `attn.relative_position_bias_table`) added to the attention logits. Defaults to
            None (none).
        relative_position_mlp_dim: optional int. With `relative_position_grid`, timm's
            `RelPosMlp` of this hidden width instead of BEiT's table (a
            `keras_vit.layers.RelativePositionMLP`, zero bias for the prefix tokens; the
            `vit_relpos_*` models). Defaults to None (BEiT's table).
        num_parallel: int. Must be 1 (the default). Earlier versions took `num_parallel > 1`
            for timm's `ParallelThingsBlock`, now `keras_vit.layers.ParallelBlock`:
            `TransformerBlock(num_parallel=n)` (and a saved `TransformerBlock` config with it)
            still makes that `ParallelBlock`, with the same sublayers and weights.
        norm: `"layernorm"` or `"rmsnorm"` (`keras.layers.RMSNormalization`, timm's
            `RmsNorm`: AIMv2): the kind of every norm of the block (`attention_norm`,
            `mlp_norm`, the QK, attention inner and SwiGLU inner norms). RMSNorm blocks take
            the portable path on PyTorch. Defaults to `"layernorm"`.
        block_norm: `"pre"` (the default, `x + f(LN(x))`). Earlier versions took `"post"`
            for residual post-norm, now `keras_vit.layers.PostNormBlock`:
            `TransformerBlock(block_norm="post")` (and a saved config with it) still makes
            that `PostNormBlock`, with the same sublayers and weights.
        attention_type: `"standard"` or `"differential"` (`attention` is a
            `keras_vit.layers.DifferentialAttention`: timm's `attn_layer='diff'`; portable
            path; no rotary embedding, relative position bias, parallel branches, q/v-only
            biases or inner norm with it). Defaults to `"standard"`.
        block_index: int. The block's depth index (differential attention's `lambda_init`).
            Defaults to 0.

        num_key_value_heads: optional int. Grouped-query attention (Sapiens2): the key and
            value heads of `attention`, each shared by `num_heads / num_key_value_heads` query
            heads (`keras_vit.layers.MultiHeadSelfAttention`). Defaults to None (all heads).
        attention_only_layer_scale: bool. With `layer_scale_init_value`, LayerScale on the
            attention branch only (`attention_scale`; no `mlp_scale`: timm's
            `attn_only_layer_scale`, Sapiens2). Defaults to False.

    Call arguments:
        inputs: `(B, T, D)` tokens.
        training: bool, whether dropout and drop path are active.
        rotary_embedding: optional `(N, 2 * head_dim)` rotary embedding
            (`keras_vit.layers.RotaryEmbedding2D`) for the last N tokens' queries and keys,
            or `(N, heads, 2 * head_dim)` (one per head, `MixedRotaryEmbedding`).
        attention_bias: optional additive attention bias broadcastable to
            `(B, heads, T, T)` (a shared `keras_vit.layers.RelativePositionBias` output),
            added to the block's own relative position bias if it has one.
        return_attention_scores: bool. If True, also returns the attention
            weights `(B, heads, T, T)` computed by the same attention layer.
        attention_mask: optional boolean mask for the attention: `(B, S)` key validity of
            the last S tokens, or `(B, 1 or heads, T, T)` (see
            `keras_vit.layers.MultiHeadSelfAttention`). Defaults to None.

    Returns:
        `(B, T, D)`, or `((B, T, D), (B, heads, T, T))`.

    Example:

    >>> import numpy as np
    >>> block = TransformerBlock(num_heads=2, mlp_dim=64)
    >>> tuple(block(np.zeros((2, 5, 32), "float32")).shape)
    (2, 5, 32)

    Reference:
        Dosovitskiy et al., 2021, Sec. 3.1 (Eq. 2-3); Vaswani et al., 2017.
    """

    torch_adapter = "transformer_block"

    def __new__(cls, *args, **kwargs):
        # Earlier versions' `TransformerBlock(block_norm="post")` / `(num_parallel=n)` (and
        # their saved configs, which `from_config` passes here): the block kind of today.
        if cls is TransformerBlock:
            kind = _legacy_kind(args, kwargs)
            if kind is not None:
                return kind
        return super().__new__(cls, *args, **kwargs)

    def __init__(
        self,
        num_heads,
        mlp_dim,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
        drop_path_rate=0.0,
        layer_norm_epsilon=1e-6,
        approximate_gelu=True,
        layer_scale_init_value=None,
        remat=False,
        qk_norm=False,
        activation="gelu",
        mlp="mlp",
        mlp_inner_norm=False,
        key_bias=True,
        attention_inner_norm=False,
        relative_position_grid=None,
        relative_position_mlp_dim=None,
        num_parallel=1,
        norm="layernorm",
        block_norm="pre",
        attention_type="standard",
        block_index=0,
        num_key_value_heads=None,
        attention_only_layer_scale=False,
        **kwargs,
    ):
        given = locals()
        common = {name: given[name] for name in COMMON_ARGUMENTS}
        super().__init__(num_heads, mlp_dim, **common, **kwargs)
        if num_parallel != 1 or block_norm != "pre":  # a subclass: `__new__` redirects ours
            raise ValueError(
                f"{type(self).__name__} is the pre-norm block of one branch: num_parallel=1, "
                f"block_norm='pre' (ParallelBlock, PostNormBlock for the others). Received: "
                f"num_parallel={num_parallel!r}, block_norm={block_norm!r}"
            )
        self.layer_scale_init_value = check_layer_scale(layer_scale_init_value)
        self.attention_only_layer_scale = check_bool(
            attention_only_layer_scale, "attention_only_layer_scale"
        )
        if attention_only_layer_scale and layer_scale_init_value is None:
            raise ValueError(
                "attention_only_layer_scale needs layer_scale_init_value and one branch. Received: "
                f"layer_scale_init_value={layer_scale_init_value!r}, num_parallel={num_parallel}"
            )
        self._set_options(
            mlp, mlp_inner_norm, attention_inner_norm, relative_position_grid,
            relative_position_mlp_dim, attention_type, block_index, num_key_value_heads,
        )  # fmt: skip

    def _residuals(self, inputs, training, return_attention_scores, rotary, bias, mask):
        x, scores = self._attend(
            self.attention_norm(inputs), training, return_attention_scores, rotary, bias, mask
        )
        if self.layer_scale_init_value is not None:
            x = x * self.attention_scale
        x = inputs + self.drop_path(x, training=training)
        y = self._mlp_branch(x, training, norm_before=self.mlp_norm)
        if self.layer_scale_init_value is not None and not self.attention_only_layer_scale:
            y = y * self.mlp_scale
        return x + self.drop_path(y, training=training), scores

    def get_config(self):
        config = super().get_config()  # "dtype" with the quantized sublayers' policies
        config.update(config_values(self, BLOCK_CONFIG))
        config.update(
            {
                "remat": self.remat,
                "qk_norm": self.qk_norm,
                "activation": self.activation,
                "mlp": self.mlp,
                "mlp_inner_norm": self.mlp_inner_norm,
                "key_bias": self.key_bias,
                "attention_inner_norm": self.attention_inner_norm,
                "relative_position_grid": self.relative_position_grid,
                "relative_position_mlp_dim": self.relative_position_mlp_dim,
                "num_parallel": self.num_parallel,
                "norm": self.norm,
                "block_norm": self.block_norm,
                "num_key_value_heads": self.num_key_value_heads,
                "attention_only_layer_scale": self.attention_only_layer_scale,
                "attention_type": self.attention_type,
                "block_index": self.block_index,
            }
        )
        return config


# `__new__` takes `(*args, **kwargs)`: `inspect.signature(TransformerBlock)` (help(), tools reading
# the arguments) shows `__init__`'s.
_INIT = inspect.signature(TransformerBlock.__init__)
TransformerBlock.__signature__ = _INIT.replace(parameters=list(_INIT.parameters.values())[1:])


def _legacy_kind(args, kwargs):
    """The `PostNormBlock` or `ParallelBlock` that earlier versions' `TransformerBlock(...)`
    arguments (`block_norm="post"`, `num_parallel > 1`) describe, or None (a pre-norm block).

    Refuses what those versions refused, with their messages; arguments the new class does not
    take must be at `TransformerBlock`'s defaults (which its saved configs always list).
    """
    signature = inspect.signature(TransformerBlock.__init__)
    try:
        bound = signature.bind(None, *args, **kwargs)
    except TypeError:
        return None  # TransformerBlock.__init__ raises the usual TypeError
    arguments = {k: v for k, v in bound.arguments.items() if k not in ("self", "kwargs")}
    extra = bound.arguments.get("kwargs", {})
    block_norm = arguments.get("block_norm", "pre")
    num_parallel = arguments.get("num_parallel", 1)
    if block_norm == "pre" and num_parallel == 1:
        return None
    if block_norm not in BLOCK_NORMS:
        raise ValueError(
            f"block_norm must be one of {BLOCK_NORMS}. Received: block_norm={block_norm!r}"
        )
    check_positive_int(num_parallel, "num_parallel")
    if block_norm == "post" and (
        arguments.get("layer_scale_init_value") is not None or num_parallel > 1
    ):
        raise ValueError(
            "block_norm='post' takes no LayerScale or parallel branches. Received: "
            f"layer_scale_init_value={arguments.get('layer_scale_init_value')!r}, "
            f"num_parallel={num_parallel}"
        )
    if num_parallel > 1 and (
        arguments.get("mlp", "mlp") != "mlp"
        or arguments.get("relative_position_grid") is not None
        or arguments.get("mlp_inner_norm", False)
    ):
        raise ValueError(
            "num_parallel > 1 (timm's ParallelThingsBlock) needs mlp='mlp', no "
            f"relative_position_grid or mlp_inner_norm. Received: mlp={arguments.get('mlp')!r}, "
            f"relative_position_grid={arguments.get('relative_position_grid')!r}, "
            f"mlp_inner_norm={arguments.get('mlp_inner_norm')!r}"
        )
    if num_parallel > 1:
        check_attention_type(arguments.get("attention_type", "standard"), num_parallel=num_parallel)
    kind = PostNormBlock if block_norm == "post" else ParallelBlock
    takes = kind.arguments()
    options = {}
    for name, value in arguments.items():
        if name in takes:
            options[name] = value
        elif value != signature.parameters[name].default:
            raise ValueError(
                f"A {kind.__name__} (TransformerBlock with block_norm={block_norm!r}, "
                f"num_parallel={num_parallel}) takes no {name}. Received: {name}={value!r}"
            )
    return kind(**options, **extra)
