"""Tests of keras_vit/weights/presets/catalogue.py (named weights), presets/download.py (what it
adds to `keras.utils.get_file`, which does the transfer) and weights/imagenet.py (class names).

No network: tiny checkpoints in the official layout are written by the tests into
a local folder laid out like the bucket and served through `file://` URLs or an
`http.server` on 127.0.0.1. KERAS_HOME points into tmp_path, so the real cache
is never touched.
"""

import contextlib
import functools
import hashlib
import http.server
import os
import threading
import time
import urllib.parse

import numpy as np
import pytest

from keras_vit.models import variants
from keras_vit.models.vit import ViT, ViTB16, ViTTi16
from keras_vit.weights.imagenet import decode_predictions, imagenet_classes
from keras_vit.weights.npz.checkpoints import save_npz
from keras_vit.weights.presets import catalogue as presets
from tests.helpers import randomize_weights, to_numpy

FT = presets.Preset("mu/8", "test_ft", "test/mu_8-ft.npz", 48, 10, False, "test data")
PT = presets.Preset("mu/8", "test_pt", "test+pt/mu_8.npz", 32, 7, True, "test data")
HYBRID = dict(resnet_units=(1, 1), resnet_width=8, resnet_groups=4)
HYB = presets.Preset("mu/1", "test_hybrid", "test/hybrid.npz", 32, 5, False, "test data")


def _assert_same_weights(model, source):
    assert len(model.weights) == len(source.weights)
    for mine, theirs in zip(model.weights, source.weights, strict=True):
        assert mine.path == theirs.path
        np.testing.assert_array_equal(to_numpy(mine), to_numpy(theirs), err_msg=mine.path)


@pytest.fixture
def bucket(tmp_path, monkeypatch):
    """A local 'bucket' with the test presets' files; KERAS_HOME and the env override isolated."""
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras_home"))
    monkeypatch.delenv(presets.BASE_URL_ENV, raising=False)
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "*")
    root = tmp_path / "bucket"
    sources = {}
    ft = ViT("mu/8", image_size=48, num_classes=10)
    randomize_weights(ft, seed=1)
    pt = ViT("mu/8", image_size=32, num_classes=7, representation_size=32)
    randomize_weights(pt, seed=2)
    for preset, model in ((FT, ft), (PT, pt)):
        path = root.joinpath(*preset.path.split("/"))
        path.parent.mkdir(parents=True, exist_ok=True)
        save_npz(model, str(path))
        sources[preset.name] = (str(path), model)
    for preset in (FT, PT, HYB):
        presets.register_preset(preset)
    yield root, sources
    for preset in (FT, PT, HYB):
        presets.unregister_preset(preset.variant, preset.name)


def _file_url(folder):
    return "file://" + str(folder) + "/"


def _cache(tmp_path, preset):
    return tmp_path.joinpath("keras_home", "keras_vit", *preset.path.split("/"))


def test_fine_tuned_preset_builds_at_its_own_resolution_and_classes(bucket, tmp_path, monkeypatch):
    root, sources = bucket
    monkeypatch.setenv(presets.BASE_URL_ENV, _file_url(root))
    model = ViT("mu/8", weights="test_ft")
    assert model.input_shape == (None, 48, 48, 3)
    assert model.output_shape == (None, 10)
    _assert_same_weights(model, sources["test_ft"][1])
    assert _cache(tmp_path, FT).exists()


def test_user_overrides_resample_and_replace_head(bucket, monkeypatch):
    root, sources = bucket
    monkeypatch.setenv(presets.BASE_URL_ENV, _file_url(root))
    model = ViT("mu/8", weights="test_ft", image_size=64, num_classes=3)
    assert model.input_shape == (None, 64, 64, 3)
    assert model.output_shape == (None, 3)
    np.testing.assert_array_equal(to_numpy(model.get_layer("head").kernel), 0.0)
    source = sources["test_ft"][1]
    np.testing.assert_array_equal(
        to_numpy(model.get_layer("encoder_norm").gamma),
        to_numpy(source.get_layer("encoder_norm").gamma),
    )
    assert model.get_layer("patch_encoder").position_embeddings.shape == (1, 65, 32)
    features = ViT("mu/8", weights="test_ft", include_top=False)
    assert features.output_shape == (None, 32)


def test_pretraining_preset_keeps_pre_logits_only_with_its_own_head(bucket, monkeypatch):
    root, sources = bucket
    monkeypatch.setenv(presets.BASE_URL_ENV, _file_url(root))
    full = ViT("mu/8", weights="test_pt")  # the pre-training model: pre_logits + 7-way head
    assert full.output_shape == (None, 7)
    _assert_same_weights(full, sources["test_pt"][1])
    new_head = ViT("mu/8", weights="test_pt", num_classes=4)  # fine-tuning: pre_logits dropped
    assert "pre_logits" not in [layer.name for layer in new_head.layers]
    kept = ViT("mu/8", weights="test_pt", num_classes=4, representation_size=32)
    np.testing.assert_array_equal(
        to_numpy(kept.get_layer("pre_logits").kernel),
        to_numpy(sources["test_pt"][1].get_layer("pre_logits").kernel),
    )


def test_second_build_uses_the_cache_not_the_source(bucket, tmp_path, monkeypatch):
    root, sources = bucket
    monkeypatch.setenv(presets.BASE_URL_ENV, _file_url(root))
    first = presets.get_preset_file("test_ft", "mu/8")
    assert first == str(_cache(tmp_path, FT))
    os.remove(sources["test_ft"][0])
    assert presets.get_preset_file("test_ft", "mu/8") == first
    model = ViT("mu/8", weights="test_ft")
    assert model.output_shape == (None, 10)


def test_plus_in_path_is_quoted_and_served(bucket, tmp_path):
    root, _ = bucket
    assert PT.url(_file_url(root)).endswith("test%2Bpt/mu_8.npz")
    path = presets.get_preset_file("test_pt", "mu/8", base_url=_file_url(root))
    assert path == str(_cache(tmp_path, PT))


def test_base_url_argument_wins_over_the_environment(bucket, tmp_path, monkeypatch):
    root, _ = bucket
    monkeypatch.setenv(presets.BASE_URL_ENV, _file_url(tmp_path / "nowhere"))
    with pytest.raises(ConnectionError, match="nowhere"):
        presets.get_preset_file("test_ft", "mu/8")
    path = presets.get_preset_file("test_ft", "mu/8", base_url=_file_url(root))
    assert os.path.exists(path)
    assert presets.resolve_base_url(None) == _file_url(tmp_path / "nowhere")
    monkeypatch.delenv(presets.BASE_URL_ENV)
    assert presets.resolve_base_url(None) == presets.DEFAULT_BASE_URL
    assert FT.url().startswith("https://storage.googleapis.com/vit_models/")


def test_download_over_http(bucket, tmp_path):
    root, _ = bucket
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        path = presets.get_preset_file("test_pt", "mu/8", base_url=url)
    finally:
        server.shutdown()
        server.server_close()
    with np.load(path) as data:
        assert "pre_logits/kernel" in data.files


def test_truncated_download_is_removed_with_a_clear_error(bucket, tmp_path):
    root, sources = bucket
    source = sources["test_ft"][0]
    with open(source, "rb") as f:
        data = f.read()
    with open(source, "wb") as f:
        f.write(data[: len(data) // 2])
    with pytest.raises(ValueError) as info:
        presets.get_preset_file("test_ft", "mu/8", base_url=_file_url(root))
    message = str(info.value)
    cached = str(_cache(tmp_path, FT))
    assert cached in message and "Retry" in message and "corrupt or incomplete" in message
    assert not os.path.exists(cached)


def test_corrupt_member_is_caught_after_download(bucket, tmp_path):
    root, sources = bucket
    source = sources["test_ft"][0]
    with open(source, "rb") as f:
        data = bytearray(f.read())
    data[len(data) // 3] ^= 0xFF  # flips bytes inside an array: the zip CRC no longer matches
    with open(source, "wb") as f:
        f.write(bytes(data))
    with pytest.raises(ValueError, match="corrupt or incomplete"):
        presets.get_preset_file("test_ft", "mu/8", base_url=_file_url(root))
    assert not _cache(tmp_path, FT).exists()


def test_corrupt_cached_file_is_reported_and_kept_until_asked(bucket, tmp_path):
    root, sources = bucket
    cached = _cache(tmp_path, FT)
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"<html>not a checkpoint</html>")
    with pytest.raises(ValueError) as info:
        ViT("mu/8", weights="test_ft")
    message = str(info.value)
    assert str(cached) in message and "not a zip archive" in message
    assert "left as it is" in message and "force_download=True" in message
    assert cached.read_bytes() == b"<html>not a checkpoint</html>"  # not removed unasked
    path = presets.get_preset_file(
        "test_ft", "mu/8", base_url=_file_url(root), force_download=True
    )  # the retry the message names
    assert path == str(cached) and _read(path) == _read(sources["test_ft"][0])


def test_file_copied_by_hand_into_the_cache_is_used_offline(bucket, tmp_path, monkeypatch):
    _, sources = bucket
    cached = _cache(tmp_path, FT)
    cached.parent.mkdir(parents=True)
    with open(sources["test_ft"][0], "rb") as f:
        cached.write_bytes(f.read())
    monkeypatch.setenv(presets.BASE_URL_ENV, "http://127.0.0.1:9/")  # nothing listens there
    assert ViT("mu/8", weights="test_ft").output_shape == (None, 10)


def _run_with_deadline(fn, seconds=60):
    """Runs fn in a thread; fails (instead of hanging the suite) when it is not done in time."""
    outcome = {}

    def target():
        try:
            outcome["value"] = fn()
        except BaseException as error:  # noqa: BLE001 - handed back to the test
            outcome["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s"
    return outcome


def _closed_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the socket is: nothing listens


@pytest.mark.parametrize("where", ["closed_port", "unroutable", "stalled_connect"])
def test_offline_and_not_cached_fails_fast_saying_where_to_put_the_file(
    bucket, tmp_path, monkeypatch, where
):
    port = _closed_port()
    base = "http://10.255.255.1/" if where == "unroutable" else f"http://127.0.0.1:{port}/"
    if where == "stalled_connect":  # a SYN nobody answers (urlretrieve would wait ~2 minutes)
        import socket

        def stalled(*args, **kwargs):
            time.sleep(5)
            raise TimeoutError("the SYN was never answered")

        monkeypatch.setattr(socket, "create_connection", stalled)
    start = time.monotonic()
    outcome = _run_with_deadline(
        lambda: presets.get_preset_file("test_ft", "mu/8", base_url=base, timeout=1.0)
    )
    if where == "unroutable" and "value" in outcome:
        pytest.skip("this machine reaches 10.255.255.1 (a proxy answered)")
    error = outcome.get("error")
    assert isinstance(error, ConnectionError), outcome
    assert str(_cache(tmp_path, FT)) in str(error)
    assert FT.url(base) in str(error) and presets.BASE_URL_ENV in str(error)
    assert not _cache(tmp_path, FT).exists()
    if where == "stalled_connect":
        assert time.monotonic() - start < 10 and "within 1 s" in str(error)


def test_unknown_names_list_the_valid_ones_for_that_builder(bucket):
    with pytest.raises(ValueError, match=r"Valid names for 'mu/8': \['test_ft', 'test_pt'\]"):
        ViT("mu/8", weights="imagenet")
    with pytest.raises(ValueError) as info:
        ViTTi16(weights="imagenet21k")  # Ti/16 has AugReg weights only
    assert "augreg_in21k_ft_in1k_384" in str(info.value)
    assert "'imagenet21k'" in str(info.value)
    with pytest.raises(ValueError, match="imagenet21k\\+imagenet2012_224"):
        ViTB16(weights="imagenet2012")
    with pytest.raises(ValueError, match="no named weights for 'mu/4'"):
        ViT("mu/4", weights="test_ft")


@pytest.mark.slow  # the first hybrid build of a process can take a minute on 2 busy cores
def test_hybrid_builder_takes_presets_through_the_same_path(bucket, tmp_path, monkeypatch):
    root, _ = bucket
    source = ViT("mu/1", image_size=32, num_classes=5, **HYBRID)
    randomize_weights(source, seed=3)
    path = root.joinpath(*HYB.path.split("/"))
    save_npz(source, str(path))
    monkeypatch.setenv(presets.BASE_URL_ENV, _file_url(root))
    model = ViT("mu/1", weights="test_hybrid", **HYBRID)
    assert model.output_shape == (None, 5)
    _assert_same_weights(model, source)


def test_default_arguments_without_weights_are_unchanged():
    model = ViT("mu/8", include_top=True)
    assert model.input_shape == (None, 224, 224, 3)
    assert model.output_shape == (None, 1000)


def test_official_table_is_consistent():
    seen = set()
    for preset in presets.list_presets():
        key = (preset.variant, preset.name)
        assert key not in seen
        seen.add(key)
        config = variants.parse_variant(preset.variant)
        stride = config["patch_size"] * (
            variants.resnet_stride(config["resnet_units"]) if "resnet_units" in config else 1
        )
        assert preset.image_size % stride == 0, preset
        url = preset.url(presets.DEFAULT_BASE_URL)
        assert url.startswith("https://storage.googleapis.com/vit_models/") and url.endswith(".npz")
        assert "+" not in url
        if preset.name.startswith(("imagenet21k+imagenet2012", "augreg_in21k_ft_in1k")):
            assert preset.num_classes == 1000 and not preset.pre_logits
            assert "imagenet2012" in preset.path
            at_384 = preset.name in ("imagenet21k+imagenet2012", "augreg_in21k_ft_in1k_384")
            assert preset.image_size == (384 if at_384 else 224), preset
        else:
            assert preset.num_classes == 21843 and preset.image_size == 224
        if preset.name.startswith("augreg"):
            assert preset.path.startswith("augreg/") and "-i21k-300ep-" in preset.path
            if preset.name != "augreg_in21k" and preset.variant != "B/8":
                # the fine-tune continues the recommended pre-training of the same table
                upstream = presets.get_preset(preset.variant, "augreg_in21k")
                assert preset.path.startswith(upstream.path[: -len(".npz")] + "--")
        else:
            assert preset.pre_logits == (preset.name == "imagenet21k")
    names = {p.name for p in presets.list_presets("B/16")}
    assert names == {
        "imagenet21k",
        "imagenet21k+imagenet2012",
        "imagenet21k+imagenet2012_224",
        "augreg_in21k",
        "augreg_in21k_ft_in1k",
        "augreg_in21k_ft_in1k_384",
    }
    assert presets.get_preset("B/16", "imagenet21k+imagenet2012").url() == (
        "https://storage.googleapis.com/vit_models/imagenet21k%2Bimagenet2012/ViT-B_16.npz"
    )
    with pytest.raises(ValueError, match="Unknown"):
        presets.list_presets("Q/16")


def test_register_preset_checks(bucket):
    with pytest.raises(ValueError, match="exists already"):
        presets.register_preset(FT)
    with pytest.raises(ValueError, match="file path"):
        presets.register_preset(presets.Preset("mu/8", "x.npz", "x.npz", 32, 1, False, ""))
    with pytest.raises(ValueError, match="Unknown"):
        presets.register_preset(presets.Preset("Q/8", "x", "x.npz", 32, 1, False, ""))
    with pytest.raises(ValueError, match="Received: file_hash='not-a-digest'"):
        presets.register_preset(FT, overwrite=True, file_hash="not-a-digest")


def test_imagenet_classes_shipped():
    classes = imagenet_classes()
    assert len(classes) == 1000 and len({wnid for wnid, _ in classes}) == 1000
    assert classes[0] == ("n01440764", "tench")
    assert [wnid for wnid, _ in classes] == sorted(wnid for wnid, _ in classes)


def test_decode_predictions():
    logits = np.zeros((2, 1000), "float32")
    logits[0, [1, 5, 7]] = [3.0, 5.0, 4.0]
    logits[1, 999] = 1.0
    decoded = decode_predictions(logits, top=3)
    assert [name for _, name, _ in decoded[0]] == [imagenet_classes()[i][1] for i in (5, 7, 1)]
    probabilities = np.exp(logits[0]) / np.exp(logits[0]).sum()
    np.testing.assert_allclose([p for *_, p in decoded[0]], probabilities[[5, 7, 1]], rtol=1e-6)
    assert decoded[1][0][:2] == imagenet_classes()[999]
    given = decode_predictions(np.eye(1000, dtype="float32")[[3]], top=1, from_logits=False)
    assert given == [[(*imagenet_classes()[3], 1.0)]]
    with pytest.raises(ValueError, match="21843"):
        decode_predictions(np.zeros((1, 21843)))
    with pytest.raises(ValueError, match="top"):
        decode_predictions(logits, top=0)


def test_weights_command_lists_and_fetches(bucket, tmp_path, capsys):
    from keras_vit.cli import main

    assert main(["weights", "--model", "mu/8"]) == 0
    out = capsys.readouterr().out
    assert "test_ft" in out and "test_pt" in out
    root, _ = bucket
    argv = ["weights", "--model", "mu/8", "--fetch", "test_ft", "--base-url", _file_url(root)]
    assert main(argv) == 0
    assert capsys.readouterr().out.strip().endswith(str(_cache(tmp_path, FT)))
    assert main(["weights", "--model", "mu/8", "--fetch", "nope"]) == 2
    assert "Valid names for 'mu/8'" in capsys.readouterr().err


# Downloads through keras.utils.get_file, on a server of our own on 127.0.0.1 that logs each
# request and can cut the body of its first `cuts` answers after `cut_after` bytes (announcing
# the full Content-Length: a dropped connection).


@contextlib.contextmanager
def _server(root, *, cuts=0, cut_after=0):
    """Serves `root`; yields (base URL, the list of requested paths)."""
    requests = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):  # noqa: N802 - http.server's name
            requests.append(self.path)
            path = root.joinpath(*urllib.parse.unquote(self.path).lstrip("/").split("/"))
            if not path.is_file():
                self.send_error(404)
                return
            body = path.read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if len(requests) <= cuts:
                body = body[:cut_after]  # then the connection closes: fewer bytes than announced
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", requests
    finally:
        server.shutdown()
        server.server_close()


def _read(path):
    with open(path, "rb") as f:
        return f.read()


@pytest.fixture
def get_file_calls(monkeypatch):
    """Records the arguments of every `keras.utils.get_file` call (which still runs)."""
    import keras

    calls = []
    real = keras.utils.get_file

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(keras.utils, "get_file", spy)
    return calls


def test_download_through_get_file_then_the_cache_without_a_request(
    bucket, tmp_path, monkeypatch, get_file_calls
):
    root, sources = bucket
    cached = str(_cache(tmp_path, FT))
    digest = hashlib.sha256(_read(sources["test_ft"][0])).hexdigest()
    with _server(root) as (url, requests):
        monkeypatch.setenv(presets.BASE_URL_ENV, url)  # the mirror variable
        path = presets.get_preset_file("test_ft", "mu/8", file_hash=digest.upper())
        assert path == cached and _read(path) == _read(sources["test_ft"][0])
        assert requests == ["/test/mu_8-ft.npz"]
        ((args, kwargs),) = get_file_calls
        assert args == ("mu_8-ft.npz",) and kwargs["origin"] == url + "test/mu_8-ft.npz"
        assert kwargs["file_hash"] == digest  # lower case: get_file compares strings exactly
        assert kwargs["cache_subdir"] == os.path.dirname(cached)
        assert presets.get_preset_file("test_ft", "mu/8", file_hash=digest) == path
        model = ViT("mu/8", weights="test_ft")
    assert requests == ["/test/mu_8-ft.npz"] and len(get_file_calls) == 1  # cache hits: ours
    _assert_same_weights(model, sources["test_ft"][1])
    assert os.listdir(os.path.dirname(cached)) == ["mu_8-ft.npz"]  # no sidecar, no .part


def test_dropped_download_leaves_nothing_and_the_next_call_starts_again(bucket, tmp_path):
    root, sources = bucket
    cached = _cache(tmp_path, FT)
    with _server(root, cuts=1, cut_after=1000) as (url, requests):
        with pytest.raises(ConnectionError) as info:
            presets.get_preset_file("test_ft", "mu/8", base_url=url)
        message = str(info.value)
        assert FT.url(url) in message and str(cached) in message and "retry" in message
        assert "1000" in message  # get_file's words: got only 1000 out of N bytes
        assert not cached.exists() and os.listdir(cached.parent) == []
        path = presets.get_preset_file("test_ft", "mu/8", base_url=url)
        with pytest.raises(ConnectionError, match="404") as missing:
            presets.get_preset_file("test_pt", "mu/8", base_url=url + "elsewhere/")
    assert requests == ["/test/mu_8-ft.npz"] * 2 + ["/elsewhere/test%2Bpt/mu_8.npz"]
    assert _read(path) == _read(sources["test_ft"][0])
    assert str(_cache(tmp_path, PT)) in str(missing.value)
    assert not _cache(tmp_path, PT).exists()


@pytest.mark.parametrize("through", ["file", "http"])
def test_file_hash_is_checked_and_a_mismatch_leaves_no_file(bucket, tmp_path, through):
    root, sources = bucket
    source = sources["test_ft"][0]
    digest = hashlib.sha256(_read(source)).hexdigest()
    cached = str(_cache(tmp_path, FT))
    wrong = "0" * 64
    with contextlib.ExitStack() as stack:
        if through == "http":
            base, _ = stack.enter_context(_server(root))
        else:
            base = _file_url(root)
        with pytest.raises(ValueError) as info:
            presets.get_preset_file("test_ft", "mu/8", base_url=base, file_hash=wrong)
        message = str(info.value)
        assert f"expected {wrong}, received {digest}" in message and "Retry" in message
        assert cached in message
        assert not os.path.exists(cached) and os.listdir(os.path.dirname(cached)) == []
        with pytest.raises(ValueError, match="64 hex digits"):
            presets.get_preset_file("test_ft", "mu/8", file_hash="abc")
        # The table's digest (here given through register_preset) is checked the same way.
        presets.register_preset(FT, overwrite=True, file_hash=digest.upper())
        path = presets.get_preset_file("test_ft", "mu/8", base_url=base)
        assert _read(path) == _read(source)
    presets.register_preset(FT, overwrite=True, file_hash=wrong)
    with pytest.raises(ValueError, match=f"expected {wrong}, received {digest}") as hit:
        presets.get_preset_file("test_ft", "mu/8")  # a cache hit: hashed, reported
    assert "left as it is" in str(hit.value) and path in str(hit.value)
    assert _read(path) == _read(source)  # (the fixture unregisters FT and its digest)


def test_users_file_in_the_cache_is_never_overwritten_unasked(bucket, tmp_path):
    root, sources = bucket
    cached = _cache(tmp_path, FT)
    cached.parent.mkdir(parents=True)
    mine = _read(sources["test_pt"][0])  # a readable checkpoint, not the bucket's file
    cached.write_bytes(mine)
    theirs = _read(sources["test_ft"][0])
    with _server(root) as (url, requests):
        digest = hashlib.sha256(theirs).hexdigest()
        with pytest.raises(ValueError, match="force_download=True"):
            presets.get_preset_file("test_ft", "mu/8", base_url=url, file_hash=digest)
        assert presets.get_preset_file("test_ft", "mu/8", base_url=url) == str(cached)
        assert requests == [] and cached.read_bytes() == mine  # used as is, not replaced
        presets.get_preset_file("test_ft", "mu/8", base_url=url, force_download=True)
    assert requests == ["/test/mu_8-ft.npz"] and cached.read_bytes() == theirs  # asked: replaced
