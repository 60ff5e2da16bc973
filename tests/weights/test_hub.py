"""Weights by name through the real `huggingface_hub`, against a loopback Hub (offline for real).

The server (tests/weights/hub_server.py) runs in this process on 127.0.0.1 and serves tiny
repos written here in timm's layout (config.json with `architecture`, `num_classes`,
`pretrained_cfg` + model.safetensors from `keras_vit.export_timm`) and transformers' layout
(config.json + model.safetensors from `keras_vit.export_huggingface` +
preprocessor_config.json, and a pickle that must never be fetched). The client runs in
subprocesses (tests/weights/hub_client.py) with `HF_ENDPOINT`, `HF_HOME` and `HF_HUB_OFFLINE`
set before huggingface_hub is imported: first online, then offline from the cache it filled.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import keras_vit
from tests.helpers import randomize_weights
from tests.weights.hub_server import HubServer

pytest.importorskip("huggingface_hub", reason="huggingface_hub (the `hub` extra) is missing")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARCH, TAG = "vit_tiny_patch16_224", "augreg_in21k_ft_in1k"  # timm's default tag
SIZES = dict(image_size=32, num_layers=1, hidden_dim=32, num_heads=2, mlp_dim=64)
TIMM_REPO = f"timm/{ARCH}.{TAG}"
HF_REPO = "google-stand-in/vit-tiny"


# A DINOv2-normalised repo: `finetune --init NAME` must carry its pretrained_cfg (issue 42's
# target; tests/test_input_spec.py shows the carried spec gives timm's eval pixels).
DINO_ARCH, DINO_TAG = "vit_small_patch14_dinov2", "lvd142m"
DINO_SIZES = dict(image_size=28, num_layers=1, hidden_dim=32, num_heads=2, mlp_dim=64)
DINO_CFG = {"tag": DINO_TAG, "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225],
            "crop_pct": 1.0, "interpolation": "bicubic", "input_size": [3, 28, 28]}  # fmt: skip


def _labels(label, count):
    return [f"{label}_class_{i}" for i in range(count)]


def _timm_repo_files(tmp_path, label, seed, arch=ARCH, sizes=SIZES, num_classes=5,
                     pretrained_cfg=None):  # fmt: skip
    """A timm Hub repo's files: model.safetensors of a tiny model and the config.json that
    `export_timm(config_json=)` writes (the model's class names as timm's `label_names`),
    with the test's `pretrained_cfg`."""
    names = {"class_names": _labels(label, num_classes)} if num_classes else {}
    model = keras_vit.from_timm(arch, num_classes=num_classes, **names, **sizes)
    randomize_weights(model, seed=seed)
    path = tmp_path / f"{label}.safetensors"
    keras_vit.export_timm(model, str(path), config_json=str(tmp_path / f"{label}.config.json"))
    config = json.loads((tmp_path / f"{label}.config.json").read_text())
    config["pretrained_cfg"] = pretrained_cfg or {
        "tag": TAG, "mean": [0.5] * 3, "std": [0.5] * 3, "crop_pct": 0.9,
        "interpolation": "bicubic", "input_size": [3, 32, 32]}  # fmt: skip
    return path, {
        "model.safetensors": path.read_bytes(),
        "config.json": json.dumps(config).encode(),
    }


def _huggingface_repo_files(tmp_path, label, seed):
    folder = tmp_path / label
    model = keras_vit.ViT("mu/8", image_size=32, num_classes=3, class_names=_labels(label, 3))
    randomize_weights(model, seed=seed)  # the head too (a new ViT's head is zero)
    keras_vit.export_huggingface(model, str(folder))
    preprocessor = {"image_mean": [0.5] * 3, "image_std": [0.5] * 3, "resample": 2,
                    "rescale_factor": 1 / 255, "size": {"height": 32, "width": 32}}  # fmt: skip
    (folder / "preprocessor_config.json").write_text(json.dumps(preprocessor))
    files = {name: (folder / name).read_bytes() for name in os.listdir(folder)}
    files["pytorch_model.bin"] = b"a pickle the client must never fetch"
    return folder, files


def _client(tmp_path, steps, **env):
    """Runs hub_client.py in a fresh process with the Hub variables; its results by step id."""
    steps_path, results_path = tmp_path / "steps.json", tmp_path / "results.json"
    steps_path.write_text(json.dumps(steps))
    environment = {
        **os.environ,
        "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "HF_HUB_DISABLE_XET": "1",
        "TF_CPP_MIN_LOG_LEVEL": "3",
        **env,
    }
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE", "HF_TOKEN"):
        if name not in env:
            environment.pop(name, None)
    script = os.path.join(ROOT, "tests", "weights", "hub_client.py")
    run = subprocess.run(
        [sys.executable, script, str(steps_path), str(results_path)],
        env=environment, cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(results_path.read_text())


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """The server with its repos, one online and one offline client run, and what they saw."""
    tmp_path = tmp_path_factory.mktemp("hub")
    server = HubServer().start()
    old_file, old_files = _timm_repo_files(tmp_path, "v1", seed=1)
    new_file, new_files = _timm_repo_files(tmp_path, "main", seed=2)
    old_sha = server.add_commit(TIMM_REPO, old_files, refs=("v1",))
    new_sha = server.add_commit(TIMM_REPO, new_files, refs=("main",))
    pickles = f"timm/{ARCH}.pickles_only"
    server.add_commit(pickles, {"pytorch_model.bin": b"pickle", "config.json": b"{}"})
    hf_old, hf_old_files = _huggingface_repo_files(tmp_path, "hf_v1", seed=3)
    hf_new, hf_new_files = _huggingface_repo_files(tmp_path, "hf_main", seed=4)
    dino_file, dino_files = _timm_repo_files(tmp_path, "dino", seed=5, arch=DINO_ARCH,
                                             sizes=DINO_SIZES, num_classes=0,
                                             pretrained_cfg=DINO_CFG)  # fmt: skip
    server.add_commit(f"timm/{DINO_ARCH}.{DINO_TAG}", dino_files)
    server.add_commit(HF_REPO, hf_old_files, refs=("v1",))
    hf_sha = server.add_commit(HF_REPO, hf_new_files, refs=("main",))
    home = tmp_path / "hf_home"
    server.drop_once.add(f"{TIMM_REPO}/model.safetensors")  # the first download is cut off
    timm_step = dict(loader="timm", kwargs=SIZES, local_name=ARCH)
    online = [
        {**timm_step, "id": "tagged", "source": f"{ARCH}.{TAG}", "local": str(new_file)},
        {**timm_step, "id": "default_tag", "source": ARCH, "local": str(new_file)},
        {**timm_step, "id": "pinned", "source": f"hf-hub:{TIMM_REPO}@v1", "local": str(old_file)},
        {**timm_step, "id": "pickles", "source": f"hf-hub:{pickles}"},
        {**timm_step, "id": "cache_dir", "source": f"{ARCH}.{TAG}",
         "kwargs": {**SIZES, "cache_dir": str(tmp_path / "own_cache")}},
        {"id": "hf", "loader": "huggingface", "source": HF_REPO, "local": str(hf_new)},
        {**timm_step, "id": "init_timm", "loader": "init", "source": f"{ARCH}.{TAG}",
         "local": str(new_file)},
        {"id": "init_dino", "loader": "init", "source": f"{DINO_ARCH}.{DINO_TAG}",
         "kwargs": {**DINO_SIZES}, "local_name": DINO_ARCH, "local": str(dino_file)},
        {"id": "init_hf", "loader": "init", "source": f"hf://{HF_REPO}",
         "kwargs": {"image_size": 32}, "local": str(hf_new)},
        {"id": "hf_pinned", "loader": "huggingface", "source": f"hf://{HF_REPO}@v1",
         "local": str(hf_old)},
        # force_download=: a stale cache (v1's files copied over main's cached ones) is used
        # as it is, until force_download=True downloads main's files again into the cache.
        {"id": "spoil", "loader": "spoil", "files": [
            [str(old_file), str(_cached(home, TIMM_REPO, new_sha))],
            [str(hf_old / "model.safetensors"), str(_cached(home, HF_REPO, hf_sha))]]},
        {**timm_step, "id": "spoiled", "source": f"{ARCH}.{TAG}", "local": str(new_file)},
        {**timm_step, "id": "forced", "source": f"{ARCH}.{TAG}", "local": str(new_file),
         "kwargs": {**SIZES, "force_download": True}},
        {"id": "hf_spoiled", "loader": "huggingface", "source": HF_REPO, "local": str(hf_new)},
        {"id": "hf_forced", "loader": "cli", "source": HF_REPO, "args": ["--force-download"],
         "local": str(hf_new)},  # keras-vit convert --from huggingface REPO OUT --force-download
        {**timm_step, "id": "convert_timm", "loader": "convert_timm", "source": f"{ARCH}.{TAG}",
         "local": str(new_file)},  # keras-vit convert --from timm NAME OUT, from the cache
        # huggingface_hub's own errors, translated at the boundary (issue 56)
        {**timm_step, "id": "repo_missing", "source": "hf-hub:nobody/nothing"},
        {"id": "hf_repo_missing", "loader": "huggingface", "source": "acme/nothing"},
        {**timm_step, "id": "bad_revision", "source": f"{ARCH}.{TAG}",
         "kwargs": {**SIZES, "revision": "nope"}},
        {"id": "hf_bad_revision", "loader": "huggingface", "source": HF_REPO,
         "kwargs": {"revision": "nope"}},
        {"id": "cache_dir_file", "loader": "huggingface", "source": HF_REPO,
         "kwargs": {"cache_dir": str(old_file)}},
    ]  # fmt: skip
    env = dict(HF_ENDPOINT=server.url, HF_HOME=str(home))
    results = {"online": _client(tmp_path, online, **env)}
    requests_online = list(server.requests)
    offline = [
        {**timm_step, "id": "cached", "source": f"{ARCH}.{TAG}", "local": str(new_file)},
        {**timm_step, "id": "cached_pinned", "source": f"hf-hub:{TIMM_REPO}@v1",
         "local": str(old_file)},
        {"id": "hf_cached", "loader": "huggingface", "source": HF_REPO, "local": str(hf_new)},
        {**timm_step, "id": "missing", "source": "vit_tiny_patch16_384"},
        {**timm_step, "id": "forced_offline", "source": f"{ARCH}.{TAG}",
         "kwargs": {**SIZES, "force_download": True}},
    ]  # fmt: skip
    results["offline"] = _client(tmp_path, offline, HF_HUB_OFFLINE="1", **env)
    # The Hub unreachable (nothing listens on the port) and no HF_HUB_OFFLINE: the cache
    # answers at once, without huggingface_hub's ~23 s of retries.
    unreachable = [
        {**timm_step, "id": "cached", "source": f"{ARCH}.{TAG}", "local": str(new_file)},
        {**timm_step, "id": "missing", "source": "vit_tiny_patch16_384"},
        {"id": "hf_missing", "loader": "huggingface", "source": "acme/not-cached"},
    ]  # fmt: skip
    results["unreachable"] = _client(
        tmp_path, unreachable, HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}", HF_HOME=str(home)
    )
    yield dict(
        server=server, results=results, home=home, tmp_path=tmp_path, old_sha=old_sha,
        new_sha=new_sha, hf_sha=hf_sha, requests_online=requests_online,
        requests_offline=server.requests[len(requests_online):],
    )  # fmt: skip
    server.stop()


def _closed_port():
    """A loopback port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _cached(home, repo_id, sha, filename="model.safetensors"):
    """A file's path in the standard cache under `home` (`HF_HOME`)."""
    return home / "hub" / f"models--{repo_id.replace('/', '--')}" / "snapshots" / sha / filename


def _ok(result):
    assert "error" not in result, result.get("message")
    return result


@pytest.mark.slow
def test_timm_name_downloads_into_the_standard_cache(hub):
    online = hub["results"]["online"]
    assert online["_hub_imported_by_keras_vit"] is False  # imported lazily, by a name
    for step in ("tagged", "default_tag"):
        assert _ok(online[step])["max_diff"] == 0.0  # the Hub's file = the local file, exactly
    snapshot = hub["home"] / "hub" / f"models--timm--{ARCH}.{TAG}"
    assert (snapshot / "refs" / "main").read_text() == hub["new_sha"]
    cached = snapshot / "snapshots" / hub["new_sha"] / "model.safetensors"
    assert cached.is_file()
    # cache_dir= is huggingface_hub's own: the same layout under the folder given.
    own = hub["tmp_path"] / "own_cache" / f"models--timm--{ARCH}.{TAG}" / "snapshots"
    assert _ok(online["cache_dir"]) and (own / hub["new_sha"] / "model.safetensors").is_file()


@pytest.mark.slow
def test_a_download_cut_off_halfway_is_retried_whole(hub):
    """huggingface_hub's own retry: the first transfer stops at half the file (the server
    closes the connection); the client asks again and the cached file is whole (`tagged`
    equals the local file exactly)."""
    path = f"/{TIMM_REPO}/resolve/main/model.safetensors"
    gets = [r for r in hub["requests_online"] if r[0] == "GET" and r[1] == path]
    # Two for the cut-off download, one for the `cache_dir=` step (another cache), one for
    # force_download=True.
    assert len(gets) == 4 and not hub["server"].drop_once
    assert hub["results"]["online"]["tagged"]["max_diff"] == 0.0


@pytest.mark.slow
def test_pinned_revision(hub):
    online = hub["results"]["online"]
    assert _ok(online["pinned"])["max_diff"] == 0.0  # v1's weights, not main's
    assert not np.allclose(online["pinned"]["output"], online["tagged"]["output"])
    versions = hub["home"] / "hub" / f"models--timm--{ARCH}.{TAG}" / "snapshots"
    assert sorted(os.listdir(versions)) == sorted([hub["old_sha"], hub["new_sha"]])
    assert _ok(online["hf_pinned"])["max_diff"] == 0.0
    assert not np.allclose(online["hf_pinned"]["output"], online["hf"]["output"])


@pytest.mark.slow
def test_pickles_are_never_fetched(hub):
    refusal = hub["results"]["online"]["pickles"]
    assert refusal["error"] == "FileNotFoundError"
    assert "safetensors only" in refusal["message"] and "pickles_only" in refusal["message"]
    assert not hub["server"].requested("pytorch_model.bin")  # neither repo's pickle


@pytest.mark.slow
def test_transformers_repo_id_loads_as_its_folder(hub):
    assert _ok(hub["results"]["online"]["hf"])["max_diff"] == 0.0
    folder = hub["home"] / "hub" / "models--google-stand-in--vit-tiny" / "snapshots" / hub["hf_sha"]
    names = sorted(os.listdir(folder))
    assert names == ["config.json", "model.safetensors", "preprocessor_config.json"]


@pytest.mark.slow
def test_finetune_init_takes_the_same_names(hub):
    online = hub["results"]["online"]
    assert _ok(online["init_timm"])["max_diff"] == 0.0
    assert _ok(online["init_hf"])["max_diff"] == 0.0
    dino = _ok(online["init_dino"])  # the downloaded DINOv2-normalised weights and their spec
    assert dino["max_diff"] == 0.0
    spec = dino["preprocessing"]
    for key in ("mean", "std", "crop_pct", "input_size"):
        np.testing.assert_allclose(spec[key], DINO_CFG[key], err_msg=key)
    assert spec["interpolation"] == "bicubic"
    assert online["init_timm"]["preprocessing"]["mean"] == [0.5] * 3


@pytest.mark.slow
def test_offline_loads_from_the_cache_and_a_missing_file_fails_at_once(hub):
    offline = hub["results"]["offline"]
    for step in ("cached", "cached_pinned", "hf_cached"):
        assert _ok(offline[step])["max_diff"] == 0.0
    assert hub["requests_offline"] == []  # HF_HUB_OFFLINE: not one request
    missing = offline["missing"]
    assert missing["error"] == "FileNotFoundError" and missing["seconds"] < 5
    message = missing["message"]
    assert "HF_HUB_OFFLINE" in message and str(hub["home"] / "hub") in message
    assert "hf download timm/vit_tiny_patch16_384.augreg_in21k_ft_in1k model.safetensors" in message


@pytest.mark.slow
def test_force_download_downloads_a_cached_file_again(hub):
    online, offline = hub["results"]["online"], hub["results"]["offline"]
    # The cache is used as it is: main's cached file, overwritten with v1's, gives v1's model.
    np.testing.assert_allclose(online["spoiled"]["output"], online["pinned"]["output"])
    np.testing.assert_allclose(online["hf_spoiled"]["output"], online["hf_pinned"]["output"])
    # force_download=True (and convert --force-download) fetch main's files again ...
    assert _ok(online["forced"])["max_diff"] == 0.0
    assert _ok(online["hf_forced"])["max_diff"] == 0.0
    paths = [f"/{HF_REPO}/resolve/{rev}/model.safetensors" for rev in ("main", hub["hf_sha"])]
    hf_gets = [r for r in hub["requests_online"] if r[0] == "GET" and r[1] in paths]
    assert len(hf_gets) == 2  # the first download and the forced one
    # ... into the cache: offline, the name loads main's weights again.
    assert _ok(offline["cached"])["max_diff"] == 0.0 and _ok(offline["hf_cached"])["max_diff"] == 0
    refusal = offline["forced_offline"]  # it needs the network: said at once
    assert refusal["error"] == "ValueError" and "HF_HUB_OFFLINE" in refusal["message"]


@pytest.mark.slow
def test_convert_takes_names(hub):
    online = hub["results"]["online"]
    assert _ok(online["convert_timm"])["max_diff"] == 0.0  # convert --from timm NAME OUT
    assert _ok(online["hf_forced"])["max_diff"] == 0.0  # convert --from huggingface REPO OUT


@pytest.mark.slow
def test_class_names_travel_through_the_hub(hub):
    online, offline = hub["results"]["online"], hub["results"]["offline"]
    # An hf-hub: repo's config.json label_names (export_timm(config_json=) wrote them), as
    # timm's create_model("hf-hub:...") reads them; the pinned revision's own.
    assert online["pinned"]["class_names"] == _labels("v1", 5)
    assert offline["cached_pinned"]["class_names"] == _labels("v1", 5)
    # A registered <arch>.<tag> name uses timm's table, as timm does: its ImageNet-1k label
    # set does not fit this 5-class head.
    assert online["tagged"]["class_names"] is None
    # transformers' id2label (export_huggingface wrote the class names).
    assert online["hf"]["class_names"] == _labels("hf_main", 3)
    assert online["hf_pinned"]["class_names"] == _labels("hf_v1", 3)


@pytest.mark.slow
def test_hub_errors_are_the_documented_types_naming_what_to_change(hub):
    """huggingface_hub's RepositoryNotFoundError / RevisionNotFoundError and a NotADirectoryError
    for a cache_dir that is a file arrived raw (issue 56)."""
    online = hub["results"]["online"]
    expected = {
        "repo_missing": ("FileNotFoundError", "No Hub repo 'nobody/nothing'"),
        "hf_repo_missing": ("FileNotFoundError", "'acme/nothing' is no local folder"),
        "bad_revision": ("ValueError", "has no revision 'nope'"),
        "hf_bad_revision": ("ValueError", "has no revision 'nope'"),
        "cache_dir_file": ("ValueError", "cache_dir must be a folder"),
    }
    for step, (error, message) in expected.items():
        assert online[step].get("error") == error, (step, online[step])
        assert message in online[step]["message"], (step, online[step]["message"])
    assert "No Hub repo 'acme/nothing'" in online["hf_repo_missing"]["message"]  # both said


@pytest.mark.slow
def test_an_unreachable_hub_answers_from_the_cache_at_once_and_truly(hub):
    results = hub["results"]["unreachable"]
    assert _ok(results["cached"])["max_diff"] == 0.0  # cached: loads without the Hub
    for step in ("missing", "hf_missing"):
        result = results[step]
        assert result["error"] == "FileNotFoundError" and result["seconds"] < 5, result
        message = result["message"]
        assert "could not be reached" in message and "HF_HUB_OFFLINE" not in message, message
