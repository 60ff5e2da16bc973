"""The weight names of timm's `Eva` models (EVA-02, EVA, rotary ViTs, DINOv3) -> our variables.

`eva_name_table(config, spec)` is the `{timm key: (path(s), transform)}` table of
`keras_vit.weights.loading.load_state_dict` for a checkpoint of timm's `timm/models/eva.py`
(`Eva`, `EvaBlock`, `EvaAttention`, `SwiGLU` / `GluMlp` / `Mlp`), the families of
`keras_vit.families.eva.timm_names`. `keras_vit.weights.timm.table` uses it (through the family's
`TIMM_LAYOUT`, registered in `keras_vit.families.eva`) for every name whose family says
`layout="eva"`; the rest of the table (tokens, position embedding, patch
embedding, norms, head) is shared with the ViT table.
"""

from keras_vit.models.variable_paths import ROTARY_EMBEDDING, block, variable_path
from keras_vit.models.variants import parse_variant
from keras_vit.weights import loading as L
from keras_vit.weights.registry import TimmLayout
from keras_vit.weights.timm.options import PACKED_BIAS, PACKED_WEIGHT, inner_norm, interleave_halves

_norm, _linear = L.torch_norm, L.torch_linear


def _attention_rope(key, attention, half=False):
    """timm's `AttentionRope` (RoPE-ViT): one `qkv` with its full bias, `proj`; with `half`
    (timm's `rotate_half=True`: Qwen3-VL, DeepSeek-V4) the query / key channels reordered."""
    qkv = tuple(f"{attention}/{name}" for name in ("query", "key", "value"))
    weight, bias = L.QKV_WEIGHT, L.QKV_BIAS
    if half:
        weight, bias = (interleave_halves(t, (True, True, False)) for t in (weight, bias))
    return {
        f"{key}.qkv.weight": (tuple(f"{p}/kernel" for p in qkv), weight),
        f"{key}.qkv.bias": (tuple(f"{p}/bias" for p in qkv), bias),
        f"{key}.proj.weight": (f"{attention}/attention_output/kernel", L.HEADS_OUT_WEIGHT),
        f"{key}.proj.bias": (f"{attention}/attention_output/bias", L.IDENTITY),
    }


def _attention(key, attention, config, spec):
    if spec.extras.get("attention") == "rope" and spec.extras.get("qkv_fused", True):
        return _attention_rope(key, attention, spec.extras.get("rotate_half", False))
    # DINOv3's half-split rotation -> our interleaved one (query and key channels reordered).
    half = config.rotary_embedding == "dinov3"

    def heads_in(transform, name):
        return interleave_halves(transform, (True,)) if half and name != "value" else transform

    if spec.extras.get("qkv_fused", True):
        qkv = tuple(f"{attention}/{name}/kernel" for name in ("query", "key", "value"))
        fused = interleave_halves(L.QKV_WEIGHT, (True, True, False)) if half else L.QKV_WEIGHT
        table = {f"{key}.qkv.weight": (qkv, fused)}
    else:
        table = {
            f"{key}.{p}_proj.weight": (
                f"{attention}/{name}/kernel",
                heads_in(L.HEADS_IN_WEIGHT, name),
            )
            for p, name in (("q", "query"), ("k", "key"), ("v", "value"))
        }
    if spec.qkv_bias:
        fused = spec.extras.get("qkv_fused", True)
        # EvaAttention: q / v biases; AttentionRope unfused (Sapiens2): all three.
        biased = (("q", "query"), ("k", "key"), ("v", "value"))[:: 1 if config.key_bias else 2]
        for p, name in biased:
            source = f"{key}.{p}_bias" if fused else f"{key}.{p}_proj.bias"
            table[source] = (f"{attention}/{name}/bias", heads_in(L.HEADS_IN_BIAS, name))
    if config.qk_norm:  # per-head norms: their channels reordered with the heads' (DINOv3 RoPE)
        for p, name in (("q", "query"), ("k", "key")):
            for suffix, variable in (("weight", "gamma"), ("bias", "beta")):
                table[f"{key}.{p}_norm.{suffix}"] = (
                    f"{attention}/{name}_norm/{variable}",
                    interleave_halves(L.IDENTITY, (True,)) if half else L.IDENTITY,
                )
    if config.attention_inner_norm:
        table.update(inner_norm(f"{key}.norm", attention))
    table[f"{key}.proj.weight"] = (f"{attention}/attention_output/kernel", L.HEADS_OUT_WEIGHT)
    table[f"{key}.proj.bias"] = (f"{attention}/attention_output/bias", L.IDENTITY)
    return table


def _mlp(key, path, config, spec):
    if config.mlp != "swiglu":
        return {
            **_linear(f"{key}.fc1", f"{path}/mlp_dense_1"),
            **_linear(f"{key}.fc2", f"{path}/mlp_dense_2"),
        }
    mlp = f"{path}/mlp"
    gate_up = (f"{mlp}/gate_dense", f"{mlp}/up_dense")
    if spec.extras.get("mlp_packed", False):
        table = {
            f"{key}.fc1.weight": (tuple(f"{p}/kernel" for p in gate_up), PACKED_WEIGHT),
            f"{key}.fc1.bias": (tuple(f"{p}/bias" for p in gate_up), PACKED_BIAS),
        }
    else:
        table = {**_linear(f"{key}.fc1_g", gate_up[0]), **_linear(f"{key}.fc1_x", gate_up[1])}
    if config.mlp_inner_norm:
        table.update(_norm(f"{key}.norm", f"{mlp}/inner_norm"))
    table.update(_linear(f"{key}.fc2", f"{mlp}/down_dense"))
    return table


def eva_block_table(i, config, spec):
    """timm's `blocks.{i}` of an `Eva` model -> our `encoderblock_{i}` variables."""
    key, path = f"blocks.{i}", block(i)
    table = {}
    if config.layer_scale_init_value is not None:
        table[f"{key}.gamma_1"] = (f"{path}/attention_scale", L.IDENTITY)
        if not config.attention_only_layer_scale:
            table[f"{key}.gamma_2"] = (f"{path}/mlp_scale", L.IDENTITY)
    table.update(_norm(f"{key}.norm1", f"{path}/attention_norm"))
    table.update(_attention(f"{key}.attn", f"{path}/attention", config, spec))
    table.update(_norm(f"{key}.norm2", f"{path}/mlp_norm"))
    table.update(_mlp(f"{key}.mlp", path, config, spec))
    return table


def eva_model_table(config):
    """The model-level `Eva` weights besides the ViT's: mixed RoPE's `rope.freqs`."""
    if config.rotary_embedding != "mixed":
        return {}
    return {"rope.freqs": (variable_path(ROTARY_EMBEDDING, "frequencies"), L.IDENTITY)}


def eva_fills(config, spec):
    """Zeros for the query / value biases of a checkpoint without them (ours keep them)."""
    if spec.qkv_bias:
        return {}
    return {
        block(i, "attention", name, "bias"): 0.0
        for i in range(config.num_layers)
        for name in ("query", "value")
    }


def _claims(config, spec):
    """timm's `Eva` models: the names whose family says `layout="eva"`."""
    return spec is not None and spec.extras.get("layout") == "eva"


def _size(name, kwargs, arguments):
    """`name` (`hidden_dim`, `num_layers`) as the model will have it: the user's, the name's,
    else its variant's."""
    value = kwargs.get(name) or arguments.get(name)
    return value or parse_variant(arguments["variant"])[name]


def _config_arguments(spec, arguments, kwargs):
    """The `ViT` arguments of an `Eva` name that follow the user's sizes (`kwargs`):

    - `map_mlp_ratio` (the Perception Encoder core's attention pool): its MLP width is
      `int(hidden_dim * ratio)`, unless `map_mlp_dim` is given;
    - `kv_heads = (count, full)` (Sapiens2, timm's `_sapiens2_args`): grouped-query attention
      with `count` key / value heads except in the first and last `full` blocks (None: all
      heads), unless `num_key_value_heads` is given.
    """
    arguments = dict(arguments)
    ratio = spec.extras.get("map_mlp_ratio")
    if ratio is not None and kwargs.get("map_mlp_dim") is None:
        arguments["map_mlp_dim"] = int(_size("hidden_dim", kwargs, arguments) * ratio)
    kv_heads = spec.extras.get("kv_heads")
    if kv_heads is not None and "num_key_value_heads" not in kwargs:
        count, full = kv_heads
        layers = _size("num_layers", kwargs, arguments)
        heads = tuple(None if i < full or i >= layers - full else count for i in range(layers))
        arguments["num_key_value_heads"] = heads if any(heads) else None
    return arguments


# How `keras_vit.weights.timm.table.timm_name_table` lays out an `Eva` checkpoint (registered in
# keras_vit/families/eva/__init__.py).
TIMM_LAYOUT = TimmLayout(
    claims=_claims,
    model_rows=eva_model_table,
    block_rows=eva_block_table,
    fills=eva_fills,
    own_qkv_fills=True,
    config_arguments=_config_arguments,
)
