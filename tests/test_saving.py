"""keras_vit.load_model: layers registered, no optimizer, clear errors for bad files."""

import numpy as np
import pytest

import keras_vit
from keras_vit.cli import main


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    model = keras_vit.ViT("mu/8", image_size=16, num_classes=3)
    model.compile("adam", "sparse_categorical_crossentropy")
    path = tmp_path_factory.mktemp("saving") / "tiny.keras"
    model.save(path)
    return model, path


def test_loads_without_optimizer_same_outputs(saved):
    model, path = saved
    loaded = keras_vit.load_model(path)
    assert getattr(loaded, "optimizer", None) is None  # compile=False: no optimizer rebuilt
    x = np.random.default_rng(0).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    np.testing.assert_allclose(
        loaded.predict(x, verbose=0), model.predict(x, verbose=0), rtol=1e-6, atol=1e-6
    )


@pytest.mark.parametrize("cut", [0, 100, -200])
def test_truncated_file_is_not_a_valid_archive(saved, tmp_path, cut):
    data = saved[1].read_bytes()
    bad = tmp_path / "bad.keras"
    bad.write_bytes(data[:cut] if cut >= 0 else data[: len(data) + cut])
    with pytest.raises(ValueError, match="is not a valid .keras archive") as info:
        keras_vit.load_model(bad)
    assert str(bad) in str(info.value)


def test_missing_file_and_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.keras"):
        keras_vit.load_model(tmp_path / "nope.keras")
    with pytest.raises(IsADirectoryError, match="is a folder"):
        keras_vit.load_model(tmp_path)


def test_finetune_init_with_a_truncated_model_is_a_user_error(saved, tmp_path, capsys):
    bad = tmp_path / "bad.keras"
    bad.write_bytes(saved[1].read_bytes()[:100])
    code = main(["finetune", "--smoke", "--init", str(bad), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2
    assert "not a valid .keras archive" in err and "Traceback" not in err


# --- a .keras file whose config.json was changed (issue 56): refused naming the file and key --


def _with_config(source, target, change):
    """A copy of the `.keras` archive `source` at `target` with its config.json `change`d
    (a function of the parsed dict, or raw bytes)."""
    import json
    import zipfile

    with zipfile.ZipFile(source) as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    if callable(change):
        config = json.loads(entries["config.json"])
        change(config["config"]["config"])
        entries["config.json"] = json.dumps(config).encode()
    elif change is None:
        del entries["model.weights.h5"]
    else:
        entries["config.json"] = change
    with zipfile.ZipFile(target, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return target


@pytest.fixture(scope="module")
def two_layers(tmp_path_factory):
    path = tmp_path_factory.mktemp("saving") / "two.keras"
    keras_vit.ViT("mu/8", image_size=16, num_classes=3, num_layers=2).save(path)
    return path


CHANGED = [
    ("fewer layers", lambda c: c.update(num_layers=1), "40 weight arrays .* takes 24 .*1 more "
                                                          "transformer_block"),
    ("hidden_dim changed", lambda c: c.update(hidden_dim=64, mlp_dim=128),
     "config.json says hidden_dim=64 \\(the weights: 32\\)"),
    ("missing hidden_dim", lambda c: c.pop("hidden_dim"), "hidden_dim"),
    ("unknown future key", lambda c: c.update(future_option=1), "future_option"),
    ("not JSON", b"{not json", "config.json is not valid JSON"),
    ("no weights", None, "no model.weights.h5"),
]  # fmt: skip


@pytest.mark.parametrize("case, change, message", CHANGED, ids=[c[0] for c in CHANGED])
def test_a_changed_keras_file_is_refused_naming_the_file(two_layers, tmp_path, case, change,
                                                         message):  # fmt: skip
    bad = _with_config(two_layers, tmp_path / "changed.keras", change)
    with pytest.raises(ValueError, match=message) as info:
        keras_vit.load_model(bad)
    assert str(bad) in str(info.value)
