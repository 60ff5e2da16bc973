"""huggingface_hub's errors at keras_vit's boundary: the documented types, true messages.

`keras_vit.weights.hub` downloads through `huggingface_hub`, whose errors are its own types
(`RepositoryNotFoundError`, `RevisionNotFoundError`, `GatedRepoError`, HTTP errors); keras_vit
promises `ValueError`, `FileNotFoundError`, `FileExistsError` or `PermissionError`. `translate`
maps each to one of those with a message saying what to change, the original chained as the
cause. `hub_unreachable` asks the Hub once, without huggingface_hub's retries: with no file
cached and the Hub unreachable, huggingface_hub retries for about 23 s (1 + 2 + 4 + 8 + 8 s of
back-off) before it gives up; keras_vit then reads the cache alone (`local_files_only=True`)
at once.
"""

import os

__all__ = [
    "check_cache_dir",
    "check_revision",
    "hub_unreachable",
    "offline_message",
    "translate",
]

PROBE_TIMEOUT = 10.0  # seconds; huggingface_hub's own default metadata timeout


def where(repo_id, revision):
    return repo_id + (f"@{revision}" if revision else "")


def check_revision(revision):
    """`revision` (None, or a non-empty str), else a ValueError naming it."""
    if revision is not None and (not isinstance(revision, str) or not revision.strip()):
        raise ValueError(
            "revision must be a Hub branch, tag or commit (a str). "
            f"Received: revision={revision!r} (type {type(revision).__name__})"
        )
    return revision


def check_cache_dir(cache_dir):
    """`cache_dir` (None, or a folder path that is not a file), else a ValueError naming it."""
    if cache_dir is None:
        return None
    if not isinstance(cache_dir, (str, os.PathLike)):
        raise ValueError(
            "cache_dir must be a folder path (a str or os.PathLike). "
            f"Received: cache_dir={cache_dir!r} (type {type(cache_dir).__name__})"
        )
    if os.path.exists(cache_dir) and not os.path.isdir(cache_dir):
        raise ValueError(
            f"cache_dir must be a folder (the Hub cache), but {os.fspath(cache_dir)!r} is a "
            "file. Choose a folder (it is made when missing)."
        )
    return cache_dir


def hub_unreachable():
    """The transport error of one request to the Hub (`HF_ENDPOINT`), or None when it answers.

    Made with huggingface_hub's own HTTP client (its proxies, certificates and headers), once
    and without retries; any HTTP answer, an error status included, means reachable.
    """
    import huggingface_hub
    from huggingface_hub import constants

    try:
        huggingface_hub.get_session().head(constants.ENDPOINT, timeout=PROBE_TIMEOUT)
    except Exception as error:  # noqa: BLE001 - a transport error of any kind: unreachable
        return error
    return None


def offline_message(repo_id, revision, cache_dir, filename, error, unreachable=None):
    """The FileNotFoundError message of a file that is neither cached nor downloadable now."""
    from huggingface_hub import constants

    cache = os.fspath(cache_dir) if cache_dir is not None else constants.HF_HUB_CACHE
    if constants.HF_HUB_OFFLINE:
        why = "HF_HUB_OFFLINE is set, so nothing is downloaded"
        then = " (or the same keras_vit call without HF_HUB_OFFLINE=1)"
    else:
        cause = unreachable if unreachable is not None else error
        why = (
            f"the Hub at {constants.ENDPOINT} could not be reached ({type(cause).__name__}: "
            f"{cause})"
        )
        then = ""
    return (
        f"{filename} of the Hub repo {where(repo_id, revision)!r} is not in the Hugging Face "
        f"cache {cache!r} and {why}. Download it once with a connection, into that cache: "
        f"`hf download {repo_id} {filename.split(', ')[0]}"
        + (f" --revision {revision}" if revision else "")
        + (f" --cache-dir {cache}" if cache_dir is not None else "")
        + f"`{then}."
    )


def translate(error, repo_id, revision, what):
    """The documented error for huggingface_hub's `error`, or None when it is not the Hub's.

    Args:
        error: the exception `hf_hub_download` / `snapshot_download` raised.
        repo_id, revision: what was asked for.
        what: str. The file or files asked for, for the message.

    Returns:
        A `PermissionError` (gated, private or disabled repos, 401 / 403), `ValueError` (a
        revision the repo does not have, an invalid repo id), `FileNotFoundError` (no such
        repo or file, or a server error after huggingface_hub's retries), or None.
    """
    from huggingface_hub import constants, errors

    repo = where(repo_id, revision)
    login = (
        "log in (`hf auth login`, or set HF_TOKEN) with an account that has access"
        if not constants.HF_HUB_OFFLINE
        else "log in"
    )
    if isinstance(error, errors.GatedRepoError):
        return PermissionError(
            f"The Hub repo {repo_id!r} is gated: ask for access on its page "
            f"({constants.ENDPOINT}/{repo_id}), then {login}. ({_first_line(error)})"
        )
    if isinstance(error, errors.DisabledRepoError):
        return PermissionError(f"The Hub repo {repo_id!r} is disabled by its author.")
    if isinstance(error, errors.RepositoryNotFoundError):
        return FileNotFoundError(
            f"No Hub repo {repo_id!r} at {constants.ENDPOINT} (or it is private: {login}). "
            "Check the name."
        )
    if isinstance(error, errors.RevisionNotFoundError):
        return ValueError(
            f"The Hub repo {repo_id!r} has no revision {revision!r} (a branch, tag or commit). "
            f"Received: revision={revision!r}"
        )
    if isinstance(error, errors.RemoteEntryNotFoundError):
        return FileNotFoundError(f"The Hub repo {repo!r} has no {what}.")
    if isinstance(error, errors.HFValidationError):
        return ValueError(f"{repo_id!r} is not a valid Hub repo id: {error}")
    if isinstance(error, errors.HfHubHTTPError):
        status = getattr(getattr(error, "response", None), "status_code", None)
        if status in (401, 403):
            return PermissionError(
                f"The Hub refused {what} of {repo!r} (HTTP {status}): {login}. "
                f"({_first_line(error)})"
            )
        return FileNotFoundError(
            f"{what} of the Hub repo {repo!r} could not be downloaded: the Hub answered HTTP "
            f"{status} after huggingface_hub's retries ({_first_line(error)}). Try again later; "
            "files already cached load with HF_HUB_OFFLINE=1."
        )
    return None


def _first_line(error):
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
