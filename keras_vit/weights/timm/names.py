"""timm's model names -> keras_vit architectures: `parse_timm_name`, and the `FAMILIES` table.

The families' tables (each a name pattern and the `keras_vit.ViT` arguments it means, timm's
default class counts, the names refused and why: `UNSUPPORTED`) live in the family folders
(`keras_vit/families/<name>/timm_names.py`); this module joins them from the registry
(`keras_vit.weights.registry`) and parses names. `FAMILIES`, `DEFAULT_CLASSES` and
`UNSUPPORTED` are read-only views of the registry (a family registered later is in them).
A name of keras_vit's table of timm's names (`keras_vit.weights.timm.pretrained`: timm's ViT
modules) that no registered family reads is refused as such. Pure data and parsing (no
weights): the loader (`keras_vit.weights.timm.reader`) and the writer
(`keras_vit.weights.timm.export`) read it.
"""

import collections.abc
import functools
import re

from keras_vit.weights import registry
from keras_vit.weights.timm.pretrained import known_architectures, unknown_name_message
from keras_vit.weights.timm.records import Family, TimmArchitecture, TimmNamePattern
from keras_vit.weights.timm.sizes import HYBRIDS

__all__ = [
    "DEFAULT_CLASSES",
    "FAMILIES",
    "HYBRIDS",
    "UNSUPPORTED",
    "Family",
    "TimmArchitecture",
    "TimmNamePattern",
    "match_timm_family",
    "parse_timm_name",
    "supported_families",
]


@functools.cache
def _tables(names):
    """The tables of the registered families `names`, joined (recomputed when a family
    registers)."""
    families = [registry.family(name) for name in names]
    return {
        "FAMILIES": tuple(TimmNamePattern(*spec) for f in families for spec in f.timm_specs),
        "DEFAULT_CLASSES": {k: v for f in families for k, v in f.timm_default_classes.items()},
        "HEADLESS": frozenset(name for f in families for name in f.timm_headless),
        "UNSUPPORTED": tuple(row for f in families for row in f.timm_unsupported),
    }


def _table(name):
    return _tables(tuple(f.name for f in registry.registered()))[name]


class _RegistryTuple(collections.abc.Sequence):
    """A read-only tuple view of one joined table: what the registry holds when it is read."""

    def __init__(self, name):
        self._name = name

    def __getitem__(self, index):
        return _table(self._name)[index]

    def __len__(self):
        return len(_table(self._name))

    def __eq__(self, other):
        return tuple(self) == (tuple(other) if isinstance(other, _RegistryTuple) else other)

    __hash__ = None

    def __repr__(self):
        return repr(_table(self._name))


class _RegistryMapping(collections.abc.Mapping):
    """A read-only dict view of one joined table."""

    def __init__(self, name):
        self._name = name

    def __getitem__(self, key):
        return _table(self._name)[key]

    def __iter__(self):
        return iter(_table(self._name))

    def __len__(self):
        return len(_table(self._name))

    def __repr__(self):
        return repr(_table(self._name))


# Every registered family's name patterns (`TimmNamePattern`), default class counts and
# refusals: views of the registry.
FAMILIES = _RegistryTuple("FAMILIES")
DEFAULT_CLASSES = _RegistryMapping("DEFAULT_CLASSES")
UNSUPPORTED = _RegistryTuple("UNSUPPORTED")


def supported_families():
    """One line per family: its name, an example timm name and what it is."""
    return [f"{f.name}: e.g. {f.example} ({f.description})" for f in _table("FAMILIES")]


def parse_timm_name(name):
    """Parses a timm model name (with or without tag and `timm/` prefix) into our arguments.

    Args:
        name: str, e.g. `"vit_small_patch16_224.augreg_in21k"`.

    Returns:
        A `TimmArchitecture`.

    Raises:
        ValueError: an unknown name (the message lists the supported families) or a timm
            architecture keras_vit does not implement (the message says why).

    Example:

    >>> spec = parse_timm_name("timm/vit_small_patch16_384.augreg_in21k_ft_in1k")
    >>> spec.name, spec.tag, spec.family.name, spec.image_size, spec.arguments["variant"]
    ('vit_small_patch16_384', 'augreg_in21k_ft_in1k', 'vit', 384, 'S/16')
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(
            f"Expected a timm model name such as 'vit_base_patch16_224'. Received: {name!r}"
        )
    full = name.strip()
    for prefix in ("hf-hub:", "hf_hub:", "timm/"):
        if full.startswith(prefix):
            full = full[len(prefix) :]
    full = full.partition("@")[0]  # "hf-hub:timm/<name>@<revision>"
    architecture, _, tag = full.partition(".")
    for pattern, why in _table("UNSUPPORTED"):
        if re.fullmatch(pattern, architecture):
            raise ValueError(
                f"timm model {architecture!r} is not supported by keras_vit: it needs {why}. "
                "Supported families:\n  " + "\n  ".join(supported_families())
            )
    if architecture not in known_architectures():
        raise ValueError(unknown_architecture_message(architecture))
    found = match_timm_family(architecture)
    if found is None:
        raise ValueError(unread_architecture_message(architecture))
    family, match = found
    groups = match.groupdict()
    arguments = family.arguments(groups)
    qkv_bias = arguments.pop("_qkv_bias", True)
    patch_bias = arguments.pop("_patch_bias", True)
    extras = {k[1:]: arguments.pop(k) for k in [k for k in arguments if k.startswith("_")]}
    image_size = arguments.pop("image_size", 0) or int(groups.get("res") or 224)
    # timm's convolution drops what the patch does not divide.
    if groups.get("patch") and isinstance(image_size, int):
        image_size -= image_size % int(groups["patch"])
    default = 0 if family.name in _table("HEADLESS") else 1000
    return TimmArchitecture(
        name=architecture,
        tag=tag,
        family=family,
        arguments=arguments,
        image_size=image_size,
        num_classes=_table("DEFAULT_CLASSES").get(architecture, default),
        qkv_bias=qkv_bias,
        patch_bias=patch_bias,
        extras=extras,
    )


def match_timm_family(architecture):
    """The pattern an architecture name (no tag) matches: `(TimmNamePattern, re.Match)`.

    The patterns alone, without the registry of timm's names: `parse_timm_name` also requires
    the name to be one of timm's (`known_architectures`), so that `vit_tiny_patch16_244` is
    refused instead of read as a 244 px model. None for a name no family matches or one of
    `UNSUPPORTED`.
    """
    if any(re.fullmatch(pattern, architecture) for pattern, _ in _table("UNSUPPORTED")):
        return None
    for family in _table("FAMILIES"):
        match = re.fullmatch(family.pattern, architecture)
        if match is not None:
            return family, match
    return None


def unknown_architecture_message(architecture):
    """The message refusing an architecture name timm does not register: the nearest known."""
    return (
        unknown_name_message(architecture) + " keras_vit "
        "reads these timm families (any tag after a '.'; the full list: "
        "keras_vit.weights.timm.pretrained.known_architectures()):\n  "
        + "\n  ".join(supported_families())
    )


def unread_architecture_message(architecture):
    """The refusal of a name of timm's ViT modules that no registered family reads."""
    return (
        f"timm model {architecture!r} is one of the timm architectures keras_vit knows of "
        "(keras_vit.weights.timm.pretrained), but no registered model family reads it "
        "(keras_vit.weights.registry; docs/adding_a_family.md says how to add one). "
        "Supported families:\n  " + "\n  ".join(supported_families())
    )
