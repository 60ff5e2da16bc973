"""Nothing a user made is replaced unasked, and mistakes about paths are named as they are:
`inspect --overwrite`, `convert` into a folder, `.keras` archives without config.json, a folder
given where a file is expected, and outputs that cannot be written (found before the work)."""

import os
import zipfile

import numpy as np
import pytest

from keras_vit.cli import main
from keras_vit.inspection import FIGURE_NAMES
from keras_vit.models.vit import ViT
from keras_vit.saving import atomic_write, check_writable, load_model
from keras_vit.weights.npz.checkpoints import save_npz


def _error(capsys):
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from PIL import Image

    folder = tmp_path_factory.mktemp("files")
    model = ViT("mu/8", image_size=16, num_classes=3, num_layers=1)
    model.save(str(folder / "model.keras"))
    save_npz(model, str(folder / "mu.npz"))
    Image.fromarray(np.zeros((16, 16, 3), "uint8")).save(folder / "photo.png")
    return folder


def test_inspect_refuses_to_replace_pngs_unless_overwrite(files, tmp_path, capsys):
    out = tmp_path / "plots"
    out.mkdir()
    mine = out / f"{FIGURE_NAMES[1]}.png"
    mine.write_bytes(b"my own figure")
    argv = ["inspect", str(files / "model.keras"), "--image", str(files / "photo.png")]
    assert main([*argv, "--out", str(out)]) == 2
    err = _error(capsys)
    assert f"{FIGURE_NAMES[1]}.png" in err and "--overwrite" in err
    assert mine.read_bytes() == b"my own figure"
    assert main([*argv, "--out", str(out), "--overwrite"]) == 0
    assert mine.read_bytes() != b"my own figure"
    capsys.readouterr()
    assert main([*argv, "--out", str(files / "photo.png")]) == 2  # a file as --out
    assert "is a file; expected a folder" in _error(capsys)
    assert main([*argv[:2], "--image", str(tmp_path), "--out", str(out)]) == 2
    assert "is a folder; expected an image file" in _error(capsys)


def test_convert_never_replaces_a_folder(files, tmp_path, capsys):
    folder = tmp_path / "X.keras"
    folder.mkdir()
    (folder / "precious.txt").write_text("mine")
    argv = ["convert", str(files / "mu.npz"), str(folder), "--model", "mu/8", "--image-size", "16"]
    for extra in ([], ["--overwrite"]):
        assert main([*argv, *extra]) == 2
        assert "is a folder" in _error(capsys)
        assert (folder / "precious.txt").read_text() == "mine"


def test_atomic_write_never_puts_a_file_in_place_of_a_folder(tmp_path):
    folder = tmp_path / "out.keras"
    folder.mkdir()
    (folder / "precious.txt").write_text("mine")

    def write(staged):
        with open(staged, "w") as f:
            f.write("model")

    with pytest.raises(IsADirectoryError, match="is a folder"):
        atomic_write(str(folder), write)
    assert (folder / "precious.txt").read_text() == "mine"
    assert os.listdir(tmp_path) == ["out.keras"]  # no staging folder left


def test_keras_archive_without_config_json_is_a_clear_error(files, tmp_path, capsys):
    damaged = tmp_path / "damaged.keras"
    with zipfile.ZipFile(files / "model.keras") as source, zipfile.ZipFile(damaged, "w") as dest:
        for item in source.infolist():
            if item.filename != "config.json":
                dest.writestr(item, source.read(item.filename))
    with pytest.raises(ValueError, match=r"not a valid \.keras archive \(it has no config\.json\)"):
        load_model(damaged)
    out = tmp_path / "plots"
    argv = ["inspect", str(damaged), "--image", str(files / "photo.png"), "--out", str(out)]
    assert main(argv) == 2
    err = _error(capsys)
    assert "has no config.json" in err and "KeyError" not in err


def test_a_folder_where_a_file_is_expected_says_so(files, tmp_path, capsys):
    with pytest.raises(IsADirectoryError, match="is a folder"):
        load_model(tmp_path)
    argv = ["convert", str(tmp_path), str(tmp_path / "o.keras"), "--model", "mu/8"]
    assert main(argv) == 2
    err = _error(capsys)
    assert "folder" in err and "not found" not in err.lower()


def test_unwritable_outputs_are_found_before_the_work(files, tmp_path, monkeypatch, capsys):
    """A folder that cannot be written (permissions or a read-only file system) is refused
    before anything is computed; simulated by making the probe file fail, as root ignores
    permissions."""
    import tempfile

    def refuse(*args, **kwargs):
        raise OSError(30, "Read-only file system")

    with pytest.raises(PermissionError, match="not writable.*Read-only file system"):
        with monkeypatch.context() as patch:
            patch.setattr(tempfile, "mkstemp", refuse)
            check_writable(tmp_path / "x.keras")
    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    loaded = []
    monkeypatch.setattr("keras_vit.cli.commands.load_model", lambda p: loaded.append(p))
    out = tmp_path / "plots"
    inspect = ["inspect", str(files / "model.keras"), "--image", str(files / "photo.png")]
    assert main([*inspect, "--out", str(out)]) == 2
    assert "not writable" in _error(capsys) and not loaded
    convert = ["convert", str(files / "mu.npz"), str(tmp_path / "o.keras"), "--model", "mu/8"]
    assert main(convert) == 2
    assert "not writable" in _error(capsys) and not (tmp_path / "o.keras").exists()
    assert main(["pretrain", "--smoke", "--out", str(tmp_path / "run")]) == 2
    assert "not writable" in _error(capsys) and not (tmp_path / "run").exists()
