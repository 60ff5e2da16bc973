"""transformers' DINOv2 (`Dinov2Model`, `Dinov2WithRegistersModel`) folders -> keras_vit models.

`from_huggingface(folder)` sends a folder whose `config.json` says `model_type: "dinov2"` or
`"dinov2_with_registers"` here (the family registry: `keras_vit.families`). The model: a
class token (and `num_register_tokens` registers after it), a learned position embedding,
LayerScale, the GELU MLP (`mlp_ratio`) or, with `use_swiglu_ffn`, the SwiGLU MLP of ViT-g/14
(hidden width `(int(hidden_size * mlp_ratio * 2 / 3) + 7) // 8 * 8`), the final `layernorm`.

Weight names: the files transformers writes (and the Hub's checkpoints) keep the names of
transformers 4 (`attention.attention.query`, `attention.output.dense`, the packed
`mlp.weights_in` = gate then up, `mlp.weights_out`); transformers 5 renames them on load
(`attention.q_proj` / `o_proj`, `mlp.gate_proj` / `up_proj` / `down_proj`). Both read here:
`normalize_names` maps either to the transformers 5 names the table uses.

What the model returns: a `Dinov2Model` folder gives `include_top=False`, `pooling="token"`
(`pooler_output`, the class token of `last_hidden_state`); `pooling=None` the whole
`last_hidden_state` (class token, registers, patches). A `Dinov2ForImageClassification` folder
keeps its classifier on `pooling="token_gap"`: the class token and the mean of the patch tokens
(registers left out) concatenated, as transformers does.

Position embedding at another `image_size`: resampled once at load time as transformers does at
every call: `Dinov2Model` with bicubic, `A = -0.75`, no antialiasing (timm's `from_timm` of the
same weights antialiases: docs/weights.md gives the difference); `Dinov2WithRegistersModel`
with `antialias=True` (as timm). With registers the class token's position row is added to the
class token at load time (`prefix_position_embedding=False`, as timm's DINOv2 with registers):
the registers get no position, as in transformers.
"""

import logging
import os

import numpy as np

from keras_vit.layers.position_embedding import resample_position_embedding
from keras_vit.models.encoder import build_model
from keras_vit.models.variable_paths import PATHS, block
from keras_vit.weights import loading as L
from keras_vit.weights.huggingface import common as H
from keras_vit.weights.state_dict import read_state_dict

logger = logging.getLogger(__name__)

ARCHITECTURES = {
    "dinov2": ("Dinov2Model", "Dinov2ForImageClassification"),
    "dinov2_with_registers": (
        "Dinov2WithRegistersModel",
        "Dinov2WithRegistersForImageClassification",
    ),
}
# transformers 4 / file names -> transformers 5 (in-memory) names.
_RENAMES = (
    ("attention.attention.query.", "attention.q_proj."),
    ("attention.attention.key.", "attention.k_proj."),
    ("attention.attention.value.", "attention.v_proj."),
    ("attention.output.dense.", "attention.o_proj."),
    ("mlp.weights_out.", "mlp.down_proj."),
)


def swiglu_width(hidden_size, mlp_ratio):
    """`Dinov2SwiGLUFFN`'s hidden width: two thirds of the MLP's, rounded up to 8.

    Example:

    >>> swiglu_width(1536, 4)  # ViT-g/14
    4096
    """
    hidden = int(hidden_size * mlp_ratio)
    return (int(hidden * 2 / 3) + 7) // 8 * 8


def dinov2_arguments(config, source="config.json"):
    """`keras_vit.ViT` arguments of a transformers `Dinov2Config` (or with registers) dict.

    Args:
        config: dict, the contents of `config.json`.
        source: str. Where it comes from, for messages.

    Returns:
        dict of `ViT` arguments and the private key `_qkv_bias`.

    Raises:
        ValueError: a `model_type`, architecture or activation keras_vit does not read, naming
            the value and the supported ones.

    Example:

    >>> args = dinov2_arguments({"model_type": "dinov2", "hidden_size": 32,
    ...     "num_attention_heads": 2, "use_swiglu_ffn": True})
    >>> args["mlp"], args["mlp_dim"], args["layer_scale_init_value"]
    ('swiglu', 88, 1.0)
    """
    model_type = config.get("model_type")
    if model_type not in ARCHITECTURES:
        raise ValueError(
            f"{source}: model_type {model_type!r} is not DINOv2. Expected one of "
            f"{sorted(ARCHITECTURES)}."
        )
    H.check_architectures(config, ARCHITECTURES[model_type], source)
    swiglu = bool(config.get("use_swiglu_ffn", False))
    activation = config.get("hidden_act", "gelu")
    if not swiglu and activation not in H.ACTIVATIONS:
        raise ValueError(
            f"{source}: hidden_act {activation!r} is not supported. Expected one of "
            f"{sorted(H.ACTIVATIONS)} (use_swiglu_ffn ignores it: SiLU)."
        )
    registers = int(config.get("num_register_tokens", 4)) if model_type != "dinov2" else 0
    try:
        sizes = H.size_arguments(config, source, patch_size=14, layer_norm_eps=1e-6)
        hidden, ratio = sizes["hidden_dim"], float(config.get("mlp_ratio", 4))
        arguments = dict(
            sizes,
            mlp_dim=swiglu_width(hidden, ratio) if swiglu else int(hidden * ratio),
            approximate_gelu=H.ACTIVATIONS.get(activation, False),
            mlp="swiglu" if swiglu else "mlp",
            class_token=True,
            num_register_tokens=registers,
            prefix_position_embedding=not registers,
            layer_scale_init_value=float(config.get("layerscale_value", 1.0)),
        )
    except (TypeError, ValueError) as error:
        raise ValueError(f"{source}: {error}") from error
    arguments["_qkv_bias"] = bool(config.get("qkv_bias", True))
    return arguments


def normalize_names(arrays):
    """`dinov2.` prefixes stripped, file names -> transformers 5's, `weights_in` split.

    Example:

    >>> import numpy as np
    >>> names = normalize_names({"dinov2.encoder.layer.0.attention.attention.query.bias": 1,
    ...     "encoder.layer.0.mlp.weights_in.bias": np.arange(4)})
    >>> sorted(names)  # doctest: +NORMALIZE_WHITESPACE
    ['encoder.layer.0.attention.q_proj.bias', 'encoder.layer.0.mlp.gate_proj.bias',
     'encoder.layer.0.mlp.up_proj.bias']
    """
    out = {}
    for key, value in arrays.items():
        key = key[len("dinov2.") :] if key.startswith("dinov2.") else key
        for old, new in _RENAMES:
            key = key.replace(old, new)
        if ".mlp.weights_in." in key:
            value = np.asarray(value)
            if value.shape[0] % 2:
                raise ValueError(
                    f"{key}: the packed SwiGLU input projection needs an even first dimension. "
                    f"Received shape {value.shape}"
                )
            gate, up = np.split(value, 2, axis=0)
            out[key.replace(".weights_in.", ".gate_proj.")] = gate
            out[key.replace(".weights_in.", ".up_proj.")] = up
            continue
        out[key] = value
    return out


def _fold_class_position(arrays):
    """With registers: the class token's position row added to the class token (timm's layout)."""
    posemb = arrays.get("embeddings.position_embeddings")
    cls = arrays.get("embeddings.cls_token")
    if posemb is None or cls is None or np.ndim(posemb) != 3 or np.ndim(cls) != 3:
        return arrays  # the loader names what is missing or mis-shaped
    posemb, cls = np.asarray(posemb), np.asarray(cls)
    return {
        **arrays,
        "embeddings.cls_token": cls + posemb[:, :1],
        "embeddings.position_embeddings": posemb[:, 1:],
    }


def dinov2_name_table(config, *, qkv_bias=True, antialias=False):
    """The transformers 5 DINOv2 weight names for the model `config` describes.

    Args:
        config: the `keras_vit.models.config.ViTConfig` of the model.
        qkv_bias: bool. Whether the checkpoint has q/k/v biases. Defaults to True.
        antialias: bool. How another grid's position embedding is resampled (bicubic):
            False for `Dinov2Model`, True with registers. Defaults to False.

    Returns:
        dict {name: (variable path, transform)} for `keras_vit.weights.loading`.

    Example:

    >>> from keras_vit.models.config import ViTConfig
    >>> config = ViTConfig.from_variant("mu/8", image_size=32, mlp="swiglu")
    >>> dinov2_name_table(config)["encoder.layer.0.mlp.gate_proj.weight"][0]
    'encoderblock_0/mlp/gate_dense/kernel'
    """
    prefix_rows = int(config.prefix_position_embedding)

    def resample(posemb, grid, prefix):
        return resample_position_embedding(
            posemb, grid, prefix, interpolation="bicubic", antialias=antialias
        )

    table = H.embedding_rows(L.position_embedding(config.grid_size, prefix_rows, resample))
    if config.num_register_tokens:
        table["embeddings.register_tokens"] = (PATHS["register_tokens"], L.IDENTITY)
    for i in range(config.num_layers):
        key, path = f"encoder.layer.{i}", block(i)
        table.update(L.torch_norm(f"{key}.norm1", f"{path}/attention_norm"))
        names = ("query", "key", "value")
        projections = {name: f"{key}.attention.{name[0]}_proj" for name in names}
        biases = names if qkv_bias else ()
        table.update(H.attention_rows(path, projections, f"{key}.attention.o_proj", biases))
        table[f"{key}.layer_scale1.lambda1"] = (f"{path}/attention_scale", L.IDENTITY)
        table[f"{key}.layer_scale2.lambda1"] = (f"{path}/mlp_scale", L.IDENTITY)
        table.update(L.torch_norm(f"{key}.norm2", f"{path}/mlp_norm"))
        if config.mlp == "swiglu":
            mlp = f"{path}/mlp"
            for source in ("gate", "up", "down"):
                table.update(L.torch_linear(f"{key}.mlp.{source}_proj", f"{mlp}/{source}_dense"))
        else:
            table.update(L.torch_linear(f"{key}.mlp.fc1", f"{path}/mlp_dense_1"))
            table.update(L.torch_linear(f"{key}.mlp.fc2", f"{path}/mlp_dense_2"))
    table.update(L.torch_norm("layernorm", PATHS["encoder_norm"]))
    if config.include_top:
        table.update(L.torch_linear("classifier", PATHS["head"]))
    return table


def _dropped(key):
    """Why DINOv2's `key` is left out (`huggingface.skip_notes`), or None."""
    return " (masked pre-training only)" if key == "embeddings.mask_token" else None


def from_huggingface_dinov2(folder, hf, *, num_classes=None, **kwargs):
    """A keras_vit model from a DINOv2 folder (see `keras_vit.from_huggingface`).

    Args:
        folder: str. The `save_pretrained` folder.
        hf: dict. Its `config.json`.
        num_classes: optional int. Defaults to the classifier's class count
            (`Dinov2ForImageClassification`), or no head (`Dinov2Model`). Another count gives
            a new zero-initialised head on the same `token_gap` pooling.
        **kwargs: other `keras_vit.ViT` arguments (`image_size`, `pooling`, `include_top`, ...).

    Returns:
        A functional `keras.Model` taking `(B, H, W, C)` images normalised with the ImageNet
        mean and std (DINOv2's image processor).

    Raises:
        ValueError: an unsupported config value, or weights that do not fit.
    """
    source = os.path.join(folder, "config.json")
    arguments = dinov2_arguments(hf, source=source)
    qkv_bias = arguments.pop("_qkv_bias")
    weights_path = H.weights_file(folder)
    arrays = normalize_names(read_state_dict(weights_path))
    if arguments["num_register_tokens"]:
        arrays = _fold_class_position(arrays)
    num_classes, classifier_classes, include_top = H.head_arguments(arrays, num_classes, kwargs)
    arguments["pooling"] = "token_gap" if include_top else "token"
    config = H.family_config(arguments, hf, num_classes, include_top, kwargs)
    model = build_model(config)
    table = dinov2_name_table(config, qkv_bias=qkv_bias, antialias=hf.get("model_type") != "dinov2")
    fills = {} if qkv_bias else L.zero_qkv_biases(config.num_layers)
    skip = H.skip_notes(arrays, config, classifier_classes, _dropped)
    H.load_arrays(model, arrays, table, weights_path, logger, fills=fills, skip=skip)
    return model
