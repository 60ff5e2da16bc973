"""`from_timm(name, pretrained=True)`: a timm name -> its checkpoint in the Hugging Face cache.

Resolution is `resolve_timm_name` (timm's pretrained table, `keras_vit.weights.timm.pretrained`);
the download is `huggingface_hub`'s (`keras_vit.weights.hub.download_file`).
"""

import json

from keras_vit.weights.hub import SAFETENSORS, download_file, split_repo
from keras_vit.weights.timm.pretrained import pretrained_cfg, split_timm_name

__all__ = ["hub_checkpoint", "resolve_timm_name"]


def resolve_timm_name(name, revision=None):
    """Where timm's `create_model(name, pretrained=True)` gets its weights, safetensors only.

    Args:
        name: str. `"<arch>.<tag>"`, `"<arch>"` (timm's default tag), `"timm/<arch>.<tag>"`,
            or `"hf-hub:<org>/<repo>[@<revision>]"` (that very repo, in timm's layout: its
            `model.safetensors`; the architecture from a `timm/` repo's name, else from its
            `config.json`).
        revision: optional str. A branch, tag or commit (also `@<revision>` in the name).

    Returns:
        dict: `repo_id`, `filename` (a `.safetensors` file), `revision` (None: the
        default branch), `architecture` (None for an `hf-hub:` repo outside `timm/`: its
        `config.json` says) and `tag`.

    Raises:
        ValueError: an unknown name or tag, a tag timm loads from a URL rather than the
            Hub, or one whose file is a pickle with no safetensors alternative.

    Example:

    >>> resolve_timm_name("vit_base_patch16_224")["repo_id"]
    'timm/vit_base_patch16_224.augreg2_in21k_ft_in1k'
    """
    if name.startswith(("hf-hub:", "hf_hub:")):  # timm's own rule: this very repo
        repo_id, revision = split_repo(name, revision)
        architecture = tag = None
        if repo_id.startswith("timm/"):
            architecture, tag, _ = split_timm_name(repo_id)
        return dict(repo_id=repo_id, filename=SAFETENSORS, revision=revision,
                    architecture=architecture, tag=tag)  # fmt: skip
    _, _, pinned = split_timm_name(name)
    if pinned and revision and pinned != revision:
        raise ValueError(f"Two revisions for {name!r}: revision={revision!r}. Give one.")
    revision = pinned or revision
    cfg = pretrained_cfg(name)
    full = f"{cfg['architecture']}.{cfg['tag']}"
    if cfg["tag"] is None:
        raise ValueError(
            f"timm has no pretrained weights for {cfg['architecture']!r} (no tag): build it "
            "without pretrained=True, or pass a checkpoint file."
        )
    if not cfg["hf_hub_id"]:
        raise ValueError(
            f"timm loads {full!r} from {cfg['url']} (not from the Hugging Face Hub), a pickled "
            "PyTorch file; keras_vit downloads safetensors from the Hub only. Download it "
            "yourself and pass the file as checkpoint= (read with torch.load(weights_only=True))."
        )
    repo_id = cfg["hf_hub_id"]
    if repo_id.endswith("/"):  # timm's bare 'timm/': the repo is named after the model
        repo_id += full
    return dict(repo_id=repo_id, filename=_safe_filename(cfg["hf_hub_filename"], full),
                revision=revision, architecture=cfg["architecture"], tag=cfg["tag"])  # fmt: skip


def _safe_filename(filename, name):
    """timm's safetensors alternative of a file name (`_get_safe_alternatives`)."""
    if not filename or filename == "pytorch_model.bin":
        return SAFETENSORS
    if filename.endswith(".safetensors"):
        return filename
    if filename == "open_clip_pytorch_model.bin":
        return "open_clip_model.safetensors"
    if filename.endswith(".bin"):
        return filename[: -len(".bin")] + ".safetensors"
    raise ValueError(
        f"timm's file for {name!r} is {filename!r}, a pickle; keras_vit loads safetensors only."
    )


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
