"""timm's pretrained configs of the architectures keras_vit reads: `pretrained_cfg(name)`.

The data is `pretrained.json` beside this module, written from timm 1.0.31's
`get_pretrained_cfg` by `scripts/make_timm_pretrained_table.py` (timm is not needed at run
time; tests/weights/timm/test_pretrained.py checks the table against the installed timm). It
is also the registry of timm's architecture names that `keras_vit.weights.timm.names` accepts
(`known_architectures`): a name is looked up, never parsed for numbers.

Per `<arch>.<tag>` (and per architecture without pretrained weights, under its own name):
`hf_hub_id`, `hf_hub_filename`, `url`, `num_classes`, `input_size` (C, H, W),
`fixed_input_size`, `mean`, `std`, `crop_pct`, `crop_mode`, `interpolation`, `label_set`
(timm's `infer_imagenet_subset`: "imagenet-1k", "imagenet-21k", ... or None), `license`, and
`test_input_size` where timm sets one.
"""

import copy
import difflib
import functools
import json
import os

__all__ = [
    "default_tag",
    "known_architectures",
    "pretrained_cfg",
    "pretrained_names",
    "split_timm_name",
    "unknown_name_message",
]

TABLE_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pretrained.json")
_PREFIXES = ("hf-hub:", "hf_hub:", "timm/")


@functools.cache
def _table():
    with open(TABLE_PATH, encoding="utf-8") as f:
        return json.load(f)


def known_architectures():
    """The timm architecture names (no tag) keras_vit reads: a frozenset.

    >>> "vit_base_patch16_224" in known_architectures()
    True
    """
    return _known()


@functools.cache
def _known():
    return frozenset(_table()["architectures"])


def split_timm_name(name):
    """`(architecture, tag, revision)` of a timm name with optional prefix, tag and revision.

    Accepts `"<arch>"`, `"<arch>.<tag>"`, `"timm/<arch>.<tag>"` and
    `"hf-hub:timm/<arch>.<tag>@<revision>"`; a missing tag or revision is None.

    >>> split_timm_name("hf-hub:timm/vit_small_patch16_224.augreg_in21k@main")
    ('vit_small_patch16_224', 'augreg_in21k', 'main')
    """
    full = name.strip()
    for prefix in _PREFIXES:
        if full.startswith(prefix):
            full = full[len(prefix) :]
    full, _, revision = full.partition("@")
    architecture, _, tag = full.partition(".")
    return architecture, tag or None, revision or None


def default_tag(architecture):
    """timm's default pretrained tag of an architecture (None where timm has no weights).

    >>> default_tag("vit_base_patch16_224")
    'augreg2_in21k_ft_in1k'
    """
    return _architecture(architecture)["default_tag"]


def pretrained_names(architecture=None):
    """The `<arch>.<tag>` names with pretrained weights (of one architecture, or all), sorted."""
    archs = [architecture] if architecture else sorted(_table()["architectures"])
    return [f"{a}.{t}" for a in archs for t in _architecture(a)["tags"]]


def pretrained_cfg(name):
    """timm's pretrained config of a timm name: a new dict (the caller may change it).

    Args:
        name: str. `"<arch>.<tag>"`, or `"<arch>"` for timm's default tag; a `timm/` or
            `hf-hub:timm/` prefix and an `@<revision>` are ignored.

    Returns:
        dict with `architecture`, `tag` (None where timm has no weights for the
        architecture), `hf_hub_id`, `hf_hub_filename`, `url`, `num_classes`, `input_size`
        (C, H, W), `fixed_input_size`, `mean`, `std`, `crop_pct`, `crop_mode`,
        `interpolation`, `label_set`, `license` (and `test_input_size` where timm has one).

    Raises:
        ValueError: an architecture timm does not register or keras_vit does not read, or a
            tag timm does not have for it (the message lists the known ones).

    Example:

    >>> cfg = pretrained_cfg("vit_small_patch14_dinov2")
    >>> cfg["tag"], cfg["hf_hub_id"], cfg["mean"], cfg["crop_pct"]
    ('lvd142m', 'timm/vit_small_patch14_dinov2.lvd142m', [0.485, 0.456, 0.406], 1.0)
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(
            f"Expected a timm model name such as 'vit_base_patch16_224'. Received: {name!r}"
        )
    architecture, tag, _ = split_timm_name(name)
    entry = _architecture(architecture)
    tag = tag or entry["default_tag"]
    if tag is None:
        record = _table()["configs"][architecture]
    else:
        if tag not in entry["tags"]:
            known = ", ".join(entry["tags"]) or "none: timm has no weights for it"
            raise ValueError(
                f"timm has no pretrained tag {tag!r} for {architecture!r}. Its tags: {known}."
            )
        record = _table()["configs"][f"{architecture}.{tag}"]
    return {"architecture": architecture, "tag": tag, **copy.deepcopy(record)}


def _architecture(architecture):
    entry = _table()["architectures"].get(architecture)
    if entry is None:
        raise ValueError(unknown_name_message(architecture))
    return entry


def unknown_name_message(architecture):
    """The refusal of an architecture name timm does not register, with the nearest known."""
    near = difflib.get_close_matches(architecture, sorted(_known()), n=5, cutoff=0.6)
    hint = f" Did you mean: {', '.join(near)}?" if near else ""
    return (
        f"Unknown timm model name {architecture!r}: it is not one of the {len(_known())} timm "
        f"architectures keras_vit reads.{hint}"
    )
