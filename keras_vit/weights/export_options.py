"""Export as an allow-list: an option an exporter does not write must be at its default.

`export_timm` and `export_huggingface` each name the `ViTConfig` options they write (or check
with a reason of their own); `check_unwritten_options_default` refuses every other option that
differs from its default. A new option is therefore refused by every exporter until that exporter
learns to write it, instead of being silently dropped (a block kind the target cannot express
once ended in a raw `KeyError` after the deny-lists drifted).
"""

import dataclasses

from keras_vit.models.config import ViTConfig

# Options that change training only (or the Keras name, the input spec and the class names,
# metadata beside the weights), never the exported computation.
SAME_OUTPUTS = (
    "dropout_rate", "attention_dropout_rate", "drop_path_rate", "remat", "name", "preprocessing",
    "class_names", "patch_dropout_rate",
)  # fmt: skip


def unwritten_options(written):
    """The `ViTConfig` field names not in `written` (the options an exporter must refuse).

    Example:

    >>> "block_kind" in unwritten_options({"num_layers", "hidden_dim"})
    True
    """
    return tuple(f.name for f in dataclasses.fields(ViTConfig) if f.name not in set(written))


def check_unwritten_options_default(config, written, refuse, why):
    """Raises `refuse(option, value, why)` for the first unwritten option off its default.

    Args:
        config: a `ViTConfig`.
        written: iterable of the field names the exporter writes or checks itself.
        refuse: callable `(option, value, why) -> Exception` (the exporter's own wording).
        why: str. The reason given for every option the exporter does not know.
    """
    written = set(written)
    for field in dataclasses.fields(ViTConfig):
        if field.name in written or field.default is dataclasses.MISSING:
            continue  # (ViTConfig itself refuses an option set while the one it needs is off)
        value = getattr(config, field.name)
        if value != field.default:
            raise refuse(field.name, value, why)
