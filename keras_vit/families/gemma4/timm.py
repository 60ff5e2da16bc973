"""timm's Gemma 4 vision towers -> `Gemma4VisionTower`: the family's own `from_timm` reader.

`from_timm_gemma4(name, checkpoint)` builds the tower a `gemma4_vit_*` name describes
(`timm_names`) and assigns timm's state dict (`Gemma4VitEncoder`'s names, or
`Gemma4VitClassifier`'s under `encoder.` with `head.*`) through one name table
(`timm_name_table`): every missing, unexpected or misshapen tensor is reported together, and
nothing is assigned unless all fit. `keras_vit.from_timm` hands `gemma4_vit_*` names here
(`keras_vit.weights.registry`: this family's `timm_reader`).
"""

import numpy as np

from keras_vit.families.gemma4.config import Gemma4Config
from keras_vit.families.gemma4.model import Gemma4VisionTower
from keras_vit.weights.state_dict import read_state_dict
from keras_vit.weights.timm.names import parse_timm_name

__all__ = ["from_timm_gemma4", "gemma4_config", "load_timm_gemma4", "timm_name_table"]

BOUNDS = ("input_min", "input_max", "output_min", "output_max")


def gemma4_config(name, *, image_size=None, num_classes=None, **kwargs):
    """The `Gemma4Config` of a timm `gemma4_vit_*` name; keyword arguments override it.

    >>> gemma4_config("gemma4_vit_570m_enc", num_layers=1).standardize
    True
    """
    spec = parse_timm_name(name)
    arguments = {**spec.arguments, "name": spec.name}
    arguments["image_size"] = spec.image_size if image_size is None else image_size
    arguments["num_classes"] = spec.num_classes if num_classes is None else num_classes
    return Gemma4Config.from_dict({**arguments, **kwargs})


def _linear(rows, layer, prefix, clip):
    rows[f"{prefix}.linear.weight"] = (layer.kernel, np.transpose)
    if clip:
        for bound in BOUNDS:
            rows[f"{prefix}.{bound}"] = (getattr(layer, bound), None)


def timm_name_table(model):
    """`{timm name: (Keras variable, transform or None)}` of a built `Gemma4VisionTower`,
    in `Gemma4VitEncoder`'s names (a classifier checkpoint's carry an `encoder.` prefix)."""
    c = model.config
    rows = {
        "patch_embed.input_proj.weight": (model.patch_embedding.kernel, np.transpose),
        "patch_embed.position_embedding_table": (model.patch_embedding.position_table, None),
    }
    for i, block in enumerate(model.blocks):
        p, attention, mlp = f"blocks.{i}", block.attention, block.mlp
        for theirs, ours in zip(
            "qkvo", (attention.query, attention.key, attention.value, attention.out), strict=True
        ):
            _linear(rows, ours, f"{p}.attn.{theirs}_proj", c.clip)
        rows[f"{p}.attn.q_norm.weight"] = (attention.query_norm.gain, None)
        rows[f"{p}.attn.k_norm.weight"] = (attention.key_norm.gain, None)
        for j, norm in enumerate(block.norms):
            rows[f"{p}.norm{j + 1}.weight"] = (norm.gain, None)
        for theirs, ours in (
            ("gate", mlp.gate_dense),
            ("up", mlp.up_dense),
            ("down", mlp.down_dense),
        ):
            _linear(rows, ours, f"{p}.mlp.{theirs}_proj", c.clip)
    if c.standardize:
        rows["std_bias"] = (model.standardization.bias, None)
        rows["std_scale"] = (model.standardization.scale, None)
    if c.num_classes:
        rows["head.weight"] = (model.head.kernel, np.transpose)
        rows["head.bias"] = (model.head.bias, None)
    return rows


def _encoder_names(arrays):
    """A classifier's state dict in the encoder's names (`encoder.` dropped; `std_*`, which
    timm's classifier never applies, dropped unless the tower standardises)."""
    if not any(k.startswith("encoder.") for k in arrays):
        return dict(arrays)
    return {k.removeprefix("encoder."): v for k, v in arrays.items()}


def load_timm_gemma4(model, state_dict):
    """Assigns a timm Gemma 4 state dict (a dict of arrays / tensors or a checkpoint path).

    Raises:
        ValueError: listing every missing, unexpected and misshapen tensor (nothing assigned).
    """
    if not model.built:
        model.build()
    arrays = _encoder_names(read_state_dict(state_dict))
    if not model.config.standardize:  # the classifier's unused std buffers
        arrays = {k: v for k, v in arrays.items() if k not in ("std_bias", "std_scale")}
    table = timm_name_table(model)
    missing = sorted(set(table) - set(arrays))
    unexpected = sorted(set(arrays) - set(table))
    values, misshapen = {}, []
    for key in sorted(set(table) & set(arrays)):
        variable, transform = table[key]
        value = np.asarray(arrays[key])
        value = transform(value) if transform is not None else value
        if tuple(value.shape) != tuple(variable.shape):
            misshapen.append(f"{key}: {tuple(value.shape)} for {tuple(variable.shape)}")
        values[key] = value
    if missing or unexpected or misshapen:
        raise ValueError(
            f"The checkpoint does not fit {model.name} (nothing was assigned). Missing: "
            f"{missing[:12]}{' ...' if len(missing) > 12 else ''}; unexpected: "
            f"{unexpected[:12]}{' ...' if len(unexpected) > 12 else ''}; misshapen: {misshapen}"
        )
    for key, value in values.items():
        variable = table[key][0]
        variable.assign(value.astype(variable.dtype))
    return model


def from_timm_gemma4(name, checkpoint=None, *, image_size=None, num_classes=None, **kwargs):
    """A `Gemma4VisionTower` for a timm `gemma4_vit_*` name, with a checkpoint's weights.

    Args:
        name: str. A timm name (`gemma4_vit_167m`, `gemma4_vit_570m_enc.gemma4_31b_it`, ...).
        checkpoint: optional path or state dict of timm's model (`model.state_dict()`).
        image_size: optional int or pair. Defaults to 768.
        num_classes: optional int. Defaults to the checkpoint's head, else 0.
        **kwargs: other `Gemma4Config` fields (`num_layers=2`, ...).

    Returns:
        A built `Gemma4VisionTower` taking `(B, H, W, 3)` images in [0, 1].

    Example:

    >>> model = from_timm_gemma4("gemma4_vit_167m_enc", image_size=96, num_layers=1,
    ...     hidden_dim=32, num_heads=2, head_dim=16, mlp_dim=64, position_table_size=8)
    >>> model.config.pooling, model.config.clip
    ('soft', True)
    """
    kwargs.pop("preprocessing", None)  # timm's config: mean 0, std 1 (the tower rescales)
    if kwargs.pop("dynamic_image_size", None):
        raise ValueError(
            "Gemma 4's towers take the image size of their config (their position table "
            "covers any grid up to position_table_size): dynamic_image_size is not needed."
        )
    arrays = None if checkpoint is None else read_state_dict(checkpoint)
    if num_classes is None and arrays is not None:
        head = arrays.get("head.weight")
        num_classes = int(head.shape[0]) if head is not None and head.ndim == 2 else 0
    model = Gemma4VisionTower(
        gemma4_config(name, image_size=image_size, num_classes=num_classes, **kwargs)
    )
    model.build()
    if arrays is not None:
        load_timm_gemma4(model, arrays)
    return model
