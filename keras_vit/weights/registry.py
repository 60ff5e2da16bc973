"""The family registry: what each model family tells the shared machinery about itself.

A family is a folder `keras_vit/families/<name>/`; its `__init__.py` calls `register` with a
`ModelFamily` record once, at import. The registry sits here, below the families, so that the
package stack stays one way (`weights` < `families`); it names no family and no family package.
The folders are found and imported the first time the registry is read: `keras_vit/__init__.py`
names `keras_vit.families` as the provider of the `MODEL_FAMILIES` extension point
(`keras_vit._plugins`), whose every sub-package is a family. The shared code reads the registry
instead of importing families one by one:

- `keras_vit.weights.timm.names` takes each family's timm name patterns (`timm_specs`), the
  default class counts of its names (`timm_default_classes`) and the names it refuses
  (`timm_unsupported`);
- `keras_vit.from_timm` hands a name to the family's own reader when it has one
  (`timm_reader`: a family whose model is not a `ViTConfig` model), and lists the families in
  its docstring;
- `keras_vit.weights.timm.table.timm_name_table` asks the family whose checkpoints are not laid
  out as timm's `VisionTransformer` for its rows (`timm_layout`: a `TimmLayout`,
  `timm_layouts_for`);
- `keras_vit.from_huggingface` finds the reader of a `config.json`'s `model_type`
  (`huggingface_readers`) and its image processor's defaults (`huggingface_input_specs`);
- the docs' catalogue of families (docs/catalogue.md, `scripts/make_catalogue.py`) is generated
  from it.

Readers and layouts are named as `"package.module:name"` strings and imported when first used,
so that reading the registry (done by the name tables) stays cheap and free of import cycles.
Families are listed in name order; no timm name is read by two families (`register` checks), so
the order decides nothing.
"""

import dataclasses
import importlib
import re

from keras_vit import _plugins

__all__ = [
    "ModelFamily",
    "TimmLayout",
    "family",
    "family_of_timm_name",
    "huggingface_input_spec_defaults",
    "huggingface_reader",
    "huggingface_types",
    "huggingface_writer",
    "load_callable",
    "register",
    "registered",
    "timm_layouts_for",
]

_NAME = re.compile(r"[a-z][a-z0-9_]*")
_CALLABLE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


@dataclasses.dataclass(frozen=True)
class TimmLayout:
    """How a family's timm checkpoints differ from timm's `VisionTransformer` layout.

    `keras_vit.weights.timm.table` builds the table of timm's `VisionTransformer` and its
    options (stems, NaFlex, parallel blocks, AIMv2's options); a family whose timm model class
    is another (`Eva`, `Beit`, the VLM towers) gives the rows that differ. Every field but
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
            `ViT` arguments that depend on the name's tag or the user's overrides (`kwargs`).
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
    """What one family registers. Each field is checked when the record is made.

    Attributes:
        name: str. The folder's name (`"eva"`, `"beit"`, ...): lower case letters, digits and
            underscores.
        description: str. One line for the docs, `from_timm`'s docstring and error messages.
        timm_specs: tuple of `(name, pattern, example, description, arguments)` rows, each one
            `keras_vit.weights.timm.records.TimmNamePattern` (a pattern of timm names, the
            example one of them, `arguments(groups) -> dict` the `ViT` arguments they mean).
        timm_default_classes: dict. timm's default class count per architecture name where
            it is not the family's default.
        timm_headless: tuple of `timm_specs` names whose timm models have no classifier by
            default (class count 0 unless `timm_default_classes` says otherwise).
        timm_unsupported: tuple of `(pattern, why)`: names of the family keras_vit refuses.
        timm_reader: optional `"module:function"`, called as `function(name, checkpoint,
            **from_timm_arguments)` for names of this family's `timm_patterns`, when the
            family builds a model of its own (not a `ViTConfig` model).
        timm_patterns: tuple of regexes (whole architecture name, no tag) `timm_reader` reads;
            required with `timm_reader`.
        timm_layout: optional `"module:name"` of a `TimmLayout`: how the family's timm
            checkpoints differ from timm's `VisionTransformer`.
        huggingface_readers: dict `{model_type: "module:function"}`; the function is called
            as `function(folder, hf_config, **from_huggingface_arguments)`.
        huggingface_input_specs: dict `{model_type: {field: value}}`: the defaults of the
            model type's transformers image processor (`size`, `crop_size`, `do_center_crop`,
            `crop_pct`, `resample`, `image_mean`, `image_std`), used when a folder has no
            `preprocessor_config.json`.
        huggingface_writers: dict `{Keras registered class name: "module:function"}`: the
            family's own `export_huggingface` for models of that class (not a
            `VisionTransformer`), called as `function(model, folder, overwrite=...)`. A model
            class no family registers a writer for is written as transformers' ViT or refused.

    Raises:
        TypeError, ValueError: a field of the wrong type or form, naming the field, what it
            expects and what it received.
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
    huggingface_input_specs: dict = dataclasses.field(default_factory=dict)
    huggingface_writers: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        _check_record(self)

    def timm_name_patterns(self):
        """Every regex of timm architecture names this family reads or refuses."""
        return (
            *(spec[1] for spec in self.timm_specs),
            *self.timm_patterns,
            *(pattern for pattern, _ in self.timm_unsupported),
        )


def _fail(record_name, field, expected, value, error=ValueError):
    return error(
        f"ModelFamily {record_name!r}: {field} must be {expected}. Received: {field}={value!r}"
    )


def _check_str(name, field, value, *, optional=False, pattern=None, expected="a str"):
    if optional and value is None:
        return
    if not isinstance(value, str):
        raise _fail(name, field, expected, value, TypeError)
    if not value.strip() or (pattern is not None and not pattern.fullmatch(value)):
        raise _fail(name, field, expected, value)


def _check_regex(name, field, value):
    _check_str(name, field, value, expected="a regular expression (str)")
    try:
        re.compile(value)
    except re.error as error:
        raise _fail(name, field, f"a regular expression ({error})", value) from None


def _check_tuple(name, field, value):
    if not isinstance(value, (tuple, list)):
        raise _fail(name, field, "a tuple", value, TypeError)


def _check_dict(name, field, value):
    if not isinstance(value, dict):
        raise _fail(name, field, "a dict", value, TypeError)


def _check_record(r):
    if not isinstance(r.name, str):
        raise TypeError(f"ModelFamily name must be a str. Received: name={r.name!r}")
    if not _NAME.fullmatch(r.name):
        raise ValueError(
            "ModelFamily name must be a folder name: lower case letters, digits and "
            f"underscores, starting with a letter. Received: name={r.name!r}"
        )
    name = r.name
    _check_str(name, "description", r.description)
    _check_tuple(name, "timm_specs", r.timm_specs)
    row = "a (name, pattern, example, description, arguments) row"
    for spec in r.timm_specs:
        if not isinstance(spec, (tuple, list)) or len(spec) != 5:
            raise _fail(name, "each of timm_specs", row, spec, TypeError)
        for field, index in (("name", 0), ("example", 2), ("description", 3)):
            _check_str(name, f"timm_specs' {field}", spec[index])
        _check_regex(name, "timm_specs' pattern", spec[1])
        if not callable(spec[4]):
            raise _fail(name, "timm_specs' arguments", "a callable", spec[4], TypeError)
    _check_dict(name, "timm_default_classes", r.timm_default_classes)
    for key, value in r.timm_default_classes.items():
        _check_str(name, "timm_default_classes' keys", key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise _fail(name, f"timm_default_classes[{key!r}]", "an int >= 0", value)
    _check_tuple(name, "timm_headless", r.timm_headless)
    specs = {spec[0] for spec in r.timm_specs}
    for headless in r.timm_headless:
        if headless not in specs:
            raise _fail(name, "each of timm_headless", f"one of {sorted(specs)}", headless)
    _check_tuple(name, "timm_unsupported", r.timm_unsupported)
    for refusal in r.timm_unsupported:
        if not isinstance(refusal, (tuple, list)) or len(refusal) != 2:
            raise _fail(name, "each of timm_unsupported", "a (pattern, why) pair", refusal)
        _check_regex(name, "timm_unsupported's pattern", refusal[0])
        _check_str(name, "timm_unsupported's why", refusal[1])
    callable_path = "a 'package.module:name' str"
    _check_str(name, "timm_reader", r.timm_reader, optional=True, pattern=_CALLABLE,
               expected=callable_path)  # fmt: skip
    _check_tuple(name, "timm_patterns", r.timm_patterns)
    for pattern in r.timm_patterns:
        _check_regex(name, "timm_patterns", pattern)
    if r.timm_reader and not r.timm_patterns:
        raise _fail(name, "timm_patterns", "the names timm_reader reads (regexes)", ())
    if r.timm_patterns and not r.timm_reader:
        raise _fail(name, "timm_reader", "given with timm_patterns", None)
    _check_str(name, "timm_layout", r.timm_layout, optional=True, pattern=_CALLABLE,
               expected=callable_path)  # fmt: skip
    for field in ("huggingface_readers", "huggingface_writers", "huggingface_input_specs"):
        mapping = getattr(r, field)
        _check_dict(name, field, mapping)
        for key, value in mapping.items():
            _check_str(name, f"{field}' keys", key)
            if field == "huggingface_input_specs":
                _check_dict(name, f"{field}[{key!r}]", value)
            else:
                _check_str(name, f"{field}[{key!r}]", value, pattern=_CALLABLE,
                           expected=callable_path)  # fmt: skip
    for model_type in r.huggingface_input_specs:
        if model_type not in r.huggingface_readers:
            raise _fail(
                name,
                "huggingface_input_specs' keys",
                f"model types of huggingface_readers ({sorted(r.huggingface_readers)})",
                model_type,
            )


_FAMILIES = {}
_TIMM_NAMES = {}  # family name -> the known timm architectures its patterns match


def register(record):
    """Adds a `ModelFamily` to the registry (once per name) and returns it.

    The families of `keras_vit/families/` are registered first (reading them if nothing has),
    so a family registered by a user comes after them and is checked against them.

    Raises:
        TypeError: `record` is not a `ModelFamily`.
        ValueError: another family of that name, of one of its Hugging Face model types, or
            one reading any of the timm names its patterns match is registered.
    """
    if not isinstance(record, ModelFamily):
        raise TypeError(f"Expected a ModelFamily. Received: {record!r}")
    if not _plugins.is_loading(_plugins.MODEL_FAMILIES):
        _plugins.load(_plugins.MODEL_FAMILIES)
    if record.name in _FAMILIES:
        if _FAMILIES[record.name] == record:
            return _FAMILIES[record.name]
        raise ValueError(f"A family named {record.name!r} is already registered.")
    taken = {t: f.name for f in _FAMILIES.values() for t in f.huggingface_readers}
    clash = sorted(t for t in record.huggingface_readers if t in taken)
    if clash:
        raise ValueError(
            f"Family {record.name!r} registers Hugging Face model_type(s) {clash} that "
            f"{sorted({taken[t] for t in clash})} already read."
        )
    names = _timm_names_of(record)
    for other in _FAMILIES.values():
        shared = sorted(names & _TIMM_NAMES[other.name])
        if shared:
            more = f" and {len(shared) - 3} more" if len(shared) > 3 else ""
            raise ValueError(
                f"Family {record.name!r}'s timm name patterns match {shared[:3]}{more}, which "
                f"the family {other.name!r} reads: a timm name belongs to one family."
            )
    _TIMM_NAMES[record.name] = names
    _FAMILIES[record.name] = record
    return record


def _timm_names_of(record):
    """The timm architecture names (of keras_vit's table of timm's names) `record` matches."""
    from keras_vit.weights.timm.pretrained import known_architectures

    patterns = [re.compile(p) for p in record.timm_name_patterns()]
    return frozenset(
        name for name in known_architectures() if any(p.fullmatch(name) for p in patterns)
    )


def registered():
    """Every registered `ModelFamily`, in name order (a tuple)."""
    _plugins.load(_plugins.MODEL_FAMILIES)
    return tuple(_FAMILIES[name] for name in sorted(_FAMILIES))


def family(name):
    """The registered `ModelFamily` called `name`."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a family name (a str). Received: name={name!r}")
    _plugins.load(_plugins.MODEL_FAMILIES)
    if name not in _FAMILIES:
        raise ValueError(f"Unknown model family {name!r}. Expected one of {sorted(_FAMILIES)}.")
    return _FAMILIES[name]


def family_of_timm_name(architecture):
    """The family whose own reader reads a timm architecture name (no tag), or None."""
    if not isinstance(architecture, str):
        raise TypeError(
            "architecture must be a timm architecture name (a str). "
            f"Received: architecture={architecture!r}"
        )
    for record in registered():
        if record.timm_reader and any(re.fullmatch(p, architecture) for p in record.timm_patterns):
            return record
    return None


def timm_layouts_for(config, spec=None):
    """The `TimmLayout`s that claim `config` (and `spec`), in family name order (a tuple).

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


def huggingface_input_spec_defaults(model_type):
    """The image-processor defaults a family registered for `model_type` (a dict), or None."""
    for record in registered():
        if model_type in record.huggingface_input_specs:
            return dict(record.huggingface_input_specs[model_type])
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
    """Imports `"package.module:name"` and returns the name.

    Raises:
        ValueError: `path` is not of that form, or the module has no such name.
        ModuleNotFoundError: no such module.
    """
    if not isinstance(path, str) or not _CALLABLE.fullmatch(path):
        raise ValueError(f"Expected 'package.module:name'. Received: {path!r}")
    module, _, attribute = path.partition(":")
    loaded = importlib.import_module(module)
    if not hasattr(loaded, attribute):
        raise ValueError(f"Module {module!r} has no {attribute!r} (from {path!r}).")
    return getattr(loaded, attribute)
