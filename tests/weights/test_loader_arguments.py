"""The loaders' own arguments and the JSON files beside checkpoints (issue 56): checked before
anything is read, built or downloaded; nothing ignored or coerced; every error one of the
documented types naming the argument or the file and the field.

keras_vit/weights/timm/arguments.py, keras_vit/weights/huggingface/arguments.py,
keras_vit/weights/config_types.py, keras_vit/weights/hub_errors.py.
"""

import json
import re

import numpy as np
import pytest

import keras_vit
from keras_vit.weights.config_types import HF_CONFIG_FIELDS, check_fields, read_json_object
from tests.helpers import backend_independent

TIMM = "vit_tiny_patch16_224"
SIZES = dict(image_size=32, num_layers=1, hidden_dim=16, mlp_dim=32, num_heads=2)


@pytest.fixture
def checkpoint(tmp_path):
    """A path beside which a config.json is read first (its content never matters here)."""
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"not read: the arguments are refused first")
    return path


# --- from_timm ---------------------------------------------------------------------------------


@backend_independent  # refused before any model is built
@pytest.mark.parametrize(
    "name, message",
    [
        (None, r"name=None \(type NoneType\)"),
        (123, r"name=123 \(type int\)"),
        (b"vit_tiny_patch16_224", r"\(type bytes\)"),
        ("", "name=''"),
        ("vit_tiny_patch16_224.bogus_tag", "no pretrained tag 'bogus_tag'.*augreg_in21k_ft_in1k"),
    ],
)
def test_timm_names_are_strings_with_known_tags(name, message):
    with pytest.raises(ValueError, match=message):
        keras_vit.from_timm(name, **SIZES)


@backend_independent
@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(revision="doesnotexist", cache_dir=12345),
         "revision='doesnotexist' and cache_dir=12345 choose what is downloaded.*checkpoint="),
        (dict(cache_dir="/tmp"), "cache_dir='/tmp' choose what is downloaded"),
        (dict(revision="v1"), "revision='v1' choose what is downloaded"),
    ],
)  # fmt: skip
def test_hub_arguments_with_a_local_checkpoint_are_refused_naming_both(checkpoint, kwargs,
                                                                       message):  # fmt: skip
    with pytest.raises(ValueError, match=message):
        keras_vit.from_timm(TIMM, checkpoint, **kwargs, **SIZES)


@backend_independent
def test_hub_arguments_without_a_download_are_refused():
    with pytest.raises(ValueError, match="revision='v1'.*no download \\(pretrained=False\\)"):
        keras_vit.from_timm(TIMM, revision="v1", **SIZES)


@backend_independent
def test_a_cache_dir_that_is_a_file_is_refused(checkpoint):
    with pytest.raises(ValueError, match="cache_dir must be a folder.*is a file"):
        keras_vit.from_timm(TIMM, pretrained=True, cache_dir=checkpoint, **SIZES)
    with pytest.raises(ValueError, match="cache_dir must be a folder"):
        keras_vit.from_huggingface("acme/vit", cache_dir=checkpoint)


@backend_independent  # the config.json is read before the checkpoint
@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "config.json: the timm config.json is not valid JSON"),
        ("[1, 2]", "must hold a JSON object.*a list"),
        ('{"pretrained_cfg": {"mean": "abc"}}', r"\(pretrained_cfg\): mean must be a number or"),
        ('{"pretrained_cfg": {"crop_pct": "0.9"}}', "crop_pct must be a finite number"),
        ('{"num_classes": 5.5, "pretrained_cfg": {}}', "num_classes must be an integer"),
        ('{"pretrained_cfg": []}', "pretrained_cfg must be an object"),
    ],
)
def test_a_timm_config_json_beside_the_checkpoint_is_read_as_data(checkpoint, content, message):
    (checkpoint.parent / "config.json").write_text(content)
    with pytest.raises(ValueError, match=message) as info:
        keras_vit.from_timm(TIMM, checkpoint, **SIZES)
    assert str(checkpoint.parent / "config.json") in str(info.value)


# --- from_huggingface --------------------------------------------------------------------------


@backend_independent
@pytest.mark.parametrize("path", [None, 12, b"folder", ""])
def test_huggingface_paths_are_strings(path):
    with pytest.raises(ValueError, match="path must"):
        keras_vit.from_huggingface(path)


@backend_independent
def test_a_typo_of_a_local_folder_says_both_readings(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(FileNotFoundError) as info:
        keras_vit.from_huggingface("models/vitt")
    message = str(info.value)
    assert "'models/vitt' is no local folder" in message and str(tmp_path) in message
    assert "Hub repo 'models/vitt'" in message


def _hf_folder(tmp_path, **changes):
    config = {"model_type": "vit", "architectures": ["ViTModel"], "hidden_size": 16,
              "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32,
              "image_size": 16, "patch_size": 8, "qkv_bias": True}  # fmt: skip
    config.update(changes)
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


@backend_independent  # the config.json is checked before the weights are looked for
@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(num_hidden_layers=2.9), "num_hidden_layers must be an integer.*=2.9 \\(a float\\)"),
        (dict(qkv_bias="false"), "qkv_bias must be true or false.*='false' \\(a string\\)"),
        (dict(hidden_size=True), "hidden_size must be an integer.*=True \\(a boolean\\)"),
        (dict(architectures="ViTModel"), "architectures must be a list of strings"),
        (dict(model_type=["vit"]), "model_type must be a string"),
        (dict(id2label=["cat"]), "id2label must be an object"),
        (dict(hidden_act=["gelu"]), "hidden_act must be a string"),
        (dict(vision_config={"hidden_size": "16"}), r"\(vision_config\): hidden_size must be"),
    ],
)
def test_config_json_fields_are_read_typed(tmp_path, changes, message):
    folder = _hf_folder(tmp_path, **changes)
    with pytest.raises(ValueError, match=message) as info:
        keras_vit.from_huggingface(str(folder))
    assert str(folder / "config.json") in str(info.value)


@backend_independent
@pytest.mark.parametrize(
    "content, message",
    [
        ("{bad", "preprocessor_config.json: the preprocessor_config.json is not valid JSON"),
        ("[1]", "must hold a JSON object"),
        ('{"image_mean": "0.5"}', "image_mean must be a number or a list of numbers.*'0.5'"),
        ('{"image_std": [0.5, "0.5", 0.5]}', "image_std must be a number or a list of numbers"),
        ('{"size": {"shortest_edge": 22.5}}', "size must be an integer or an object of integers"),
    ],
)
def test_preprocessor_config_json_is_read_typed(content, message):
    import tempfile

    from keras_vit.weights.huggingface.input_spec import huggingface_input_spec

    folder = tempfile.mkdtemp()
    with open(f"{folder}/preprocessor_config.json", "w") as f:
        f.write(content)
    with pytest.raises(ValueError, match=message):
        huggingface_input_spec(folder, {"model_type": "vit"}, (16, 16))


@backend_independent
def test_check_fields_and_read_json_object(tmp_path):
    assert check_fields({"hidden_size": 16, "other": "x"}, HF_CONFIG_FIELDS, "c") == {
        "hidden_size": 16, "other": "x"}  # fmt: skip
    with pytest.raises(ValueError, match="c: layer_norm_eps must be a finite number"):
        check_fields({"layer_norm_eps": float("nan")}, HF_CONFIG_FIELDS, "c")
    path = tmp_path / "x.json"
    path.write_text('"text"')
    with pytest.raises(ValueError, match="must hold a JSON object.*a str"):
        read_json_object(path)


# --- what a checkpoint holds against what its config says --------------------------------------


@pytest.fixture(scope="module")
def hf_export(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hf") / "vit"
    model = keras_vit.ViT("mu/8", image_size=16, num_classes=3, num_layers=1)
    keras_vit.export_huggingface(model, str(folder))
    return folder


def _rewrite(source, target, change_arrays=None, change_config=None):
    from safetensors.numpy import load_file, save_file

    target.mkdir()
    arrays = load_file(str(source / "model.safetensors"))
    config = json.loads((source / "config.json").read_text())
    arrays = change_arrays(arrays) if change_arrays else arrays
    config = change_config(config) if change_config else config
    save_file(arrays, str(target / "model.safetensors"))
    (target / "config.json").write_text(json.dumps(config))
    return target


def test_one_weight_under_two_names_is_refused(hf_export, tmp_path):
    def duplicate(arrays):
        arrays["vit.classifier.weight"] = arrays["classifier.weight"] + 1.0
        return arrays

    folder = _rewrite(hf_export, tmp_path / "dup", duplicate)
    with pytest.raises(ValueError, match="holds 'classifier.weight' and 'vit.classifier.weight'"):
        keras_vit.from_huggingface(str(folder))


def test_a_classifier_config_without_a_classifier_is_refused(hf_export, tmp_path):
    def drop(arrays):
        return {k: v for k, v in arrays.items() if not k.startswith("classifier.")}

    def classify(config):
        return {**config, "architectures": ["ViTForImageClassification"]}

    folder = _rewrite(hf_export, tmp_path / "headless", drop, classify)
    with pytest.raises(ValueError, match="names ViTForImageClassification.*no classifier.weight"):
        keras_vit.from_huggingface(str(folder))
    model = keras_vit.from_huggingface(str(folder), num_classes=0)  # the encoder, asked for
    assert model.head is None


def test_a_state_dict_entry_that_is_not_an_array_is_named():
    arrays = {"head.weight": np.zeros((5, 16), "float32"), "head.bias": None}
    with pytest.raises(ValueError, match="not arrays: head.bias=None"):
        keras_vit.from_timm(TIMM, arrays, num_classes=5, **SIZES)


# --- huggingface_hub's errors at the boundary (the loopback Hub tests meet the common ones) ---


@backend_independent
@pytest.mark.parametrize(
    "kind, status, expected, message",
    [
        ("GatedRepoError", 403, PermissionError, "is gated: ask for access"),
        ("RepositoryNotFoundError", 404, FileNotFoundError, "No Hub repo 'acme/vit'"),
        ("RevisionNotFoundError", 404, ValueError, "has no revision 'v9'"),
        ("DisabledRepoError", 403, PermissionError, "disabled"),
        ("HfHubHTTPError", 401, PermissionError, "refused.*HTTP 401"),
        ("HfHubHTTPError", 503, FileNotFoundError, "answered HTTP 503.*Try again later"),
    ],
)
def test_hub_errors_become_the_documented_types(kind, status, expected, message):
    httpx = pytest.importorskip("httpx2", reason="huggingface_hub's HTTP client")
    from huggingface_hub import errors

    from keras_vit.weights.hub_errors import translate

    response = httpx.Response(status, request=httpx.Request("GET", "http://hub/acme/vit"))
    error = getattr(errors, kind)(f"{status} Client Error", response=response)
    translated = translate(error, "acme/vit", "v9", "model.safetensors")
    assert type(translated) is expected
    assert re.search(message, str(translated)), str(translated)
    assert translate(KeyError("x"), "acme/vit", None, "f") is None  # not the Hub's: as it is
