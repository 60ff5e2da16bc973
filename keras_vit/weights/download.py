"""Cached downloads through `keras.utils.get_file`, plus the few checks it lacks.

`keras.utils.get_file` downloads (`https://`, `http://`, `file://`) with a
progress bar into `{cache_dir}/{cache_subdir}/{fname}`, removes the partial
file when a transfer fails or is interrupted, and checks `file_hash` (sha256
or md5). What stays here, each for a gap of get_file (docs/weights.md,
"What keras_vit adds to get_file"):

- a cache hit is ours to check: get_file moves to `/tmp/.keras` when the cache
  folder is not writable (a shared read-only cache would be downloaded again),
  and downloads over a cached file whose digest differs (a file the user put
  there); here such a file is reported and left as it is;
- a malformed digest is refused before the download (get_file takes any
  string as an md5 and fails only afterwards; it compares case-sensitively);
- a downloaded file that fails its digest or `check` is removed (get_file
  leaves it in the cache, where a later call without a digest would use it);
- one TCP connection with a timeout before the download: get_file's
  `urlretrieve` passes no timeout, so an offline machine waits minutes.
"""

import hashlib
import os
import re
import socket
import threading
import urllib.parse
import urllib.request

CONNECT_TIMEOUT = 3.0  # seconds to reach the host before giving up (offline)


def hash_algorithm(file_hash):
    """Returns "sha256" or "md5" by the length of a hex digest; raises ValueError otherwise."""
    if isinstance(file_hash, str) and re.fullmatch(r"[0-9a-fA-F]+", file_hash):
        if len(file_hash) in (64, 32):
            return "sha256" if len(file_hash) == 64 else "md5"
    raise ValueError(
        "file_hash must be a sha256 (64 hex digits) or md5 (32 hex digits) digest. "
        f"Received: file_hash={file_hash!r}"
    )


def cache_root(cache_dir=None):
    """The Keras cache folder: `cache_dir`, else `$KERAS_HOME` (read now), else `~/.keras`."""
    if cache_dir is not None:
        return os.fspath(cache_dir)
    if "KERAS_HOME" in os.environ:
        return os.environ["KERAS_HOME"]
    home = os.path.expanduser("~")
    return os.path.join(home if os.access(home, os.W_OK) else "/tmp", ".keras")


def _digest(path, algorithm):
    hasher = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            hasher.update(block)
    return hasher.hexdigest()


def _probe(url, timeout):
    """Raises OSError when the URL's host (or its proxy) accepts no connection within `timeout` s.

    The look-up runs in a helper thread too, so a stalled DNS resolver cannot
    hold the caller longer than the timeout.
    """
    parts = urllib.parse.urlsplit(url)
    host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        proxy_parts = urllib.parse.urlsplit(proxy if "://" in proxy else "http://" + proxy)
        host, port = proxy_parts.hostname, proxy_parts.port or 80
    outcome = []

    def connect():
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            outcome.append(None)
        except OSError as error:
            outcome.append(error)

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(timeout + 1.0)
    if not outcome:
        raise TimeoutError(f"no answer from {host}:{port} within {timeout:g} s")
    if outcome[0] is not None:
        raise outcome[0]


def _remove(path):
    """Deletes a file this call downloaded; returns what to tell the user."""
    try:
        os.remove(path)
        return f"it was removed from the cache ({path})"
    except OSError as error:
        return f"removing it ({path}) failed ({error}); delete it by hand"


def fetch(
    url,
    target,
    *,
    file_hash=None,
    force_download=False,
    timeout=CONNECT_TIMEOUT,
    check=None,
    label=None,
    hint="",
):
    """Returns `target`, downloading `url` there with `keras.utils.get_file` when not cached.

    Args:
        url: str. An `https://`, `http://` or `file://` URL.
        target: str. Where the file is kept (`{cache root}/{sub folders}/{name}`).
        file_hash: optional str. Expected sha256 (64 hex digits) or md5 (32),
            any case. Checked after the download and on every cache hit.
            Defaults to None.
        force_download: bool. Download again even when cached (replacing the
            cached file). Defaults to False.
        timeout: float. Seconds to reach the host before failing (offline).
            Defaults to 3.
        check: optional callable `check(path, deep) -> None | str` returning
            why a file is unusable; `deep` (after a download) asks for the
            thorough check. Defaults to None.
        label: optional str. What is fetched, for the messages.
        hint: str. Appended to the errors: how to do without the network.

    Raises:
        ValueError: a malformed `file_hash`; a cached file failing the checks
            (left as it is); a downloaded one failing them (removed).
        ConnectionError: the file is not cached and cannot be fetched.
    """
    import keras

    target = os.fspath(target)
    label = label or os.path.basename(target)
    expected = file_hash.lower() if file_hash else None
    algorithm = hash_algorithm(expected) if expected else None
    if os.path.exists(target) and not force_download:
        received = _digest(target, algorithm) if expected else None
        if received != expected:
            problem = f"{algorithm} mismatch: expected {expected}, received {received}"
        else:
            problem = check(target, False) if check is not None else None
        if problem:
            raise ValueError(
                f"The cached file {target} ({label}) does not match: {problem}. It was left as "
                f"it is: delete it, or pass force_download=True, to download {url} again."
            )
        return target

    parts = urllib.parse.urlsplit(url)
    if parts.scheme in ("http", "https"):
        try:
            _probe(url, timeout)
        except OSError as error:
            raise ConnectionError(
                f"Cannot download {label} from {url}: {parts.netloc} is not reachable ({error}) "
                f"and the file is not cached at {target}. {hint}"
            ) from error
    folder, name = os.path.split(os.path.abspath(target))
    try:
        path = keras.utils.get_file(
            name,
            origin=url,
            file_hash=expected,
            cache_dir=folder,
            cache_subdir=folder,  # absolute: the file lands at `target`, wherever the cache is
            force_download=force_download,
        )
    except ValueError:  # get_file's digest mismatch; it leaves the file in the cache
        if not (expected and os.path.exists(target)):
            raise
        received = _digest(target, algorithm)
        problem = f"{algorithm} mismatch: expected {expected}, received {received}"
    except Exception as error:  # noqa: BLE001 - get_file raises a bare Exception for URL errors
        raise ConnectionError(
            f"Downloading {label} from {url} to {target} failed: {error}. Nothing was kept; "
            f"retry later. {hint}"
        ) from error
    else:
        problem = check(path, True) if check is not None else None
        if not problem:
            return path
    raise ValueError(
        f"The file downloaded from {url} ({label}) is corrupt or incomplete: {problem}; "
        f"{_remove(target)}. Retry to download it again. {hint}"
    )
