"""The family registry: what each model family tells the shared machinery about itself.

A family is a folder `keras_vit/families/<name>/`; its `__init__.py` calls `register` with a
`ModelFamily` record once, at import (`keras_vit.families` imports every family folder, the
first time the registry is read). The registry sits here, below the families, so that the
package stack stays one way (`weights` < `families`): the shared code reads the registry
instead of importing families one by one:

- `keras_vit.weights.timm.names` takes each family's timm name patterns (`timm_specs`), the
  default class counts of its names (`timm_default_classes`) and the names it refuses
  (`timm_unsupported`), in registration order;
- `keras_vit.from_timm` hands a name to the family's own reader when it has one
  (`timm_reader`: a family whose model is not a `ViTConfig` model);
- `keras_vit.weights.timm.reader.timm_name_table` asks the family whose checkpoints are not laid out
  as timm's `VisionTransformer` for its rows (`timm_layout`: a `TimmLayout`, `timm_layouts_for`);
- `keras_vit.from_huggingface` finds the reader of a `config.json`'s `model_type`
  (`huggingface_readers`);
- the docs' family tables and counts are checked against it (tests/families).

Readers are named as `"package.module:function"` strings and imported when first used, so that
importing the registry (done by the name tables) stays cheap and free of import cycles.
"""

import dataclasses
import importlib

__all__ = [
    "ModelFamily",
    "TimmLayout",
    "family",
    "family_of_timm_name",
    "huggingface_reader",
    "huggingface_types",
    "huggingface_writer",
    "load_callable",
    "mark_complete",
    "register",
    "registered",
    "timm_layouts_for",
]


@dataclasses.dataclass(frozen=True)
class TimmLayout:
    """How a family's timm checkpoints differ from timm's `VisionTransformer` layout.

    `keras_vit.weights.timm.reader` builds the table of timm's `VisionTransformer` and its options
    (stems, NaFlex, parallel blocks, AIMv2's options); a family whose timm model class is
    another (`Eva`, `Beit`, the VLM towers) gives the rows that differ. Every field but
    `claims` is optional.

    Attributes:
        claims: callable `(config, spec) -> bool`: whether a model (its `ViTConfig`, and the
            parsed timm name or None when exporting) is laid out this way.
        name_table: callable `(config, spec) -> table`: the whole table (nothing shared).
        model_rows: callable `(config) -> rows` added after the patch embedding.
        block_rows: callable `(i, config, spec) -> rows` of block `i` (replacing timm's
            `Block`); a family with its own blocks also keeps the checkpoint options of the
            name out of `adapt_name_table`.
        finish: callable `(table, config, spec) -> table`, last.
        fills: callable `(config, spec) -> {variable path: value}`: the zeros our variables
            get where the checkpoint has none (replacing the q/k/v default with
            `own_qkv_fills`, else added to it).
        own_qkv_fills: bool. `fills` decides the q/k/v bias zeros itself.
        config_arguments: callable `(spec, arguments, kwargs) -> arguments`: the family's
            `ViT` arguments that depend on the name's tag or the user's overrides.
    """

    claims: object
    name_table: object = None
    model_rows: object = None
    block_rows: object = None
    finish: object = None
    fills: object = None
    own_qkv_fills: bool = False
    config_arguments: object = None


@dataclasses.dataclass(frozen=True)
class ModelFamily:
    """What one family registers.

    Attributes:
        name: str. The folder's name (`"eva"`, `"beit"`, ...).
        description: str. One line for the docs and error messages.
        timm_specs: tuple of `(name, pattern, example, description, arguments)` rows, each one
            `keras_vit.weights.timm.records.Family` of timm names (checked after the core ViT
            families, in registration order).
        timm_default_classes: dict. timm's default class count per architecture name where
            it is not the family's default.
        timm_headless: tuple of `timm_specs` names whose timm models have no classifier by
            default (class count 0 unless `timm_default_classes` says otherwise).
        timm_unsupported: tuple of `(pattern, why)`: names of the family keras_vit refuses.
        timm_reader: optional `"module:function"`, called as `function(name, checkpoint,
            **from_timm_arguments)` for names of this family's `timm_patterns`, when the
            family builds a model of its own (not a `ViTConfig` model).
        timm_patterns: tuple of regexes (whole architecture name, no tag) `timm_reader` reads.
        timm_layout: optional `"module:name"` of a `TimmLayout`: how the family's timm
            checkpoints differ from timm's `VisionTransformer`.
        huggingface_readers: dict `{model_type: "module:function"}`; the function is called
            as `function(folder, hf_config, **from_huggingface_arguments)`.
        huggingface_writers: dict `{Keras registered class name: "module:function"}`: the
            family's own `export_huggingface` for models of that class (not a
            `VisionTransformer`), called as `function(model, folder, overwrite=...)`. A model
            class no family registers a writer for is written as transformers' ViT or refused.
    """

    name: str
    description: str
    timm_specs: tuple = ()
    timm_default_classes: dict = dataclasses.field(default_factory=dict)
    timm_headless: tuple = ()
    timm_unsupported: tuple = ()
    timm_reader: str = None
    timm_patterns: tuple = ()
    timm_layout: str = None
    huggingface_readers: dict = dataclasses.field(default_factory=dict)
    huggingface_writers: dict = dataclasses.field(default_factory=dict)


_FAMILIES = {}
_COMPLETE = []  # [True] once keras_vit.families has imported every family folder


def mark_complete():
    """Called by `keras_vit.families` once every family folder has registered."""
    _COMPLETE[:] = [True]


def register(record):
    """Adds a `ModelFamily` to the registry (once per name) and returns it."""
    if not isinstance(record, ModelFamily):
        raise TypeError(f"Expected a ModelFamily. Received: {record!r}")
    if record.name in _FAMILIES and _FAMILIES[record.name] != record:
        raise ValueError(f"A family named {record.name!r} is already registered.")
    taken = {t: f.name for f in _FAMILIES.values() for t in f.huggingface_readers}
    readers = record.huggingface_readers
    clash = sorted(t for t in readers if taken.get(t, record.name) != record.name)
    if clash:
        raise ValueError(
            f"Family {record.name!r} registers Hugging Face model_type(s) {clash} that "
            f"{sorted({taken[t] for t in clash})} already read."
        )
    _FAMILIES[record.name] = record
    return record


def registered():
    """Every registered `ModelFamily`, in registration order (a tuple)."""
    _import_families()
    if not _COMPLETE:
        raise RuntimeError(
            "The family registry was read while keras_vit.families was still importing its "
            "folders: a family's __init__ must import only its own name tables (pure data), "
            f"not keras_vit.weights. Registered so far: {sorted(_FAMILIES)}."
        )
    return tuple(_FAMILIES.values())


def family(name):
    """The registered `ModelFamily` called `name`."""
    _import_families()
    if name not in _FAMILIES:
        raise ValueError(f"Unknown model family {name!r}. Expected one of {sorted(_FAMILIES)}.")
    return _FAMILIES[name]


def family_of_timm_name(architecture):
    """The family whose own reader reads a timm architecture name (no tag), or None."""
    import re

    for record in registered():
        if record.timm_reader and any(re.fullmatch(p, architecture) for p in record.timm_patterns):
            return record
    return None


def timm_layouts_for(config, spec=None):
    """The `TimmLayout`s that claim `config` (and `spec`), in registration order (a tuple).

    Several can apply: the VLM towers are laid out as timm's `Eva` models (the `eva` family's
    blocks), then wrapped (the `vlm` family's prefix and projector).
    """
    layouts = (load_callable(r.timm_layout) for r in registered() if r.timm_layout)
    return tuple(layout for layout in layouts if layout.claims(config, spec))


def huggingface_types():
    """`{model_type: family name}` of every family's Hugging Face readers."""
    return {t: f.name for f in registered() for t in f.huggingface_readers}


def huggingface_reader(model_type):
    """The reader function of a Hugging Face `model_type`, or None."""
    for record in registered():
        if model_type in record.huggingface_readers:
            return load_callable(record.huggingface_readers[model_type])
    return None


def huggingface_writer(model):
    """The `export_huggingface` function a family registered for `model`'s class, or None."""
    import keras

    name = keras.saving.get_registered_name(type(model))
    for record in registered():
        if name in record.huggingface_writers:
            return load_callable(record.huggingface_writers[name])
    return None


def load_callable(path):
    """Imports `"package.module:function"` and returns the function."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


def _import_families():
    importlib.import_module("keras_vit.families")
