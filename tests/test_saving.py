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
