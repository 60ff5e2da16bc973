"""`from_timm(name, pretrained=True)`: a timm name -> its checkpoint in the Hugging Face cache.

Resolution is `keras_vit.weights.hub.resolve_timm_name` (timm's pretrained table); the
download is `huggingface_hub`'s (`keras_vit.weights.hub.download_file`).
"""

import json

from keras_vit.weights.hub import download_file, resolve_timm_name, split_repo

__all__ = ["hub_checkpoint"]


def hub_checkpoint(name, checkpoint, pretrained, revision=None, cache_dir=None,
                   force_download=False):  # fmt: skip
    """`(architecture name, checkpoint)` for `from_timm`'s name and arguments.

    Args:
        name: str. The name `from_timm` was given.
        checkpoint: what `from_timm` was given (must be None with `pretrained=True`).
        pretrained: bool. Download the weights.
        revision: optional str. A Hub branch, tag or commit.
        cache_dir: optional path. The Hub cache folder.
        force_download: bool. Download the files again even when cached (replacing them).

    Returns:
        `(name, checkpoint)`: the timm name to build (with its tag) and the downloaded
        safetensors path (`checkpoint` itself without `pretrained`).
    """
    if pretrained and checkpoint is not None:
        raise ValueError(
            "Give either checkpoint= (a local file or dict) or pretrained=True (the Hub's "
            f"weights for the name), not both. Received checkpoint={checkpoint!r}."
        )
    source = resolve_timm_name(name, revision)
    where = dict(revision=source["revision"], cache_dir=cache_dir, force_download=force_download)
    architecture, tag = source["architecture"], source["tag"]
    if architecture is None:  # hf-hub:<org>/<repo> outside timm/: its config.json names it
        architecture, tag = _repo_architecture(source, where)
    if pretrained:
        checkpoint = download_file(source["repo_id"], source["filename"], **where)
        if name.startswith(("hf-hub:", "hf_hub:")) and source["architecture"] is not None:
            _config_beside(source, where)  # timm reads that repo's config.json too
    return (f"{architecture}.{tag}" if tag else architecture), checkpoint


def _config_beside(source, where):
    """An `hf-hub:` repo's `config.json` (its `pretrained_cfg` and `label_names`, which timm's
    `create_model("hf-hub:...")` reads), fetched into the snapshot folder of the weights,
    where `from_timm` reads it beside the checkpoint. A repo without one (or, offline, one not
    cached) leaves timm's table for the name in charge. Registered `<arch>.<tag>` names use
    the table, as timm does."""
    from huggingface_hub import errors

    try:
        download_file(source["repo_id"], "config.json", **where)
    except (FileNotFoundError, errors.EntryNotFoundError):
        pass


def _repo_architecture(source, where):
    """The timm architecture a Hub repo's `config.json` names (timm's `architecture` key)."""
    path = download_file(source["repo_id"], "config.json", **where)
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    architecture = config.get("architecture")
    if not isinstance(architecture, str):
        repo = split_repo(source["repo_id"])[0]
        raise ValueError(
            f"{path}: expected timm's config.json with an 'architecture' (a timm model name) "
            f"for the repo {repo!r}. Received keys: {sorted(config)}."
        )
    tag = (config.get("pretrained_cfg") or {}).get("tag") or None
    return architecture, tag
