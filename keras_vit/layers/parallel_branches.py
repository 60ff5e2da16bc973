"""`ParallelBranches`: `TransformerBlock`'s parallel branches (`num_parallel > 1`), as a mixin.

timm's `ParallelThingsBlock` ("Three things everyone should know about Vision Transformers"):
branch 0 is the block's own attention and MLP, branches 1.. have their own norms, attention,
MLP and LayerScale (`attention_norm_{j}`, `attention_{j}`, `mlp_dense_1_{j}`, ...); the
attention branches are summed, then the MLP branches. The block provides its options, its
dropout and drop-path sublayers; see `keras_vit.layers.TransformerBlock`'s `num_parallel`.
"""

import keras

from keras_vit.layers._quantization import sublayer_dtype
from keras_vit.layers.activations import mlp_activation
from keras_vit.layers.attention import MultiHeadSelfAttention
from keras_vit.layers.norms import make_norm


class ParallelBranches:
    """The branches 1.. of a parallel `TransformerBlock` (a mixin: no state of its own)."""

    def _build_branch(self, j, shape, hidden_dim, dense):
        """Branch j > 0 of a parallel block: its norms, attention, MLP and LayerScale."""
        eps, dtype = self.layer_norm_epsilon, self.dtype_policy
        branch = {
            "attention_norm": make_norm(self.norm, eps, f"attention_norm_{j}", dtype),
            "attention": MultiHeadSelfAttention(
                num_heads=self.num_heads,
                attention_dropout_rate=self.attention_dropout_rate,
                qk_norm=self.qk_norm,
                layer_norm_epsilon=eps,
                key_bias=self.key_bias,
                norm=self.norm,
                dtype=sublayer_dtype(self, f"attention_{j}"),
                name=f"attention_{j}",
            ),
            "mlp_norm": make_norm(self.norm, eps, f"mlp_norm_{j}", dtype),
            "mlp_dense_1": dense(self.mlp_dim, f"mlp_dense_1_{j}"),
            "mlp_dense_2": dense(hidden_dim, f"mlp_dense_2_{j}"),
        }
        for name in ("attention_norm", "attention", "mlp_norm", "mlp_dense_1"):
            branch[name].build(shape)
        branch["mlp_dense_2"].build(shape[:-1] + (self.mlp_dim,))
        if self.layer_scale_init_value is not None:
            init = keras.initializers.Constant(self.layer_scale_init_value)
            for name in ("attention_scale", "mlp_scale"):
                branch[name] = self.add_weight(
                    name=f"{name}_{j}", shape=(hidden_dim,), initializer=init
                )
        return branch

    def _branches(self):
        """Every branch's sublayers and scales (branch 0: the block's own)."""
        names = ("attention_norm", "attention", "mlp_norm")
        names += ("mlp_dense_1", "mlp_dense_2") if self.mlp == "mlp" else ()
        first = {name: getattr(self, name) for name in names}
        scales = ("attention_scale", "mlp_scale") if self.layer_scale_init_value is not None else ()
        first.update({name: getattr(self, name) for name in scales if hasattr(self, name)})
        return [first, *self.parallel_branches]

    def _parallel_forward(self, inputs, training, bias):
        """timm's ParallelThingsBlock: the attention branches summed, then the MLP branches."""
        scaled = self.layer_scale_init_value is not None
        total = 0.0
        for branch in self._branches():
            x = branch["attention"](
                branch["attention_norm"](inputs), training=training, attention_bias=bias
            )
            x = self.attention_dropout(x, training=training)
            if scaled:
                x = x * branch["attention_scale"]
            total = total + self.drop_path(x, training=training)
        x = inputs + total
        total = 0.0
        for branch in self._branches():
            y = branch["mlp_dense_1"](branch["mlp_norm"](x))
            y = mlp_activation(y, self.activation, self.approximate_gelu)
            y = self.mlp_dropout_1(y, training=training)
            y = self.mlp_dropout_2(branch["mlp_dense_2"](y), training=training)
            if scaled:
                y = y * branch["mlp_scale"]
            total = total + self.drop_path(y, training=training)
        return x + total
