"""transformers' ViTMAE folders (`model_type` `"vit_mae"`) <-> keras_vit masked autoencoders.

`from_huggingface` sends a `vit_mae` folder here. A `ViTMAEForPreTraining` folder (with its
`decoder.*` weights) becomes a `keras_vit.models.MaskedAutoencoder` whose `loss`, `logits` and
`mask` equal transformers' given the same `noise` (`mask_ratio` and `norm_pix_loss` read from
`config.json`); a `ViTMAEModel` folder (the encoder alone) becomes the plain `VisionTransformer`
encoder (`include_top=False` unless `num_classes` is given; MAE's fine-tuning starts there).
The encoder's names are transformers' ViT names (`keras_vit.weights.huggingface.vit`); the decoder's
are `decoder.decoder_embed`, `decoder.mask_token`, `decoder.decoder_pos_embed`,
`decoder.decoder_encoder.layer.{i}.*` (ViT layers), `decoder.decoder_norm` and
`decoder.decoder_pred`. `export_huggingface_mae` writes a `ViTMAEForPreTraining` folder back
through the same table.
"""

import logging
import os

from keras_vit.models.config import ViTConfig
from keras_vit.models.encoder import build_model
from keras_vit.models.mae import (
    DECODER_BLOCK,
    DECODER_EMBED,
    DECODER_NORM,
    DECODER_PRED,
    MaskedAutoencoder,
)
from keras_vit.weights import loading as L
from keras_vit.weights.huggingface.common import (
    family_config,
    load_arrays,
    vit_attention_rows,
    weights_file,
)
from keras_vit.weights.huggingface.vit import (
    huggingface_name_table,
    normalize_names,
    vit_arguments,
)
from keras_vit.weights.state_dict import read_state_dict

logger = logging.getLogger(__name__)

ARCHITECTURES = ("ViTMAEForPreTraining", "ViTMAEModel")
_norm, _dense = L.torch_norm, L.torch_linear


def mae_arguments(hf, source):
    """The encoder's `ViT` arguments of a ViTMAE `config.json` (as a ViT's), checked."""
    architectures = hf.get("architectures") or []
    unknown = [a for a in architectures if a not in ARCHITECTURES]
    if unknown:
        raise ValueError(
            f"{source}: architectures {unknown} are not read. Expected one of {ARCHITECTURES}."
        )
    plain = {k: v for k, v in hf.items() if k != "architectures"}
    arguments = vit_arguments({**plain, "model_type": "vit"}, source=source)
    if not arguments.pop("_qkv_bias"):
        raise ValueError(f"{source}: qkv_bias False is not supported for ViTMAE. Expected True.")
    return arguments


def _layer_rows(key, path):
    rows = {}
    rows.update(_norm(f"{key}.layernorm_before", f"{path}/attention_norm"))
    rows.update(vit_attention_rows(key, path))
    rows.update(_norm(f"{key}.layernorm_after", f"{path}/mlp_norm"))
    rows.update(_dense(f"{key}.intermediate.dense", f"{path}/mlp_dense_1"))
    rows.update(_dense(f"{key}.output.dense", f"{path}/mlp_dense_2"))
    return rows


def mae_name_table(model):
    """{transformers name: (variable path, transform)} of a `MaskedAutoencoder` (encoder names
    without the `vit.` prefix, as `normalize_names` leaves them)."""
    table = huggingface_name_table(model.encoder_config)
    table.update(_dense("decoder.decoder_embed", DECODER_EMBED))
    table["decoder.mask_token"] = (model.mask_token.path, L.IDENTITY)
    table["decoder.decoder_pos_embed"] = (model.decoder_pos_embed.path, L.IDENTITY)
    for i in range(model.decoder_num_layers):
        table.update(_layer_rows(f"decoder.decoder_encoder.layer.{i}", DECODER_BLOCK.format(i)))
    table.update(_norm("decoder.decoder_norm", DECODER_NORM))
    table.update(_dense("decoder.decoder_pred", DECODER_PRED))
    return table


def from_huggingface_mae(folder, hf, num_classes=None, **kwargs):
    """A `MaskedAutoencoder` (`ViTMAEForPreTraining`) or its encoder (`ViTMAEModel`).

    Args:
        folder: the `save_pretrained` folder.
        hf: its `config.json` (a dict).
        num_classes: optional int: a `ViTMAEModel` encoder with a new zero head.
        **kwargs: `ViT` arguments of the encoder (a `ViTMAEModel`), or `MaskedAutoencoder`
            arguments (`seed`, `name`) of a pre-training model.
    """
    source = os.path.join(folder, "config.json")
    arguments = mae_arguments(hf, source)
    weights_path = weights_file(folder)
    arrays = normalize_names(read_state_dict(weights_path))
    if not any(key.startswith("decoder.") for key in arrays):  # ViTMAEModel: the encoder
        include_top = kwargs.pop("include_top", num_classes is not None)
        config = family_config(arguments, hf, num_classes, include_top, kwargs)
        model = build_model(config)
        table = huggingface_name_table(config)
        load_arrays(model, arrays, table, weights_path, logger)
        return model
    image_size = kwargs.pop("image_size", None)
    if image_size is not None and ViTConfig.from_variant(
        "B/16", image_size=image_size
    ).image_size != tuple(arguments["image_size"]):
        raise ValueError(
            f"{source}: a ViTMAEForPreTraining model keeps its image size "
            f"{tuple(arguments['image_size'])} (its decoder's position table). "
            f"Received: image_size={image_size!r}"
        )
    config = family_config(arguments, hf, None, False, {"pooling": None})
    model = MaskedAutoencoder(
        config,
        mask_ratio=float(hf.get("mask_ratio", 0.75)),
        decoder_hidden_dim=int(hf.get("decoder_hidden_size", 512)),
        decoder_num_layers=int(hf.get("decoder_num_hidden_layers", 8)),
        decoder_num_heads=int(hf.get("decoder_num_attention_heads", 16)),
        decoder_mlp_dim=int(hf.get("decoder_intermediate_size", 2048)),
        norm_pix_loss=bool(hf.get("norm_pix_loss", False)),
        **kwargs,
    )
    L.load_state_dict(
        model, arrays, mae_name_table(model), source=repr(weights_path), logger=logger
    )
    return model


def mae_huggingface_config(model):
    """The `config.json` (a dict) of a `ViTMAEForPreTraining` equal to `model`."""
    from keras_vit.weights.huggingface.export import huggingface_config

    hf = huggingface_config(model.encoder_config)
    hf.update(
        architectures=["ViTMAEForPreTraining"],
        model_type="vit_mae",
        mask_ratio=model.mask_ratio,
        norm_pix_loss=model.norm_pix_loss,
        decoder_hidden_size=model.decoder_hidden_dim,
        decoder_num_hidden_layers=model.decoder_num_layers,
        decoder_num_attention_heads=model.decoder_num_heads,
        decoder_intermediate_size=model.decoder_mlp_dim,
    )
    return hf


def export_huggingface_mae(model, folder, *, overwrite=False):
    """Writes a `MaskedAutoencoder` as a transformers `ViTMAEForPreTraining` folder.

    `keras_vit.export_huggingface(model, folder)` calls this for a `MaskedAutoencoder` (the
    family registers it). The encoder must be one transformers' ViT expresses (a learned or
    sincos position table with a class token; refused naming the option otherwise); the folder
    is checked as `export_huggingface` checks it (its name, folders or existing files where the
    files go, permissions) and nothing is written before every check passes; an existing
    `config.json` / `model.safetensors` is replaced only with `overwrite=True`, the files get
    the mode the umask gives. Returns the folder as a str.
    """
    from keras_vit.weights.huggingface.export import (
        check_export_folder,
        check_huggingface_expressible,
        write_export_folder,
    )
    from keras_vit.weights.writing import (
        check_everything_exported,
        check_float_variables,
        state_dict_from_table,
    )

    if not isinstance(model, MaskedAutoencoder):
        raise ValueError(
            f"export_huggingface_mae expects a MaskedAutoencoder. Received: {type(model).__name__}"
        )
    config = model.encoder_config
    check_huggingface_expressible(config)
    if config.rotary_embedding is not None or config.position_embedding != "learned":
        raise ValueError(
            "transformers' ViTMAE has a (fixed) position table with a class-token row. "
            f"Received: position_embedding={config.position_embedding!r}, "
            f"rotary_embedding={config.rotary_embedding!r}"
        )
    if not config.class_token:
        raise ValueError("transformers' ViTMAE has a class token. Received: class_token=False")
    check_float_variables(model, "Hugging Face transformers")
    folder = check_export_folder(folder, overwrite)
    table = mae_name_table(model)
    arrays, used = state_dict_from_table(model, table)
    used.update(v.path for v in model.weights if "seed_generator" in v.path)
    check_everything_exported(model, used, "Hugging Face transformers")
    arrays = {k if k.startswith("decoder.") else f"vit.{k}": v for k, v in arrays.items()}
    return write_export_folder(folder, arrays, mae_huggingface_config(model), config)
