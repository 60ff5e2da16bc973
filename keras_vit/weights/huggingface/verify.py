"""Export's self-check for transformers: the model a written `config.json` describes has exactly
the keys and shapes of the `model.safetensors` written beside it.

`check_huggingface_state_dict(hf_config, arrays)` builds the class of `config.json`'s
`architectures` from that config, the way `from_pretrained` does, on PyTorch's meta device (no
memory, no weights) where transformers imports, and compares its state dict with the arrays
about to be written; where transformers is missing it compares them with keras_vit's declaration
of transformers' ViT / ViTMAE state dicts (`declared_state_shapes`, checked against
transformers in the tests). A difference is a `ValueError`, raised before anything is written.
A headless `ViTModel` is checked without the pooler (`add_pooling_layer=False`, its strict
load).
"""

import importlib.util
import sys

__all__ = ["check_huggingface_state_dict", "declared_state_shapes", "importable_transformers"]


def importable_transformers():
    """transformers, imported, or None where it is not installed, fails to import, or would
    load triton after TensorFlow (keras_vit/_import_order.py)."""
    if importlib.util.find_spec("transformers") is None:
        return None
    if "tensorflow" in sys.modules and "triton" not in sys.modules:
        if importlib.util.find_spec("triton") is not None:
            return None
    try:
        import torch  # noqa: F401
        import transformers
    except Exception:  # noqa: BLE001 - a broken transformers: the declaration checks instead
        return None
    return transformers


def _linear(prefix, out_features, in_features, bias=True):
    shapes = {f"{prefix}.weight": (out_features, in_features)}
    if bias:
        shapes[f"{prefix}.bias"] = (out_features,)
    return shapes


def _norm(prefix, features):
    return {f"{prefix}.weight": (features,), f"{prefix}.bias": (features,)}


def _layers(prefix, count, width, intermediate, qkv_bias):
    shapes = {}
    for i in range(count):
        key = f"{prefix}.{i}"
        for name in ("query", "key", "value"):
            shapes.update(_linear(f"{key}.attention.attention.{name}", width, width, qkv_bias))
        shapes.update(_linear(f"{key}.attention.output.dense", width, width))
        shapes.update(_linear(f"{key}.intermediate.dense", intermediate, width))
        shapes.update(_linear(f"{key}.output.dense", width, intermediate))
        shapes.update(_norm(f"{key}.layernorm_before", width))
        shapes.update(_norm(f"{key}.layernorm_after", width))
    return shapes


def _pair(value):
    return tuple(value) if isinstance(value, (list, tuple)) else (value, value)


def declared_state_shapes(hf_config):
    """`{key: shape}` of the state dict of `config.json`'s model: `ViTModel` (no pooler),
    `ViTForImageClassification` or `ViTMAEForPreTraining`.

    Raises:
        ValueError: another architecture (not declared here).

    Example:

    >>> shapes = declared_state_shapes({"architectures": ["ViTModel"], "hidden_size": 32,
    ...     "num_hidden_layers": 1, "intermediate_size": 64, "image_size": 16, "patch_size": 8})
    >>> shapes["embeddings.position_embeddings"], shapes["layernorm.weight"]
    ((1, 5, 32), (32,))
    """
    (architecture,) = hf_config.get("architectures") or [None]
    known = ("ViTModel", "ViTForImageClassification", "ViTMAEForPreTraining")
    if architecture not in known:
        raise ValueError(f"No declared state dict of transformers' {architecture!r}: {known}")
    width, layers = hf_config["hidden_size"], hf_config["num_hidden_layers"]
    height, wide = _pair(hf_config["image_size"])
    patch_h, patch_w = _pair(hf_config["patch_size"])
    channels = hf_config.get("num_channels", 3)
    tokens = (height // patch_h) * (wide // patch_w)
    shapes = {
        "embeddings.cls_token": (1, 1, width),
        "embeddings.position_embeddings": (1, tokens + 1, width),
        **_linear("embeddings.patch_embeddings.projection", width, channels),
    }
    shapes["embeddings.patch_embeddings.projection.weight"] += (patch_h, patch_w)
    shapes.update(_layers("encoder.layer", layers, width, hf_config["intermediate_size"],
                          hf_config.get("qkv_bias", True)))  # fmt: skip
    shapes.update(_norm("layernorm", width))
    if architecture == "ViTModel":
        return shapes
    shapes = {f"vit.{k}": v for k, v in shapes.items()}
    if architecture == "ViTForImageClassification":
        return {**shapes, **_linear("classifier", len(hf_config["id2label"]), width)}
    decoder = hf_config["decoder_hidden_size"]
    decoder_layers = hf_config["decoder_num_hidden_layers"]
    shapes.update(
        {
            "decoder.mask_token": (1, 1, decoder),
            "decoder.decoder_pos_embed": (1, tokens + 1, decoder),
            **_linear("decoder.decoder_embed", decoder, width),
            **_layers("decoder.decoder_encoder.layer", decoder_layers, decoder,
                      hf_config["decoder_intermediate_size"], hf_config.get("qkv_bias", True)),
            **_norm("decoder.decoder_norm", decoder),
            **_linear("decoder.decoder_pred", patch_h * patch_w * channels, decoder),
        }
    )  # fmt: skip
    return shapes


def _renamed(model, shapes):
    """`shapes` under the names `from_pretrained` gives the checkpoint's keys (transformers 5
    renames its ViTs' weights on load: `encoder.layer.{i}.attention.attention.query` ->
    `layers.{i}.attention.q_proj`, ...); unchanged where transformers renames nothing."""
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import (
            WeightConverter,
            WeightRenaming,
            rename_source_key,
        )
    except ImportError:  # transformers 4: the state dict's own names
        return shapes
    conversions = get_model_conversion_mapping(model)
    renamings = [c for c in conversions if isinstance(c, WeightRenaming)]
    converters = [c for c in conversions if isinstance(c, WeightConverter)]
    meta = model.state_dict()
    return {
        rename_source_key(key, renamings, converters, model.base_model_prefix, meta)[0]: shape
        for key, shape in shapes.items()
    }


def expected_state_shapes(hf_config, shapes):
    """`(expected, written, source)`: the `{key: shape}` of `hf_config`'s model and the written
    `shapes` under the names its `from_pretrained` reads them as, from transformers' model on
    the meta device (`"transformers"`), or the declaration (`"keras_vit's declaration"`)."""
    transformers = importable_transformers()
    if transformers is None:
        return declared_state_shapes(hf_config), shapes, "keras_vit's declaration"
    import torch

    (architecture,) = hf_config["architectures"]
    fields = {k: v for k, v in hf_config.items() if k not in ("architectures", "model_type")}
    config = transformers.AutoConfig.for_model(hf_config["model_type"], **fields)
    options = {"add_pooling_layer": False} if architecture == "ViTModel" else {}
    with torch.device("meta"):
        model = getattr(transformers, architecture)(config, **options)
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    return expected, _renamed(model, shapes), "transformers"


def check_huggingface_state_dict(hf_config, arrays):
    """Raises a `ValueError` unless `arrays` are exactly the state dict of `hf_config`'s model.

    Returns:
        The source of the expectation (`"transformers"` or `"keras_vit's declaration"`).
    """
    written = {k: tuple(v.shape) for k, v in arrays.items()}
    expected, ours, source = expected_state_shapes(hf_config, written)
    missing = sorted(set(expected) - set(ours))
    unexpected = sorted(set(ours) - set(expected))
    shapes = sorted(
        f"{k}: config.json's model {expected[k]}, written {ours[k]}"
        for k in set(expected) & set(ours)
        if tuple(expected[k]) != ours[k]
    )
    if missing or unexpected or shapes:
        raise ValueError(
            f"export_huggingface would write weights that the {hf_config['architectures'][0]} "
            f"of its config.json does not load (checked against {source}); nothing was "
            f"written. Missing: {missing[:8]}{' ...' if len(missing) > 8 else ''}; "
            f"unexpected: {unexpected[:8]}{' ...' if len(unexpected) > 8 else ''}; other "
            f"shapes: {shapes[:8]}."
        )
    return source
