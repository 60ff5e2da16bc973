"""keras_vit/data/probe.py: a tfds download is probed first and fails fast offline (issue 23).

The images are tiny PNGs written with PIL by the tests; nothing touches the network (the offline
tfds check is exercised with a patched `socket.create_connection`).
"""

import socket
import threading
import time

import pytest

pytest.importorskip("tensorflow")
tfds = pytest.importorskip("tensorflow_datasets")
Image = pytest.importorskip("PIL.Image")

from keras_vit import data  # noqa: E402
from keras_vit.data import probe  # noqa: E402


@pytest.fixture
def no_download(monkeypatch):
    """Makes the mnist builder's download fail loudly, recording that it was called."""
    calls = []
    builder_class = type(tfds.builder("mnist"))

    def download_and_prepare(self, *args, **kwargs):
        calls.append(self.name)
        raise AssertionError("download_and_prepare must not run offline")

    monkeypatch.setattr(builder_class, "download_and_prepare", download_and_prepare)
    return calls


def test_offline_download_fails_fast_with_instructions(tmp_path, monkeypatch, no_download):
    probed = []

    def offline(address, timeout=None, *args, **kwargs):
        probed.append(address)
        raise socket.gaierror(-3, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "create_connection", offline)
    start = time.monotonic()
    with pytest.raises(FileNotFoundError, match="cannot be downloaded here") as err:
        data.load_source("tfds:mnist", data_dir=str(tmp_path), download=True)
    assert time.monotonic() - start < 30
    message = str(err.value)
    assert "storage.googleapis.com:443" in message and "name resolution" in message
    assert "tfds build mnist" in message and "--data-dir" in message
    assert probed == [("storage.googleapis.com", 443)]  # only the host tfds downloads from
    assert no_download == []


def test_offline_probe_gives_up_at_its_timeout(tmp_path, monkeypatch, no_download):
    release = threading.Event()

    def hanging(address, timeout=None, *args, **kwargs):
        release.wait(60)  # a resolver that never answers
        raise OSError("released")

    monkeypatch.setattr(socket, "create_connection", hanging)
    monkeypatch.setattr(probe, "PROBE_TIMEOUT", 0.5)
    start = time.monotonic()
    try:
        with pytest.raises(FileNotFoundError, match=r"no answer within 0.5 s"):
            data.load_source("tfds:mnist", data_dir=str(tmp_path), download=True)
        assert time.monotonic() - start < 30
    finally:
        release.set()
    assert no_download == []


def test_a_failed_download_is_reported_with_instructions(tmp_path, monkeypatch):
    requests = pytest.importorskip("requests")

    class Connected:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def fail(self, *args, **kwargs):
        raise requests.exceptions.ConnectionError("Max retries exceeded with url: mnist")

    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: Connected())
    monkeypatch.setattr(type(tfds.builder("mnist")), "download_and_prepare", fail)
    with pytest.raises(FileNotFoundError, match="downloading or preparing it failed") as err:
        data.load_source("tfds:mnist", data_dir=str(tmp_path), download=True)
    assert "ConnectionError: Max retries" in str(err.value)
    assert "--data-dir" in str(err.value)
    assert isinstance(err.value.__cause__, requests.exceptions.ConnectionError)


def test_download_hosts_and_probe_without_network():
    builder = tfds.builder("cifar10")
    assert data.download_hosts(builder) == {("www.cs.toronto.edu", 443)}
    assert data.unreachable_hosts(set()) == {}
    assert data.download_hosts(object()) == set()  # no URL list: nothing to probe
