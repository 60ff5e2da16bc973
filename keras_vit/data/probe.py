"""The offline check before a tfds download: the hosts a builder downloads from, each probed with
one TCP connection (in parallel threads, `PROBE_TIMEOUT` seconds in all)."""

import socket
import threading
import time
import urllib.parse

# Offline check before a tfds download: connect to every host the download would use.
PROBE_TIMEOUT = 5.0  # seconds for all hosts together (probed in parallel)


def download_hosts(builder):
    """The `(host, port)` pairs a tfds builder downloads from (from its checksums file).

    Empty when tfds has no URL list for the dataset; the download is then not probed, and a
    failure is still reported with the preparation instructions (after tfds' own retries).
    """
    try:
        urls = list(builder.url_infos or ())
    except Exception:  # no checksums file, or one tfds cannot read
        return set()
    hosts = set()
    for url in urls:
        parts = urllib.parse.urlsplit(url)
        if parts.hostname:
            default = {"https": 443, "http": 80, "ftp": 21}.get(parts.scheme, 443)
            hosts.add((parts.hostname, parts.port or default))
    return hosts


def unreachable_hosts(hosts, timeout=None):
    """`{"host:port": cause}` for the hosts a TCP connection cannot reach within `timeout` s.

    All hosts are probed in parallel (a connection is opened and closed, nothing is sent), so
    the check takes at most `timeout` seconds (`PROBE_TIMEOUT` by default) even when name
    resolution hangs.
    """
    timeout = PROBE_TIMEOUT if timeout is None else timeout
    results = {}

    def probe(host, port):
        try:
            with socket.create_connection((host, port), timeout=timeout):
                results[(host, port)] = None
        except OSError as e:
            results[(host, port)] = f"{type(e).__name__}: {e}"

    threads = [threading.Thread(target=probe, args=hp, daemon=True) for hp in sorted(hosts)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    no_answer = f"no answer within {timeout:g} s"
    return {
        f"{host}:{port}": results.get((host, port), no_answer)
        for host, port in sorted(hosts)
        if results.get((host, port), no_answer) is not None
    }

