"""`TransformerBlock`: the pre-norm encoder block of ViT (the paper's Eq. 2-3), or post-norm."""

import functools

import keras
from keras import ops

from keras_vit.layers import attention as attention_module
from keras_vit.layers._checks import (
    check_bool,
    check_layer_scale,
    check_non_negative_int,
    check_positive_int,
    check_positive_int_pair,
    check_rate,
    check_token_shape,
)
from keras_vit.layers._quantization import sublayer_dtype
from keras_vit.layers._token_mixer import BLOCK_CONFIG, TokenMixer, config_values
from keras_vit.layers.activations import check_activation, mlp_activation
from keras_vit.layers.attention import MultiHeadSelfAttention, check_epsilon
from keras_vit.layers.block_remat import BlockRemat
from keras_vit.layers.differential_attention import DifferentialAttention, check_attention_type
from keras_vit.layers.drop_path import DropPath
from keras_vit.layers.norms import check_norm, make_norm
from keras_vit.layers.parallel_branches import ParallelBranches
from keras_vit.layers.relative_position import RelativePositionBias, RelativePositionMLP
from keras_vit.layers.swiglu import SwiGLU

MLPS = ("mlp", "swiglu")
BLOCK_NORMS = ("pre", "post")


@keras.saving.register_keras_serializable(package="keras_vit")
class TransformerBlock(BlockRemat, ParallelBranches, TokenMixer):
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
        num_parallel: int. Parallel branches (timm's `ParallelThingsBlock`, "Three things
            everyone should know about ViTs"): `x + sum_j MSA_j(LN_j(x))`, then
            `x + sum_j MLP_j(LN_j(x))`, each branch with its own norms, attention, MLP and
            LayerScale. Branch 0 is the block's usual sublayers (`attention`, `mlp_dense_1`,
            ...); branch j > 0 adds `attention_norm_{j}`, `attention_{j}`, `mlp_norm_{j}`,
            `mlp_dense_1_{j}`, `mlp_dense_2_{j}` (and `attention_scale_{j}`, `mlp_scale_{j}`).
            Computed by the portable path; no attention scores, RoPE or SwiGLU with it.
            Defaults to 1.
        norm: `"layernorm"` or `"rmsnorm"` (`keras.layers.RMSNormalization`, timm's
            `RmsNorm`: AIMv2): the kind of every norm of the block (`attention_norm`,
            `mlp_norm`, the QK, attention inner and SwiGLU inner norms). RMSNorm blocks take
            the portable path on PyTorch. Defaults to `"layernorm"`.
        block_norm: `"pre"` (`x + f(LN(x))`) or `"post"`: residual post-norm,
            `x + LN(f(x))` for the attention and the MLP (timm's `ResPostBlock`,
            `ResPostRelPosBlock`, `EvaBlockPostNorm`; `attention_norm` and `mlp_norm` then
            follow their branch). No LayerScale or parallel branches with it; computed by
            the portable path. Defaults to `"pre"`.
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
        super().__init__(**kwargs)
        self.norm = check_norm(norm)
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.mlp_dim = check_positive_int(mlp_dim, "mlp_dim")
        self.dropout_rate = check_rate(dropout_rate, "dropout_rate")
        self.attention_dropout_rate = check_rate(attention_dropout_rate, "attention_dropout_rate")
        self.drop_path_rate = check_rate(drop_path_rate, "drop_path_rate")
        self.layer_norm_epsilon = check_epsilon(layer_norm_epsilon)
        self.approximate_gelu = bool(approximate_gelu)
        self.layer_scale_init_value = check_layer_scale(layer_scale_init_value)
        check_bool(remat, "remat")
        if remat and not hasattr(keras, "remat"):
            raise ValueError(
                f"remat=True needs keras.remat (Keras >= 3.9). Received: Keras {keras.__version__}"
            )
        self.remat = remat
        self.qk_norm = check_bool(qk_norm, "qk_norm")
        self.activation = check_activation(activation)
        if mlp not in MLPS:
            raise ValueError(f"mlp must be one of {MLPS}. Received: mlp={mlp!r}")
        self.mlp = mlp
        self.mlp_inner_norm = check_bool(mlp_inner_norm, "mlp_inner_norm")
        self.key_bias = check_bool(key_bias, "key_bias")
        self.attention_inner_norm = check_bool(attention_inner_norm, "attention_inner_norm")
        if relative_position_grid is not None:
            relative_position_grid = check_positive_int_pair(
                relative_position_grid, "relative_position_grid"
            )
        self.relative_position_grid = relative_position_grid
        check_positive_int(relative_position_mlp_dim, "relative_position_mlp_dim", allow_none=True)
        if relative_position_mlp_dim is not None and relative_position_grid is None:
            raise ValueError(
                "relative_position_mlp_dim needs relative_position_grid. "
                f"Received: relative_position_mlp_dim={relative_position_mlp_dim}"
            )
        self.relative_position_mlp_dim = relative_position_mlp_dim
        self.num_parallel = check_positive_int(num_parallel, "num_parallel")
        if num_parallel > 1 and (
            mlp != "mlp" or relative_position_grid is not None or mlp_inner_norm
        ):
            raise ValueError(
                "num_parallel > 1 (timm's ParallelThingsBlock) needs mlp='mlp', no "
                f"relative_position_grid or mlp_inner_norm. Received: mlp={mlp!r}, "
                f"relative_position_grid={relative_position_grid!r}, "
                f"mlp_inner_norm={mlp_inner_norm!r}"
            )
        if block_norm not in BLOCK_NORMS:
            raise ValueError(
                f"block_norm must be one of {BLOCK_NORMS}. Received: block_norm={block_norm!r}"
            )
        if block_norm == "post" and (layer_scale_init_value is not None or num_parallel > 1):
            raise ValueError(
                "block_norm='post' takes no LayerScale or parallel branches. Received: "
                f"layer_scale_init_value={layer_scale_init_value!r}, num_parallel={num_parallel}"
            )
        self.block_norm = block_norm
        self.attention_type = check_attention_type(
            attention_type, num_parallel=num_parallel, key_bias=key_bias,
            relative_position_grid=relative_position_grid, inner_norm=attention_inner_norm,
        )  # fmt: skip
        self.block_index = check_non_negative_int(block_index, "block_index")
        self.num_key_value_heads = num_key_value_heads  # checked by the attention layer
        self.attention_only_layer_scale = check_bool(
            attention_only_layer_scale, "attention_only_layer_scale"
        )
        if attention_only_layer_scale and (layer_scale_init_value is None or num_parallel > 1):
            raise ValueError(
                "attention_only_layer_scale needs layer_scale_init_value and one branch. Received: "
                f"layer_scale_init_value={layer_scale_init_value!r}, num_parallel={num_parallel}"
            )
        self.supports_masking = False

    def build(self, input_shape):
        hidden_dim = check_token_shape(input_shape, self.num_heads, self.name)
        dtype = self.dtype_policy
        eps = self.layer_norm_epsilon
        self.attention_norm = make_norm(self.norm, eps, "attention_norm", dtype)
        options = dict(qk_norm=self.qk_norm, layer_norm_epsilon=eps, norm=self.norm)
        if self.attention_type == "differential":
            options["block_index"] = self.block_index
        else:
            options.update(key_bias=self.key_bias, inner_norm=self.attention_inner_norm)
            if self.num_key_value_heads is not None:  # grouped-query attention
                options["num_key_value_heads"] = self.num_key_value_heads
        attention = dict(standard=MultiHeadSelfAttention, differential=DifferentialAttention)
        self.attention = attention[self.attention_type](
            num_heads=self.num_heads,
            attention_dropout_rate=self.attention_dropout_rate,
            dtype=sublayer_dtype(self, "attention"),
            name="attention",
            **options,
        )
        dropout = functools.partial(keras.layers.Dropout, self.dropout_rate, dtype=dtype)

        # One initializer for both MLP layers, as before: a second instance would draw another
        # default seed and change every later random draw of a seeded run.
        bias_initializer = keras.initializers.RandomNormal(stddev=1e-6)

        def dense(units, name):
            return keras.layers.Dense(
                units,
                kernel_initializer="glorot_uniform",
                bias_initializer=bias_initializer,
                dtype=sublayer_dtype(self, name),  # quantized in a reloaded quantized model
                name=name,
            )

        self.attention_dropout = dropout(name="attention_dropout")
        self.mlp_norm = make_norm(self.norm, eps, "mlp_norm", dtype)
        self.parallel_branches = [
            self._build_branch(j, tuple(input_shape), hidden_dim, dense)
            for j in range(1, self.num_parallel)
        ]
        shape = tuple(input_shape)
        if self.mlp == "swiglu":
            self.swiglu = SwiGLU(
                self.mlp_dim,
                inner_norm=self.mlp_inner_norm,
                layer_norm_epsilon=eps,
                dropout_rate=self.dropout_rate,
                norm=self.norm,
                dtype=sublayer_dtype(self, "mlp"),
                name="mlp",
            )
            self.swiglu.build(shape)
        else:
            self.mlp_dense_1 = dense(self.mlp_dim, "mlp_dense_1")
            self.mlp_dropout_1 = dropout(name="mlp_dropout_1")
            self.mlp_dense_2 = dense(hidden_dim, "mlp_dense_2")
            self.mlp_dropout_2 = dropout(name="mlp_dropout_2")
            self.mlp_dense_1.build(shape)
            self.mlp_dense_2.build(shape[:-1] + (self.mlp_dim,))
            if self.mlp_inner_norm:  # BEiT-3's norm before mlp_dense_2
                self.mlp_hidden_norm = make_norm(self.norm, eps, "mlp_inner_norm", dtype)
                self.mlp_hidden_norm.build(shape[:-1] + (self.mlp_dim,))
        self.drop_path = DropPath(self.drop_path_rate, dtype=dtype, name="drop_path")

        self.attention_norm.build(shape)
        self.attention.build(shape)
        self.mlp_norm.build(shape)
        self.drop_path.build(shape)  # no weights, but model.quantize() needs every layer built
        grid = self.relative_position_grid
        if grid is not None and self.relative_position_mlp_dim is None:
            self.relative_position_bias = RelativePositionBias(
                self.num_heads, grid, dtype=dtype, name="relative_position_bias"
            )
            self.relative_position_bias.build(shape)
        elif grid is not None:
            if shape[1] is None or shape[1] < grid[0] * grid[1]:
                raise ValueError(
                    f"{self.name}: a relative position MLP for the grid {grid} needs at least "
                    f"{grid[0] * grid[1]} tokens, a known count. Received: shape={shape}"
                )
            self.relative_position_bias = RelativePositionMLP(
                self.num_heads,
                grid,
                self.relative_position_mlp_dim,
                num_prefix_tokens=shape[1] - grid[0] * grid[1],
                dtype=dtype,
                name="relative_position_bias",
            )
            self.relative_position_bias.build(shape)
        if self.layer_scale_init_value is not None:
            init = keras.initializers.Constant(self.layer_scale_init_value)
            self.attention_scale = self.add_weight(
                name="attention_scale", shape=(hidden_dim,), initializer=init
            )
            if not self.attention_only_layer_scale:
                self.mlp_scale = self.add_weight(
                    name="mlp_scale", shape=(hidden_dim,), initializer=init
                )
        self.built = True

    def mix(self, inputs, training, return_scores, rotary, bias, mask):
        # The residual stream runs in the compute dtype on every backend (bfloat16 under
        # mixed precision), whatever dtype the caller passed.
        inputs = ops.cast(inputs, self.compute_dtype)
        # (rotary embedding, attention bias, attention mask): functions of the grid, the
        # weights and the NaFlex validity only.
        context = (rotary, bias, mask)
        if self.remat and not return_scores and not self._remat_redraws_dropout(training):
            # Python flags (and the rotary embedding, shared bias and mask) stay outside the
            # rematerialised function (closed over), so jax.checkpoint / tf.recompute_grad see
            # the tokens only.
            return self._remat_call(inputs, training, context)
        return self._forward(inputs, training, return_scores, context)

    def _attention_bias(self, inputs, shared):
        """The block's relative position bias plus a shared one (either may be None)."""
        if self.relative_position_grid is None:
            return shared
        own = self.relative_position_bias(inputs)
        return own if shared is None else own + shared

    def _forward(self, inputs, training, return_attention_scores, rotary=(None, None, None)):
        rotary, bias, mask = rotary
        bias = self._attention_bias(inputs, bias)
        if self.num_parallel > 1:
            if return_attention_scores or rotary is not None:
                raise ValueError(
                    f"{self.name}: a parallel block (num_parallel={self.num_parallel}) returns "
                    "no attention scores and takes no rotary embedding."
                )
            return self._parallel_forward(inputs, training, bias)
        # The fast path computes the original block (q/v-only biases, attention biases); RoPE,
        # SwiGLU, RMSNorm and post-norm blocks take the portable keras.ops path.
        plain = rotary is None and self.mlp == "mlp" and self.norm == "layernorm"
        plain = plain and self.block_norm == "pre" and self.attention_type == "standard"
        if attention_module.torch_fast_path() and plain and not return_attention_scores:
            from keras_vit.layers import _torch_kernels

            return _torch_kernels.transformer_block(self, inputs, training, bias, mask)
        post = self.block_norm == "post"
        normed = inputs if post else self.attention_norm(inputs)
        options = dict(training=training, rotary_embedding=rotary, attention_bias=bias)
        options["attention_mask"] = mask
        if return_attention_scores:
            x, scores = self.attention(normed, return_attention_scores=True, **options)
        else:
            x = self.attention(normed, **options)
        x = self.attention_dropout(x, training=training)
        if post:
            x = self.attention_norm(x)
        if self.layer_scale_init_value is not None:
            x = x * self.attention_scale
        x = inputs + self.drop_path(x, training=training)

        # On JAX the MLP runs on (batch * tokens, D) matrices: XLA on CPU computes the weight
        # gradients of a 3-D matmul through transposing copies as slow as the matmul itself;
        # 2-D keeps them plain GEMMs (ViT-S/16 training step 1.6x faster on 2 CPU cores). Same
        # numbers; TensorFlow is 4% slower with it and PyTorch indifferent, so only JAX does it.
        shape = ops.shape(x)
        flat = keras.backend.backend() == "jax"
        y = ops.reshape(x, (-1, shape[-1])) if flat else x
        y = y if post else self.mlp_norm(y)
        if self.mlp == "swiglu":
            y = self.swiglu(y, training=training)
        else:
            y = self.mlp_dense_1(y)
            y = mlp_activation(y, self.activation, self.approximate_gelu)
            y = self.mlp_dropout_1(y, training=training)
            if self.mlp_inner_norm:
                y = self.mlp_hidden_norm(y)
            y = self.mlp_dense_2(y)
            y = self.mlp_dropout_2(y, training=training)
        if post:
            y = self.mlp_norm(y)
        if flat:
            y = ops.reshape(y, shape)
        if self.layer_scale_init_value is not None and not self.attention_only_layer_scale:
            y = y * self.mlp_scale
        out = x + self.drop_path(y, training=training)
        if return_attention_scores:
            return out, scores
        return out

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
