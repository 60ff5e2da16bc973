"""transformers' DINOv3 (`DINOv3ViTModel`) `save_pretrained` folders -> keras_vit models.

`from_huggingface(folder)` sends a folder whose `config.json` says `model_type: "dinov3_vit"`
here (the family registry: `keras_vit.families`). The model: a class token and
`num_register_tokens` registers before the patches, no absolute position embedding, DINOv3's
RoPE (`rotary_embedding="dinov3"`, `rotary_temperature=rope_theta`; transformers' training-time
`pos_embed_shift` / `jitter` / `rescale` are off in eval, as here), LayerScale, the MLP
(`hidden_act`) or the gated one (`use_gated_mlp`: our SwiGLU, `hidden_act="silu"`), the
query / key / value / output / MLP biases `config.json` lists, and the final `norm`.

What the model returns, against `DINOv3ViTModel`'s outputs: `pooling="token"` (the default
here) is its `pooler_output` (the class token of `last_hidden_state`), `pooling=None` the whole
`last_hidden_state` (class token, registers, patches); `pooling="gap"` is timm's default
(the mean of the patch tokens).

transformers rotates channel `k` of each query / key head with channel `k + head_dim / 2`
(`rotate_half`); keras_vit rotates interleaved pairs, so the query and key projections
(and their biases) are loaded with each head's channels reordered to `(0, d/2, 1, d/2 + 1, ...)`
(`keras_vit.weights.timm.options.interleave_halves`): the attention is the same function.
"""

import logging
import os

from keras_vit.models.config import ViTConfig
from keras_vit.models.encoder import build_model
from keras_vit.models.variable_paths import PATHS, block
from keras_vit.weights import loading as L
from keras_vit.weights.huggingface import common as H
from keras_vit.weights.state_dict import read_state_dict
from keras_vit.weights.timm.options import interleave_halves

logger = logging.getLogger(__name__)

ARCHITECTURES = ("DINOv3ViTModel",)
# hidden_act of the plain MLP -> approximate_gelu; the gated MLP is our SwiGLU (silu).
_GELU = {"gelu": False, "gelu_python": False, "gelu_new": True, "gelu_pytorch_tanh": True}
# config.json bias flags -> the variables a checkpoint without them leaves at zero.
_BIASES = {
    "query_bias": ("attention/query/bias",),
    "value_bias": ("attention/value/bias",),
    "proj_bias": ("attention/attention_output/bias",),
}


def dinov3_arguments(config, source="config.json"):
    """`keras_vit.ViT` arguments of a transformers `DINOv3ViTConfig` dict (a `config.json`).

    Read as `keras_vit.weights.huggingface.vit.vit_arguments` reads a `ViTConfig` (`source` names
    the file in messages); a ValueError names an architecture or activation keras_vit does
    not read.

    Example:

    >>> args = dinov3_arguments({"model_type": "dinov3_vit", "hidden_size": 32,
    ...     "num_attention_heads": 2, "intermediate_size": 64, "num_register_tokens": 4})
    >>> args["rotary_embedding"], args["rotary_temperature"], args["num_register_tokens"]
    ('dinov3', 100.0, 4)
    """
    H.check_architectures(config, ARCHITECTURES, source)
    activation = config.get("hidden_act", "gelu")
    gated = bool(config.get("use_gated_mlp", False))
    if gated and activation != "silu":
        raise ValueError(
            f"{source}: use_gated_mlp with hidden_act {activation!r}; keras_vit's gated MLP "
            "(mlp='swiglu') is SiLU-gated. Expected hidden_act 'silu'."
        )
    if not gated and activation not in _GELU:
        raise ValueError(
            f"{source}: hidden_act {activation!r} is not supported. Expected one of "
            f"{sorted(_GELU)} (or 'silu' with use_gated_mlp)."
        )
    try:
        return dict(
            **H.size_arguments(config, source, hidden_size=384, intermediate_size=1536,
                               num_attention_heads=6, layer_norm_eps=1e-5),  # fmt: skip
            approximate_gelu=_GELU.get(activation, False),
            mlp="swiglu" if gated else "mlp",
            class_token=True,
            num_register_tokens=int(config.get("num_register_tokens", 0)),
            position_embedding=None,
            layer_scale_init_value=float(config.get("layerscale_value", 1.0)),
            key_bias=bool(config.get("key_bias", False)),
            rotary_embedding="dinov3",
            rotary_temperature=float(config.get("rope_theta", 100.0)),
        )
    except (TypeError, ValueError) as error:
        raise ValueError(f"{source}: {error}") from error


def normalize_names(arrays):
    """transformers' in-memory names (`model.layer.{i}...`) -> the file names (`layer.{i}...`).

    Example:

    >>> sorted(normalize_names({"model.layer.0.norm1.weight": 1, "norm.bias": 2}))
    ['layer.0.norm1.weight', 'norm.bias']
    """
    return {k[len("model.") :] if k.startswith("model.layer.") else k: v for k, v in arrays.items()}


def dinov3_name_table(config, hf):
    """The `DINOv3ViTModel` weight names for the model `config` describes.

    Args:
        config: the `keras_vit.models.config.ViTConfig` of the model.
        hf: dict, `config.json` (which biases the checkpoint has).

    Returns:
        dict {name: (variable path, transform)} for `keras_vit.weights.loading`.
    """
    table = {
        "embeddings.cls_token": (PATHS["class_token"], L.IDENTITY),
        "embeddings.patch_embeddings.weight": (PATHS["patch_kernel"], L.CONV),
        "embeddings.patch_embeddings.bias": (PATHS["patch_bias"], L.IDENTITY),
    }
    if config.num_register_tokens:
        table["embeddings.register_tokens"] = (PATHS["register_tokens"], L.IDENTITY)
    rotated_weight = interleave_halves(L.HEADS_IN_WEIGHT, (True,))
    rotated_bias = interleave_halves(L.HEADS_IN_BIAS, (True,))
    biases = {
        "q": hf.get("query_bias", True),
        "k": hf.get("key_bias", False),
        "v": hf.get("value_bias", True),
    }
    mlp_bias = hf.get("mlp_bias", True)
    for i in range(config.num_layers):
        key, path = f"layer.{i}", block(i)
        attention = f"{path}/attention"
        table.update(L.torch_norm(f"{key}.norm1", f"{path}/attention_norm"))
        for p, name in (("q", "query"), ("k", "key"), ("v", "value")):
            source = f"{key}.attention.{p}_proj"
            rotated = name != "value"
            table[f"{source}.weight"] = (
                f"{attention}/{name}/kernel",
                rotated_weight if rotated else L.HEADS_IN_WEIGHT,
            )
            if biases[p]:
                table[f"{source}.bias"] = (
                    f"{attention}/{name}/bias",
                    rotated_bias if rotated else L.HEADS_IN_BIAS,
                )
        out = f"{key}.attention.o_proj"
        table[f"{out}.weight"] = (f"{attention}/attention_output/kernel", L.HEADS_OUT_WEIGHT)
        if hf.get("proj_bias", True):
            table[f"{out}.bias"] = (f"{attention}/attention_output/bias", L.IDENTITY)
        table[f"{key}.layer_scale1.lambda1"] = (f"{path}/attention_scale", L.IDENTITY)
        table[f"{key}.layer_scale2.lambda1"] = (f"{path}/mlp_scale", L.IDENTITY)
        table.update(L.torch_norm(f"{key}.norm2", f"{path}/mlp_norm"))
        for source, target in _mlp_layers(config, path):
            table[f"{key}.mlp.{source}.weight"] = (f"{target}/kernel", L.LINEAR)
            if mlp_bias:
                table[f"{key}.mlp.{source}.bias"] = (f"{target}/bias", L.IDENTITY)
    table.update(L.torch_norm("norm", PATHS["encoder_norm"]))
    return table


def _mlp_layers(config, path):
    if config.mlp == "swiglu":
        mlp = f"{path}/mlp"
        return (
            ("gate_proj", f"{mlp}/gate_dense"),
            ("up_proj", f"{mlp}/up_dense"),
            ("down_proj", f"{mlp}/down_dense"),
        )
    return (("up_proj", f"{path}/mlp_dense_1"), ("down_proj", f"{path}/mlp_dense_2"))


def _fills(config, hf):
    """Zeros for the biases our layers keep and the checkpoint does not have."""
    fills = {}
    for i in range(config.num_layers):
        path = block(i)
        for flag, variables in _BIASES.items():
            if not hf.get(flag, True):
                fills.update({f"{path}/{v}": 0.0 for v in variables})
        if not hf.get("mlp_bias", True):
            fills.update({f"{target}/bias": 0.0 for _, target in _mlp_layers(config, path)})
    return fills


def from_huggingface_dinov3(folder, hf, *, num_classes=None, **kwargs):
    """A keras_vit model from a `DINOv3ViTModel` folder (see `keras_vit.from_huggingface`).

    Args:
        folder: str. The `save_pretrained` folder.
        hf: dict. Its `config.json`.
        num_classes: optional int. A new zero-initialised head of this many classes on the
            pooled features; None (the default): no head, as `DINOv3ViTModel`.
        **kwargs: other `keras_vit.ViT` arguments (`image_size`, `pooling`,
            `dynamic_image_size`, ...).

    Returns:
        A functional `keras.Model` taking `(B, H, W, C)` images normalised with the
        ImageNet mean and std (DINOv3's image processor).

    Raises:
        ValueError: an unsupported config value, or weights that do not fit.
    """
    source = os.path.join(folder, "config.json")
    arguments = dinov3_arguments(hf, source=source)
    weights_path = H.weights_file(folder)
    arrays = normalize_names(read_state_dict(weights_path))
    num_classes, include_top = H.head_arguments_of(num_classes, kwargs)
    config = ViTConfig.from_variant(
        arguments.pop("variant"),
        **{
            **arguments,
            "pooling": "token",  # DINOv3ViTModel's pooler_output: the class token
            "num_classes": num_classes,
            "include_top": include_top,
            "name": kwargs.pop("name", None) or H.model_name(hf),
            **kwargs,
        },
    )
    model = build_model(config)
    skip = {}
    if "embeddings.mask_token" in arrays:
        shape = L.shape_of(arrays["embeddings.mask_token"])
        skip["embeddings.mask_token"] = f"dropped embeddings.mask_token {shape} (pre-training only)"
    L.load_state_dict(
        model,
        arrays,
        dinov3_name_table(config, hf),
        source=repr(weights_path),
        logger=logger,
        fills=_fills(config, hf),
        skip=skip,
    )
    return model
