"""`from_timm`'s own arguments, checked before anything is read, built or downloaded.

Nothing is ignored or coerced: the name is a string; `pretrained` and `force_download` are
bools (`"no"` is not False); a tag is one timm has for the architecture (timm's
`create_model("vit_tiny_patch16_224.bogus")` refuses it too); the Hub's arguments
(`revision`, `cache_dir`, `force_download`) are refused with a local checkpoint, which they
cannot apply to; `cache_dir` is a folder (or a path to make one).
"""

import os

from keras_vit.layers._checks import check_bool
from keras_vit.weights.hub_errors import check_cache_dir, check_revision
from keras_vit.weights.timm.pretrained import pretrained_cfg, split_timm_name

__all__ = ["check_from_timm_arguments", "check_timm_name"]

_HUB_PREFIXES = ("hf-hub:", "hf_hub:")


def check_timm_name(name):
    """`name` if it is a non-empty str, else a ValueError naming what was received.

    >>> check_timm_name(None)
    Traceback (most recent call last):
        ...
    ValueError: name must be a timm model name (a str such as 'vit_base_patch16_224'). Received: name=None (type NoneType)
    """  # noqa: E501
    if not isinstance(name, str) or not name.strip():
        raise ValueError(
            "name must be a timm model name (a str such as 'vit_base_patch16_224'). "
            f"Received: name={name!r} (type {type(name).__name__})"
        )
    return name


def check_from_timm_arguments(name, checkpoint, pretrained, revision, cache_dir, force_download):
    """Checks `from_timm`'s name and Hub arguments; returns `(pretrained, force_download)` as
    bools. Raises ValueError naming the argument, what it takes and what it received."""
    check_timm_name(name)
    pretrained = check_bool(pretrained, "pretrained")
    force_download = check_bool(force_download, "force_download")
    from_hub = pretrained or name.strip().startswith(_HUB_PREFIXES)
    if not from_hub:
        given = [
            f"{key}={value!r}"
            for key, value in (("revision", revision), ("cache_dir", cache_dir))
            if value is not None
        ]
        if given:
            source = (
                "a local checkpoint (checkpoint=" + _short(checkpoint) + ")"
                if checkpoint is not None
                else "no download (pretrained=False)"
            )
            raise ValueError(
                f"{' and '.join(given)} choose what is downloaded from the Hugging Face Hub, "
                f"but this call reads {source}: nothing is downloaded. Drop "
                f"{' and '.join(g.split('=')[0] for g in given)}, or pass pretrained=True "
                "(without checkpoint=) to download the name's weights."
            )
    check_revision(revision)
    check_cache_dir(cache_dir)
    if not name.strip().startswith(_HUB_PREFIXES):
        _check_tag(name)
    return pretrained, force_download


def _check_tag(name):
    """A tag must be one of the architecture's in timm's pretrained table (an unknown
    architecture is refused later, with the nearest names)."""
    from keras_vit.weights.timm.pretrained import known_architectures

    architecture, tag, _ = split_timm_name(name)
    if tag is not None and architecture in known_architectures():
        pretrained_cfg(name)  # a ValueError listing the architecture's tags


def _short(checkpoint):
    if isinstance(checkpoint, dict):
        return f"a dict of {len(checkpoint)} arrays"
    return repr(os.fspath(checkpoint)) if isinstance(checkpoint, (str, os.PathLike)) else "..."
