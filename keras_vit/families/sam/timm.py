"""timm's SAM image encoders -> `SAMImageEncoder`: the family's own `from_timm` reader.

`from_timm_sam(name, checkpoint)` builds the encoder a `samvit_*` name describes (`timm_names`,
overridden by `SAMConfig` fields) and loads timm's state dict (`VisionTransformerSAM`'s names;
an original SAM checkpoint's `image_encoder.*` too, as timm's `checkpoint_filter_fn` reads it)
through one name table and the strict loader (`keras_vit.weights.loading`): every missing,
unexpected or misshapen tensor is reported together and nothing is assigned unless all fit.
A model of another image size than the checkpoint's gets the position grid resampled (bicubic,
antialiased) and the global blocks' relative-position tables resized (linear), which is what
timm computes at every call when it runs such a checkpoint on such images.
`keras_vit.from_timm` hands `samvit_*` names here (`keras_vit.weights.registry`).
"""

import logging

import numpy as np

from keras_vit.families.sam.config import SAMConfig
from keras_vit.families.sam.model import SAMImageEncoder
from keras_vit.layers.decomposed_position import linear_resize_matrix
from keras_vit.layers.grid_position_embedding import resample_grid_table
from keras_vit.weights import loading as L
from keras_vit.weights.state_dict import read_state_dict
from keras_vit.weights.timm.input_spec import timm_input_spec
from keras_vit.weights.timm.names import parse_timm_name

__all__ = ["from_timm_sam", "load_timm_sam", "sam_config", "timm_name_table"]

logger = logging.getLogger(__name__)

HEAD_KEYS = ("head.fc.weight", "head.fc.bias")


def sam_config(name, *, image_size=None, num_classes=None, **kwargs):
    """The `SAMConfig` of a timm `samvit_*` name; keyword arguments (`SAMConfig` fields)
    override it.

    >>> config = sam_config("samvit_base_patch16", num_layers=2, global_attention_indexes=(1,))
    >>> config.window_size, config.neck_dim, config.grid_size, config.num_classes
    (14, 256, (64, 64), 0)
    """
    spec = parse_timm_name(name)
    arguments = {**spec.arguments, "name": spec.name}
    arguments["image_size"] = spec.image_size if image_size is None else image_size
    arguments["num_classes"] = spec.num_classes if num_classes is None else num_classes
    return SAMConfig.from_dict({**arguments, **kwargs})


def _grid_table(array, shapes):
    """timm's `pos_embed` `(1, h, w, D)`, resampled to the model's grid if it has another."""
    (expected,) = shapes
    if array.ndim != 4 or array.shape[0] != 1 or array.shape[3] != expected[3]:
        raise L.Mismatch(f"found {L.shape_of(array)}")
    return (resample_grid_table(array, expected[1:3]),)


def _relative_table(array, shapes):
    """A `(2s - 1, C)` relative-position table, resized linearly to the model's length."""
    (expected,) = shapes
    if array.ndim != 2 or array.shape[1] != expected[1]:
        raise L.Mismatch(f"found {L.shape_of(array)}")
    if array.shape[0] == expected[0]:
        return (array,)
    return (linear_resize_matrix(array.shape[0], expected[0]) @ array.astype("float32"),)


GRID_TABLE = L.Transform("grid_position_embedding", lambda shapes: shapes[0], _grid_table,
                         exact=False)  # fmt: skip
RELATIVE_TABLE = L.Transform("relative_position_table", lambda shapes: shapes[0],
                             _relative_table, exact=False)  # fmt: skip


def _prefix(variable):
    """The layer path of a variable (`block_0/attention/qkv/kernel` -> `block_0/attention/qkv`)."""
    return variable.path.rsplit("/", 1)[0]


def timm_name_table(model):
    """`{timm key: (Keras variable path, Transform)}` of a `SAMImageEncoder`, in timm's
    `VisionTransformerSAM` state-dict order."""
    c = model.config
    patch = model.patch_embedding
    table = {}
    if c.absolute_position:
        table["pos_embed"] = (model.position_embedding.table.path, GRID_TABLE)
    table["patch_embed.proj.weight"] = (patch.kernel.path, L.CONV)
    table["patch_embed.proj.bias"] = (patch.bias.path, L.IDENTITY)
    for i, block in enumerate(model.blocks):
        key, attention = f"blocks.{i}", block.attention
        table.update(L.torch_norm(f"{key}.norm1", _prefix(block.attention_norm.gamma)))
        if c.relative_position:  # the attention's own parameters come before its layers'
            table[f"{key}.attn.rel_pos_h"] = (attention.relative_position_h.path, RELATIVE_TABLE)
            table[f"{key}.attn.rel_pos_w"] = (attention.relative_position_w.path, RELATIVE_TABLE)
        table.update(L.torch_linear(f"{key}.attn.qkv", _prefix(attention.qkv.kernel)))
        if not c.qkv_bias:
            del table[f"{key}.attn.qkv.bias"]
        table.update(L.torch_linear(f"{key}.attn.proj", _prefix(attention.out.kernel)))
        table.update(L.torch_norm(f"{key}.norm2", _prefix(block.mlp_norm.gamma)))
        table.update(L.torch_linear(f"{key}.mlp.fc1", _prefix(block.mlp_dense_1.kernel)))
        table.update(L.torch_linear(f"{key}.mlp.fc2", _prefix(block.mlp_dense_2.kernel)))
    if c.neck_dim:
        conv_1, norm_1, conv_2, norm_2 = model.neck
        table["neck.0.weight"] = (conv_1.kernel.path, L.CONV)
        table.update(L.torch_norm("neck.1", _prefix(norm_1.gamma)))
        table["neck.2.weight"] = (conv_2.kernel.path, L.CONV)
        table.update(L.torch_norm("neck.3", _prefix(norm_2.gamma)))
    else:
        table.update(L.torch_norm("neck", _prefix(model.neck[0].gamma)))
    if c.num_classes:
        table.update(L.torch_linear("head.fc", _prefix(model.head.kernel)))
    return table


def _timm_names(arrays):
    """An original SAM checkpoint (`image_encoder.*`, `mlp.lin*`) in timm's names, as timm's
    `checkpoint_filter_fn` reads it (the prompt encoder and mask decoder left out, logged)."""
    if "image_encoder.patch_embed.proj.weight" not in arrays:
        return arrays
    kept = {
        key.removeprefix("image_encoder.").replace("mlp.lin", "mlp.fc"): value
        for key, value in arrays.items()
        if key.startswith("image_encoder.")
    }
    logger.info(
        "read the image encoder of a SAM checkpoint; left out its %d prompt-encoder and "
        "mask-decoder arrays",
        len(arrays) - len(kept),
    )
    return kept


def _head_skips(arrays, config):
    """Head arrays left out on purpose: the model has no head, or one of another class count."""
    head = arrays.get(HEAD_KEYS[0])
    if head is None or getattr(head, "ndim", 0) != 2:
        return {}
    if config.num_classes == int(head.shape[0]):
        return {}
    why = (
        "the model has no head (num_classes=0)"
        if not config.num_classes
        else f"the model's head has {config.num_classes} classes (a new head)"
    )
    return {
        key: f"dropped the checkpoint's {key} {L.shape_of(arrays[key])}: {why}"
        for key in HEAD_KEYS
        if key in arrays
    }


def load_timm_sam(model, checkpoint, *, source=None):
    """Loads a timm (or original SAM) state dict into a `SAMImageEncoder`, all or nothing.

    Args:
        model: a `SAMImageEncoder`.
        checkpoint: a path or a dict (`keras_vit.weights.state_dict.read_state_dict`).
        source: optional str naming the checkpoint in messages.

    Returns:
        The model.

    Raises:
        ValueError: listing every missing, unexpected or misshapen tensor (nothing assigned).
    """
    arrays = _timm_names(read_state_dict(checkpoint))
    table = L.without_new_head(timm_name_table(model), arrays, HEAD_KEYS, logger)
    if source is None:
        source = "the given state dict" if isinstance(checkpoint, dict) else repr(str(checkpoint))
    return L.load_state_dict(
        model, arrays, table, source=source, logger=logger, skip=_head_skips(arrays, model.config)
    )


def from_timm_sam(name, checkpoint=None, *, image_size=None, num_classes=None, **kwargs):
    """A `SAMImageEncoder` for a timm `samvit_*` name, with a checkpoint's weights.

    Args:
        name: str. A timm name (`samvit_base_patch16`, `samvit_huge_patch16.sa1b`, ...).
        checkpoint: optional path or state dict of timm's model (`model.state_dict()`) or of
            SAM's original `sam_vit_*.pth` (its `image_encoder`).
        image_size: optional int or pair. Defaults to the name's (1024; 224 for
            `samvit_base_patch16_224`); another size resamples the position grid and the
            global blocks' relative positions when the checkpoint is loaded.
        num_classes: optional int. Defaults to the checkpoint's head, else the name's (0 for
            SAM's encoders).
        **kwargs: `SAMConfig` fields (`num_layers=2`, `window_size=4`, `pooling=None`, ...),
            and `preprocessing` (defaults to timm's pretrained config of the name).

    Returns:
        A `SAMImageEncoder`.

    Example:

    >>> model = from_timm_sam("samvit_base_patch16", image_size=64, num_layers=2,
    ...     hidden_dim=32, num_heads=2, mlp_dim=64, window_size=2,
    ...     global_attention_indexes=(1,), neck_dim=16)
    >>> model.output_shape, model.config.preprocessing.mean
    ((None, 16), (0.485, 0.456, 0.406))
    """
    if kwargs.pop("dynamic_image_size", None):
        raise ValueError(
            "SAM's encoders take the image size they are built for (image_size=...; a "
            "checkpoint of another size is resampled when it is loaded): dynamic_image_size "
            "is not supported. Received: dynamic_image_size=True"
        )
    if kwargs.get("preprocessing") is None:
        kwargs["preprocessing"] = timm_input_spec(name, checkpoint)
    arrays = None if checkpoint is None else _timm_names(read_state_dict(checkpoint))
    if num_classes is None and arrays is not None:
        head = arrays.get(HEAD_KEYS[0])
        num_classes = int(head.shape[0]) if head is not None and np.ndim(head) == 2 else 0
    config = sam_config(name, image_size=image_size, num_classes=num_classes, **kwargs)
    model = SAMImageEncoder(config)
    if arrays is not None:
        source = "the given state dict" if isinstance(checkpoint, dict) else repr(str(checkpoint))
        load_timm_sam(model, arrays, source=source)
    return model
