"""The weight names of timm's VLM vision towers (Qwen3-VL, DeepSeek-V4) -> our variables.

`vlm_name_table(table, config, spec)` finishes the `Eva` table `keras_vit.weights.timm.reader`
makes for a family of `keras_vit.families.vlm.timm_names` (`extras["vlm"]`): timm's classifier
norm has no weights (ours are filled with 1 and 0: `vlm_fills`), DeepSeek's SwiGLU no biases
(ours zero), a DeepSeek classifier has the encoder's final norm too, the projector is `merger.*`
(Qwen3-VL: norm, `fc1`, `fc2`) or `aligner.*` (DeepSeek: `fc1` over channel-major blocks,
`fc2`), and the classifiers keep the tower under `encoder.` (all but `head.*`).
"""

import re

from keras_vit.families.vlm.timm_names import merger_dim
from keras_vit.models.merger import MERGER
from keras_vit.models.variable_paths import FC_NORM, FINAL_NORM, block, variable_path
from keras_vit.weights import loading as L
from keras_vit.weights.registry import TimmLayout

_MLP_BIAS = re.compile(r"blocks\.\d+\.mlp\.fc[12]\.bias")


def _channel_major(merge_size):
    """DeepSeek's aligner `fc1` `(out, C * k * k)`, inputs `(channel, row, column)` -> our kernel
    `(k * k * C, out)`, inputs `(row, column, channel)`."""

    def apply(a, shapes):
        out, k = a.shape[0], merge_size
        return (a.reshape(out, -1, k, k).transpose(0, 2, 3, 1).reshape(out, -1).T,)

    return L.Transform("channel_major_linear", lambda shapes: shapes[0][::-1], apply)


def _norm(key, path, config):
    """A norm of kind `config.norm`: LayerNorm `weight`, `bias` or RMSNorm `weight` (scale)."""
    if config.norm == "rmsnorm":
        return {f"{key}.weight": (f"{path}/scale", L.IDENTITY)}
    return L.torch_norm(key, path)


def _projector(config, spec):
    if spec.extras["vlm"] == "qwen3":
        return {
            **_norm("merger.norm", f"{MERGER}/norm", config),
            **L.torch_linear("merger.fc1", f"{MERGER}/fc1"),
            **L.torch_linear("merger.fc2", f"{MERGER}/fc2"),
        }
    return {
        "aligner.fc1.weight": (f"{MERGER}/fc1/kernel", _channel_major(config.merger_size)),
        "aligner.fc1.bias": (f"{MERGER}/fc1/bias", L.IDENTITY),
        **L.torch_linear("aligner.fc2", f"{MERGER}/fc2"),
    }


def vlm_name_table(table, config, spec):
    """`table` (timm.py's `Eva` table of `config`) as timm's Qwen3 / DeepSeek state dict has it."""
    out = {}
    deepseek = spec.extras["vlm"] == "deepseek"
    for key, entry in table.items():
        if key.startswith("fc_norm.") or (deepseek and _MLP_BIAS.fullmatch(key)):
            continue  # weights timm's affine-free norm and bias-free MLP do not have
        if key.startswith("head."):
            if config.final_and_fc_norm:
                out.update(_norm("norm", FINAL_NORM, config))
            if config.merger_size:
                out.update(_projector(config, spec))
        out[key] = entry
    if not config.include_top:
        if config.final_and_fc_norm:
            out.update(_norm("norm", FINAL_NORM, config))
        if config.merger_size:
            out.update(_projector(config, spec))
    prefix = spec.extras["prefix"]
    return {(k if k.startswith("head.") else prefix + k): v for k, v in out.items()}


def vlm_fills(config, spec):
    """Ours that timm's have not: the classifier norm's scale 1 (bias 0), DeepSeek's MLP biases."""
    fills = {}
    if config.fc_norm:
        if config.norm == "rmsnorm":
            fills[variable_path(FC_NORM, "scale")] = 1.0
        else:
            fills[variable_path(FC_NORM, "gamma")] = 1.0
            fills[variable_path(FC_NORM, "beta")] = 0.0
    if spec.extras["vlm"] == "deepseek":
        for i in range(config.num_layers):
            for name in ("gate_dense", "up_dense", "down_dense"):
                fills[block(i, "mlp", name, "bias")] = 0.0
    return fills


def _claims(config, spec):
    """The Qwen3-VL and DeepSeek-V4 towers (their blocks are `Eva`'s: the eva family's rows)."""
    return spec is not None and bool(spec.extras.get("vlm"))


def _config_arguments(spec, arguments, kwargs):
    """The projector width of the name's tag (`merger_dim`), unless the user gives one."""
    if spec.extras.get("merger_dims"):
        arguments = dict(arguments)
        arguments["merger_dim"] = kwargs.get("merger_dim") or merger_dim(spec)
        if spec.extras.get("merger_hidden_is_dim"):  # DeepSeek's aligner: fc1 that wide too
            arguments["merger_hidden_dim"] = arguments["merger_dim"]
    return arguments


# How the towers' checkpoints wrap the `Eva` table (registered in keras_vit/families/vlm/).
TIMM_LAYOUT = TimmLayout(
    claims=_claims,
    finish=vlm_name_table,
    fills=vlm_fills,
    config_arguments=_config_arguments,
)
