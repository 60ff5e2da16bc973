"""Resumable, verified downloads into a local cache: nothing here is specific to ViT.

`fetch(url, target)` returns `target` once it holds the verified file:

- an `https://`, `http://` or `file://` URL is copied into `<target>.part`
  with a progress bar, and renamed to `target` once verified;
- a transfer that stops early is resumed with an HTTP `Range` request: a
  dropped connection is retried `DOWNLOAD_ATTEMPTS` times within one call,
  and what arrived stays in `<target>.part` for the next call;
- the file is checked before use: its sha256 or md5 (`file_hash=`) when
  given, then the caller's `check(path, deep)` (e.g. a zip archive's CRCs);
  a bad file is deleted with an error that says how to retry;
- a `<target>.sha256` sidecar (the format `sha256sum -c` reads) records the
  verified file's digest, size and modification time, so a cache hit that
  changed since (a partial copy, a restore) is caught without a download: a
  hit compares size and time with the sidecar and hashes again only when
  they differ;
- when the host cannot be reached within `timeout` seconds and the file is
  not cached, the error says so at once, with the caller's `hint` (where to
  put the file by hand).
"""

import dataclasses
import hashlib
import http.client
import os
import re
import socket
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

CONNECT_TIMEOUT = 3.0  # seconds to reach the host before giving up (offline)
READ_TIMEOUT = 60.0  # seconds without data before a started download gives up
DOWNLOAD_ATTEMPTS = 3  # requests per call before a dropped download is left for the next call
RETRY_WAIT = 1.0  # seconds before the second attempt (then 2x, 3x, ...)
CHUNK_SIZE = 1 << 20
PART_SUFFIX = ".part"  # a download in progress: `<file>.part`, renamed once verified
SIDECAR_SUFFIX = ".sha256"  # `<file>.sha256`: digest, size and mtime of the verified file
RETRY_STATUS = (408, 429, 500, 502, 503, 504)  # HTTP answers worth another attempt


def hash_algorithm(file_hash):
    """Returns "sha256" or "md5" by the length of a hex digest; raises ValueError otherwise."""
    if isinstance(file_hash, str) and re.fullmatch(r"[0-9a-fA-F]+", file_hash):
        if len(file_hash) == 64:
            return "sha256"
        if len(file_hash) == 32:
            return "md5"
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


@dataclasses.dataclass(frozen=True)
class _Job:
    """One `fetch`: what the error messages name, and how a complete file is checked."""

    url: str
    target: str
    label: str  # what is fetched, in words: "preset 'x' of 'B/16'"
    hint: str  # how to do without the network
    check: object  # check(path, deep) -> None or the reason the file is unusable


def _probe(url, timeout):
    """Raises OSError when the URL's host (or its proxy) accepts no connection within `timeout` s.

    The look-up and the connection run in a helper thread, so that a stalled
    DNS resolver cannot hold the caller longer than the timeout either.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return
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


def _digests(path, algorithms):
    """{algorithm: hex digest} of the file at `path`, reading it once."""
    hashers = {name: hashlib.new(name) for name in algorithms}
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK_SIZE), b""):
            for hasher in hashers.values():
                hasher.update(block)
    return {name: hasher.hexdigest() for name, hasher in hashers.items()}


def _read_sidecar(path):
    """(sha256, size, mtime_ns) recorded in `path + ".sha256"`; None when absent or unreadable."""
    try:
        with open(path + SIDECAR_SUFFIX, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        return None
    digest = re.match(r"([0-9a-f]{64}) [ *]", text)
    record = re.search(r"^# size=(\d+) mtime_ns=(\d+)", text, flags=re.MULTILINE)
    if digest is None or record is None:
        return None
    return digest.group(1), int(record.group(1)), int(record.group(2))


def _write_sidecar(path, sha256):
    """Records the verified file's sha256, size and mtime next to it (`sha256sum -c` reads it).

    A read-only cache (a shared, air-gapped one) only loses the shortcut: the
    next use verifies the file again.
    """
    stat = os.stat(path)
    text = (
        f"{sha256}  {os.path.basename(path)}\n"
        f"# size={stat.st_size} mtime_ns={stat.st_mtime_ns} (keras_vit: verified file; "
        "when the file's size or time differ, it is hashed again)\n"
    )
    try:
        with open(path + SIDECAR_SUFFIX, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError:
        pass


def _remove(path):
    """Deletes `path` and its sidecar; returns what to tell the user."""
    try:
        os.remove(path)
        removed = "it was removed from the cache"
    except OSError as error:
        removed = f"removing it failed ({error}); delete it by hand"
    try:
        os.remove(path + SIDECAR_SUFFIX)
    except OSError:
        pass
    return removed


def _fail_corrupt(job, path, reason):
    removed = _remove(path)
    raise ValueError(
        f"The file {path} ({job.label}, from {job.url}) is corrupt or incomplete: {reason}; "
        f"{removed}. Retry to download it again. {job.hint}"
    )


def _hash_mismatch(algorithm, expected, received):
    return f"{algorithm} mismatch: expected {expected.lower()}, received {received}"


def _check(job, path, deep):
    problem = job.check(path, deep) if job.check is not None else None
    if problem:
        _fail_corrupt(job, path, problem)


def _verify(job, path, expected, record=None):
    """Checks a complete file (hash, then `job.check`); returns its sha256, or removes it, raising.

    `record`: the sidecar's (sha256, size, mtime_ns) of a cached file; its
    bytes must still hash to that sha256 (then the file was checked already).
    """
    algorithm = hash_algorithm(expected) if expected else "sha256"
    digests = _digests(path, {"sha256", algorithm})
    if record is not None and digests["sha256"] != record[0]:
        _fail_corrupt(
            job,
            path,
            "its bytes changed since it was verified (bit rot or a partial copy?): "
            + _hash_mismatch("sha256", record[0], digests["sha256"])
            + f" (recorded in {path + SIDECAR_SUFFIX})",
        )
    if expected and digests[algorithm] != expected.lower():
        _fail_corrupt(job, path, _hash_mismatch(algorithm, expected, digests[algorithm]))
    if record is None:
        _check(job, path, deep=True)
    return digests["sha256"]


def _check_cached(job, expected):
    """Verifies a cache hit: cheap (size + time against the sidecar) when the file is unchanged."""
    target = job.target
    record = _read_sidecar(target)
    stat = os.stat(target)
    if record is not None and record[1:] == (stat.st_size, stat.st_mtime_ns):
        if not expected:
            return
        if hash_algorithm(expected) == "sha256":
            if record[0] != expected.lower():
                _fail_corrupt(job, target, _hash_mismatch("sha256", expected, record[0]))
            return
        _verify(job, target, expected, record)  # md5: the sidecar cannot answer
        return
    if record is None:  # copied by hand, or cached before sidecars: one full check
        _check(job, target, deep=False)  # fast answer for an HTML page or a stub
    _write_sidecar(target, _verify(job, target, expected, record))


class _Dropped(OSError):
    """The transfer stopped early (or the server answered an unusable range)."""


# What a flaky link raises: worth another attempt that resumes.
_DROPPED = (
    _Dropped,
    http.client.HTTPException,  # IncompleteRead, RemoteDisconnected, BadStatusLine
    ConnectionError,  # reset, aborted, refused
    TimeoutError,  # socket.timeout: no data for READ_TIMEOUT s
    ssl.SSLError,
)


def _content_range(value):
    """(first byte, total) of `Content-Range: bytes a-b/total` or `bytes */total`, else None."""
    match = re.fullmatch(r"\s*bytes\s+(?:(\d+)-\d+|\*)/(\d+|\*)\s*", value or "")
    if match is None:
        return None, None
    first = int(match.group(1)) if match.group(1) is not None else None
    total = int(match.group(2)) if match.group(2) != "*" else None
    return first, total


def _fetch_once(url, part, timeout):
    """One request for `url` into `part`: resumes it (`Range`) when it exists, else starts it.

    Returns when the server says the file is complete (or gave no size);
    raises one of `_DROPPED` when the transfer stopped early (what arrived
    stays in `part`), `urllib.error.HTTPError` for an HTTP error.
    """
    import keras

    offset = os.path.getsize(part) if os.path.exists(part) else 0
    request = urllib.request.Request(url)
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as error:
        if error.code != 416 or not offset:
            raise
        _, total = _content_range(error.headers.get("Content-Range"))
        error.close()
        if total is None or total == offset:
            return  # every byte is here already; the checks have the last word
        os.remove(part)  # longer than the file: it is not a prefix of this file
        raise _Dropped(f"{part} holds {offset} bytes, the file {total}; starting again") from None
    with response:
        status = getattr(response, "status", None) or 200  # a file:// answer has no status
        if status == 206:
            first, total = _content_range(response.headers.get("Content-Range"))
            if first != offset:
                os.remove(part)
                raise _Dropped(
                    f"asked for bytes from {offset}, the server sent a range starting at {first}; "
                    "starting again"
                )
            mode = "ab"
        else:  # 200: the whole file (the server ignores Range, or none was sent)
            offset, mode = 0, "wb"
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
        progbar = keras.utils.Progbar(total)
        progbar.update(offset)
        with open(part, mode) as f:
            for block in iter(lambda: response.read(CHUNK_SIZE), b""):
                f.write(block)
                offset += len(block)
                progbar.update(offset)
    if total is not None and offset < total:
        raise _Dropped(f"the connection closed after {offset} of {total} bytes")
    if total is not None and offset > total:
        raise ValueError(f"received {offset} bytes, more than the {total} announced")


def _kept(part):
    """What the error says of a partial download: kept, and resumed by the next call."""
    kept = os.path.getsize(part) if os.path.exists(part) else 0
    if not kept:
        return ""
    return (
        f"The {kept} bytes received so far are kept in {part}; the next call resumes from "
        "there (delete that file to start again). "
    )


def _download(job, part):
    """Fetches the URL into `part` in up to DOWNLOAD_ATTEMPTS requests, each resuming the last."""
    error = None
    for attempt in range(1, DOWNLOAD_ATTEMPTS + 1):
        if attempt > 1:
            time.sleep(RETRY_WAIT * (attempt - 1))
        try:
            _fetch_once(job.url, part, READ_TIMEOUT)
            return
        except urllib.error.HTTPError as http_error:
            error = http_error
            if http_error.code not in RETRY_STATUS:
                break
        except ValueError as too_long:
            _fail_corrupt(job, part, str(too_long))
        except _DROPPED as dropped:
            error = dropped
        except urllib.error.URLError as url_error:  # wraps what the connection raised
            error = url_error
            if not isinstance(url_error.reason, _DROPPED):
                break
    raise ConnectionError(
        f"Downloading {job.label} from {job.url} failed after {attempt} attempt(s): {error}. "
        f"{_kept(part) or 'Retry later. '}{job.hint}"
    ) from error


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
    """Returns `target` holding the verified file at `url`, downloading it when not cached.

    Args:
        url: str. An `https://`, `http://` or `file://` URL.
        target: str. Where the file is kept; `<target>.part` holds a download
            in progress and `<target>.sha256` the verified file's record.
        file_hash: optional str. Expected sha256 (64 hex digits) or md5 (32).
            Defaults to None (no digest check).
        force_download: bool. Download again from the start even when cached
            (or partly downloaded). Defaults to False.
        timeout: float. Seconds to reach the host before failing (offline).
            Defaults to 3.
        check: optional callable `check(path, deep) -> None | str` returning
            why a complete file is unusable (e.g. not a zip archive); `deep`
            asks for the thorough check. Defaults to None.
        label: optional str. What is fetched, in words, for the error
            messages. Defaults to the file's name.
        hint: str. Appended to the errors: how to do without the network.

    Returns:
        `target`, as a str.

    Raises:
        ValueError: a malformed `file_hash`, or a corrupt file or one whose
            digest differs (removed; the message names both digests).
        ConnectionError: the file is not cached and cannot be fetched; the
            message says whether the next call resumes.
    """
    target = os.fspath(target)
    if file_hash:
        hash_algorithm(file_hash)
    job = _Job(url, target, label or os.path.basename(target), hint, check)
    part = target + PART_SUFFIX
    if os.path.exists(target) and not force_download:
        _check_cached(job, file_hash)
        return target

    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "file":
        source = urllib.request.url2pathname(parts.path)
        if not os.path.exists(source):
            raise ConnectionError(f"Cannot fetch {job.label}: {source} does not exist. {hint}")
    else:
        try:
            _probe(url, timeout)
        except OSError as error:
            raise ConnectionError(
                f"Cannot download {job.label}: {parts.netloc} is not reachable ({error}) and "
                f"the file is not cached. {_kept(part)}{hint}"
            ) from error

    os.makedirs(os.path.dirname(target), exist_ok=True)
    if force_download and os.path.exists(part):
        os.remove(part)
    _download(job, part)
    sha256 = _verify(job, part, file_hash)
    os.replace(part, target)
    _write_sidecar(target, sha256)
    return target
