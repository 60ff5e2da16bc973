"""Checkpoints by name from the Hugging Face Hub, through `huggingface_hub` (the `hub` extra).

Everything about the network, the cache and offline mode is `huggingface_hub`'s own:
`hf_hub_download` / `snapshot_download` into the standard cache (`HF_HOME`, `HF_HUB_CACHE`,
or `cache_dir=`: `hub/models--{org}--{name}/snapshots/{commit}/...`), resumed downloads,
`HF_HUB_OFFLINE=1` (cached files only), `HF_ENDPOINT`, tokens. This module tells repo ids from
paths, refuses pickled checkpoints (safetensors only: a pickle can run code when read), and
turns the library's errors into messages saying what to download and where. Shared by the
timm and transformers sources (a timm name's repo and file: `keras_vit.weights.timm.hub_checkpoint`).
`huggingface_hub` is imported when a name is resolved, never by `import keras_vit`.
"""

import os
import re

__all__ = [
    "INSTALL_HINT",
    "download_file",
    "download_snapshot",
    "import_hub",
    "is_repo_id",
    "split_repo",
]

INSTALL_HINT = 'pip install "keras-vit[hub]"'
SAFETENSORS = "model.safetensors"
# What `from_huggingface` fetches of a transformers repo (never a pickle).
SNAPSHOT_PATTERNS = ("config.json", "*.safetensors", "model.safetensors.index.json",
                     "preprocessor_config.json")  # fmt: skip
_PICKLES = (".bin", ".pth", ".pt", ".pkl", ".ckpt")
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?")
_HF_PREFIXES = ("hf://", "hf-hub:", "hf_hub:")
_FILE_EXTENSIONS = (".keras", ".npz", ".safetensors", ".h5", ".json", ".tflite", ".onnx",
                    *_PICKLES)  # fmt: skip


def import_hub():
    """`huggingface_hub`, or an ImportError naming the extra that installs it."""
    try:
        import huggingface_hub
    except ImportError as error:
        raise ImportError(
            "Loading weights by name from the Hugging Face Hub needs huggingface_hub, which is "
            f"not installed: {INSTALL_HINT} (or pip install huggingface_hub). A local file or "
            "folder loads without it."
        ) from error
    return huggingface_hub


def split_repo(name, revision=None):
    """`(repo_id, revision)` of `"org/repo"`, `"hf://org/repo@rev"` or `"hf-hub:org/repo@rev"`.

    An `@revision` in the name and the `revision` argument must agree when both are given.

    >>> split_repo("hf://google/vit-base-patch16-224@refs/pr/1")
    ('google/vit-base-patch16-224', 'refs/pr/1')
    """
    text = os.fspath(name).strip()
    for prefix in _HF_PREFIXES:
        if text.startswith(prefix):
            text = text[len(prefix) :]
    repo_id, _, pinned = text.partition("@")
    if pinned and revision and pinned != revision:
        raise ValueError(
            f"Two revisions for {repo_id!r}: {pinned!r} in the name and revision={revision!r}. "
            "Give one."
        )
    return repo_id, pinned or revision or None


def is_repo_id(path):
    """Whether `path` names a Hub repo rather than a local file or folder.

    A string with an `hf://` / `hf-hub:` prefix, or of the form `org/repo[@revision]` that is
    not an existing path and does not end in a file extension (`runs/model.keras`).
    """
    if not isinstance(path, str):
        return False
    if path.startswith(_HF_PREFIXES):
        return True
    if path.lower().endswith(_FILE_EXTENSIONS):  # a missing file, not a repo
        return False
    return bool(_REPO_ID.fullmatch(path.strip())) and not os.path.exists(path)


def download_file(repo_id, filename, *, revision=None, cache_dir=None, force_download=False):
    """`huggingface_hub.hf_hub_download` of one file, with keras_vit's messages.

    `force_download=True` downloads the file again even when it is cached, and replaces the
    cached copy (huggingface_hub's own flag; refused by it with `HF_HUB_OFFLINE=1`).

    Returns:
        str: the file's path in the cache (`.../snapshots/{commit}/{filename}`).

    Raises:
        ImportError: huggingface_hub is not installed (naming the `hub` extra).
        FileNotFoundError: offline (`HF_HUB_OFFLINE=1` or no connection) and not cached,
            saying what to download and where; or no such file in the repo (a repo without
            `model.safetensors`: keras_vit reads no pickles).
    """
    hub = import_hub()
    from huggingface_hub import errors

    if filename.endswith(_PICKLES):
        raise ValueError(_pickle_refusal(repo_id, revision, filename))
    _check_force_download(force_download, repo_id, revision)
    try:
        return hub.hf_hub_download(
            repo_id, filename, revision=revision, cache_dir=cache_dir, force_download=force_download
        )
    except errors.LocalEntryNotFoundError as error:
        raise FileNotFoundError(
            _offline_message(repo_id, revision, cache_dir, filename, error)
        ) from error
    except errors.RemoteEntryNotFoundError as error:
        if filename.endswith(".safetensors"):
            raise FileNotFoundError(_pickle_refusal(repo_id, revision, filename)) from error
        raise


def download_snapshot(
    repo_id,
    *,
    revision=None,
    cache_dir=None,
    allow_patterns=SNAPSHOT_PATTERNS,
    force_download=False,
):
    """`huggingface_hub.snapshot_download` of a repo's config and safetensors files.

    `force_download=True` downloads every file again, replacing the cached copies.

    Returns:
        str: the snapshot folder in the cache.

    Raises:
        ImportError, FileNotFoundError: as `download_file` (a snapshot without any
            `.safetensors` file is refused: keras_vit reads no pickles).
    """
    hub = import_hub()
    from huggingface_hub import errors

    _check_force_download(force_download, repo_id, revision)
    try:
        folder = hub.snapshot_download(
            repo_id,
            revision=revision,
            cache_dir=cache_dir,
            allow_patterns=list(allow_patterns),
            force_download=force_download,
        )
    except errors.LocalEntryNotFoundError as error:
        raise FileNotFoundError(
            _offline_message(repo_id, revision, cache_dir, ", ".join(allow_patterns), error)
        ) from error
    if not any(name.endswith(".safetensors") for name in os.listdir(folder)):
        raise FileNotFoundError(_pickle_refusal(repo_id, revision, "*.safetensors"))
    return folder


def _check_force_download(force_download, repo_id, revision):
    """`force_download=True` needs the network: a ValueError with `HF_HUB_OFFLINE` set (where
    `snapshot_download` would otherwise use the cached files silently)."""
    from huggingface_hub import constants

    if force_download and constants.HF_HUB_OFFLINE:
        raise ValueError(
            f"force_download=True downloads {_where(repo_id, revision)!r} again, but "
            "HF_HUB_OFFLINE is set: unset it (or drop force_download to use the cached files)."
        )


def _where(repo_id, revision):
    return repo_id + (f"@{revision}" if revision else "")


def _pickle_refusal(repo_id, revision, filename):
    return (
        f"The Hub repo {_where(repo_id, revision)!r} has no {filename}: keras_vit loads "
        "safetensors only, never pickled checkpoints (pytorch_model.bin, *.pth), which can run "
        "code when read. Convert the checkpoint to safetensors (e.g. with timm or "
        "transformers: save_pretrained(..., safe_serialization=True)) or choose a repo that has "
        f"one; a local .bin/.pth file still loads with checkpoint= (torch.load(weights_only="
        "True))."
    )


def _offline_message(repo_id, revision, cache_dir, filename, error):
    from huggingface_hub import constants

    cache = os.fspath(cache_dir) if cache_dir is not None else constants.HF_HUB_CACHE
    offline = constants.HF_HUB_OFFLINE
    why = (
        "HF_HUB_OFFLINE is set, so nothing is downloaded"
        if offline
        else f"the Hub could not be reached ({type(error).__name__})"
    )
    return (
        f"{filename} of the Hub repo {_where(repo_id, revision)!r} is not in the Hugging Face "
        f"cache {cache!r} and {why}. Download it once with a connection, into that cache: "
        f"`hf download {repo_id} {filename.split(', ')[0]}"
        + (f" --revision {revision}" if revision else "")
        + (f" --cache-dir {cache}" if cache_dir is not None else "")
        + "` (or the same keras_vit call without HF_HUB_OFFLINE=1)."
    )
