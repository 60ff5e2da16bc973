"""Cached downloads through `keras.utils.get_file`, plus the few checks it lacks.

get_file downloads (`https://`, `http://`, `file://`) with a progress bar,
removes a partial file when a transfer fails, and checks `file_hash`. Added
here, each for a gap of get_file (docs/weights.md, "What keras_vit adds"):

- cache hits are checked here and never replaced unasked: get_file downloads
  over a cached file whose digest differs, and goes to `/tmp/.keras` when the
  cache is read-only (a shared cache would be downloaded again);
- a malformed digest is refused before the download (get_file takes any
  string for an md5, and compares digests case-sensitively);
- a downloaded file that fails its digest or `check` is removed (get_file
  leaves it in the cache, where a call without a digest would use it);
- a TCP connection with a timeout first: get_file's `urlretrieve` passes none,
  so offline a connection attempt waits minutes.
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
    if isinstance(file_hash, str) and re.fullmatch(r"[0-9a-fA-F]{64}|[0-9a-fA-F]{32}", file_hash):
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


def _mismatch(path, expected):
    """None when the file at `path` has the (lower-case) digest `expected`, else what differs."""
    algorithm = hash_algorithm(expected)
    hasher = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            hasher.update(block)
    received = hasher.hexdigest()
    if received != expected:
        return f"{algorithm} mismatch: expected {expected}, received {received}"
    return None


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


def fetch(url, target, *, file_hash=None, force_download=False, timeout=CONNECT_TIMEOUT,
          check=None, label=None, hint=""):  # fmt: skip
    """Returns `target`, downloading `url` there with `keras.utils.get_file` when not cached.

    Args:
        url: str. An `https://`, `http://` or `file://` URL.
        target: str. Where the file is kept.
        file_hash: optional str. sha256 (64 hex digits) or md5 (32), any case;
            checked after a download and on every cache hit.
        force_download: bool. Download again, replacing a cached file.
        timeout: float. Seconds to reach the host (offline).
        check: optional `check(path, deep) -> None | str`: why a file is
            unusable (`deep`: after a download).
        label, hint: str. What is fetched, and how to do without the
            network, for the messages.

    Raises:
        ValueError: a malformed `file_hash`; a cached file failing the checks
            (left as it is); a downloaded one failing them (removed).
        ConnectionError: the file is not cached and cannot be fetched.
    """
    import keras

    target = os.path.abspath(target)
    label = label or os.path.basename(target)
    expected = file_hash.lower() if file_hash else None
    if expected:
        hash_algorithm(expected)  # a malformed digest: refused before anything else
    if os.path.exists(target) and not force_download:
        problem = _mismatch(target, expected) if expected else None
        problem = problem or (check(target, False) if check is not None else None)
        if problem:
            raise ValueError(
                f"The cached file {target} ({label}) is unusable: {problem}. It was left as it "
                f"is: delete it, or pass force_download=True, to download {url} again."
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
    folder, name = os.path.split(target)
    problem = None
    try:  # an absolute cache_subdir is used as is: the file lands at `target`
        keras.utils.get_file(
            name,
            origin=url,
            file_hash=expected,
            cache_subdir=folder,
            force_download=force_download,
        )
    except ValueError:  # get_file's digest mismatch; it leaves the file in the cache
        if not (expected and os.path.exists(target)):
            raise
        problem = _mismatch(target, expected)  # both digests, for the message
    except Exception as error:  # noqa: BLE001 - get_file raises a bare Exception for URL errors
        raise ConnectionError(
            f"Downloading {label} from {url} to {target} failed: {error}. Nothing was kept; "
            f"retry later. {hint}"
        ) from error
    problem = problem or (check(target, True) if check is not None else None)
    if not problem:
        return target
    try:
        os.remove(target)
        removed = f"it was removed from the cache ({target})"
    except OSError as error:
        removed = f"removing {target} failed ({error}); delete it by hand"
    raise ValueError(
        f"The file downloaded from {url} ({label}) is corrupt or incomplete: {problem}; "
        f"{removed}. Retry to download it again. {hint}"
    )
