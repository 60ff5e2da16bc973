"""timm's `ParallelScalingBlock`, `DiffParallelScalingBlock` and `DiffAttention` weight names.

The block tables of the names in `keras_vit.families.parallel.timm_names`, for the timm name
table (`keras_vit.weights.timm.reader.timm_name_table`), in timm's state-dict order (a module's own
parameters before its submodules'):

- `blocks.{i}.mlp_bias` (no q/k/v bias: `*_xp_*`) or `blocks.{i}.in_proj.bias` ->
  `encoderblock_{i}/in_proj/bias` (timm's `mlp_bias` fills its first `mlp_dim` entries, the
  q/k/v part stays zero), `in_norm`, `in_proj`, `q_norm`, `k_norm`, `attn_out_proj` /
  `mlp_out_proj` or `out_proj`, `ls.gamma` -> `in_norm`, `in_proj`, `query_norm`, `key_norm`,
  `attention_out` / `mlp_out` or `out_proj`, `layer_scale` of a
  `keras_vit.layers.ParallelScalingBlock`;
- differential attention: `lambda_q1`, `lambda_k1`, `lambda_q2`, `lambda_k2` and
  `sub_norm.weight` (an RMSNorm whatever the model's norm) -> the same names (`sub_norm/scale`)
  in the block (parallel) or in its `attention` (`keras_vit.layers.DifferentialAttention`,
  whose `qkv` / `proj` rows are the ViT block's).
"""

import numpy as np

from keras_vit.layers.differential_attention import LAMBDAS
from keras_vit.models.variable_paths import block
from keras_vit.weights import loading as L

__all__ = ["differential_rows", "parallel_scaling_table"]


def _mlp_bias(mlp_dim):
    """timm's `mlp_bias` `(mlp_dim,)` -> our `in_proj` bias `(mlp_dim + 3 D,)`, q/k/v part zero."""

    def apply(array, shapes):
        zeros = np.zeros((shapes[0][0] - mlp_dim,), array.dtype)
        return (np.concatenate([array, zeros]),)

    return L.Transform("mlp_bias", lambda shapes: (mlp_dim,), apply)


def differential_rows(key, path):
    """`(lambdas, sub_norm)`: the differential-attention entries of timm's module `key`."""
    lambdas = {f"{key}.{name}": (f"{path}/{name}", L.IDENTITY) for name in LAMBDAS}
    return lambdas, {f"{key}.sub_norm.weight": (f"{path}/sub_norm/scale", L.IDENTITY)}


def parallel_scaling_table(i, config, qkv_bias):
    """timm's (Diff)ParallelScalingBlock `blocks.{i}` -> our `ParallelScalingBlock`."""
    key, path = f"blocks.{i}", block(i)
    differential = config.attention_type == "differential"
    table = {}
    if not qkv_bias:
        table[f"{key}.mlp_bias"] = (f"{path}/in_proj/bias", _mlp_bias(config.mlp_dim))
    lambdas, sub_norm = differential_rows(key, path) if differential else ({}, {})
    table.update(lambdas)
    table.update(L.torch_norm(f"{key}.in_norm", f"{path}/in_norm"))
    table[f"{key}.in_proj.weight"] = (f"{path}/in_proj/kernel", L.LINEAR)
    if qkv_bias:
        table[f"{key}.in_proj.bias"] = (f"{path}/in_proj/bias", L.IDENTITY)
    if config.qk_norm:
        table.update(L.torch_norm(f"{key}.q_norm", f"{path}/query_norm"))
        table.update(L.torch_norm(f"{key}.k_norm", f"{path}/key_norm"))
    table.update(sub_norm)
    if differential:  # DiffParallelScalingBlock: always one fused output projection
        table.update(L.torch_linear(f"{key}.out_proj", f"{path}/out_proj"))
    else:
        table.update(L.torch_linear(f"{key}.attn_out_proj", f"{path}/attention_out"))
        table.update(L.torch_linear(f"{key}.mlp_out_proj", f"{path}/mlp_out"))
    if config.layer_scale_init_value is not None:
        table[f"{key}.ls.gamma"] = (f"{path}/layer_scale", L.IDENTITY)
    return table
