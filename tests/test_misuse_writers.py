"""Issue 43, writers / command line / newcomer path: every misuse answers clearly.

One test (or a few) per class, on every backend: a file's suffix agrees with what is written
into it; new files follow the umask and replaced ones keep their mode; every target is checked
before the first byte is written; an existing directory entry (a dangling symbolic link
included) is never replaced unasked; the command line refuses contradictions (`--model` against
`--init`, a teacher that cannot teach, a checkpoint given to the wrong reader, a NaFlex model to
`fewshot`) before it writes to `--out`; Ctrl-C after the lock file is never a finished run;
redirected logs get one line per epoch; the quickstart has one folder per backend; a loader's
error on a checkpoint of another model is a screenful, not 10,000 characters.
"""

import json
import os
import signal
import stat
import tempfile

import keras
import numpy as np
import pytest

from keras_vit.cli import main
from keras_vit.models.vit import ViT
from keras_vit.runner import output
from keras_vit.weights.huggingface.export import export_huggingface
from keras_vit.weights.timm.export import export_timm

SYNTHETIC = ["--smoke", "--dataset", "synthetic:4:64:16", "--verbose", "0"]


def _model(**kwargs):
    return ViT("mu/8", image_size=16, num_classes=4, num_layers=1, approximate_gelu=False,
               **kwargs)  # fmt: skip


def _error(capsys):
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return err


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A tiny plain model and its .keras file."""
    folder = tmp_path_factory.mktemp("small")
    model = _model()
    path = str(folder / "small.keras")
    model.save(path)
    return model, path


@pytest.fixture
def umask():
    previous = os.umask(0o022)
    yield lambda mask: os.umask(mask)
    os.umask(previous)


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


# --- 1. suffix-content agreement ----------------------------------------------------------


@pytest.mark.parametrize("name", ["model.pth", "model.bin", "model.keras", "model"])
def test_export_timm_refuses_a_name_of_another_format(small, tmp_path, name):
    path = tmp_path / name
    with pytest.raises(ValueError, match=r"Expected a name ending in '\.safetensors'") as info:
        export_timm(small[0], path)
    assert repr(str(path)) in str(info.value) and "nothing was written" in str(info.value)
    assert os.listdir(tmp_path) == []


def test_other_writers_check_their_suffix(small, tmp_path):
    from keras_vit.export import export_litert, export_onnx, export_saved_model
    from keras_vit.training.lora import enable_lora
    from keras_vit.training.lora_files import save_lora_weights

    with pytest.raises(ValueError, match=r"would hold an ONNX model, but '\.tflite' names"):
        export_onnx(small[0], tmp_path / "m.tflite")
    with pytest.raises(ValueError, match=r"would hold a LiteRT \(TFLite\) model.*'\.tflite'"):
        export_litert(small[0], tmp_path / "m.onnx")
    with pytest.raises(ValueError, match=r"export_dir=.*'\.keras' names a Keras model archive"):
        export_saved_model(small[0], tmp_path / "serving.keras")
    with pytest.raises(ValueError, match=r"'\.safetensors' names a safetensors file"):
        export_huggingface(small[0], tmp_path / "hf.safetensors")
    lora = enable_lora(_model(), rank=2)
    with pytest.raises(ValueError, match=r"LoRA weights, but '\.safetensors'"):
        save_lora_weights(lora, tmp_path / "adapters.safetensors")
    assert os.listdir(tmp_path) == []


def test_convert_to_refuses_an_output_of_another_format(small, tmp_path, capsys):
    for target, out in (("timm", "out.keras"), ("timm", "out.pth"), ("huggingface", "out.keras")):
        path = str(tmp_path / out)
        assert main(["convert", small[1], path, "--to", target]) == 2
        err = _error(capsys)
        assert f"OUTPUT={path!r}" in err and "nothing was written" in err, err
        assert not os.path.lexists(path)
    assert "Expected a name ending in '.safetensors'" in err or "folder name" in err


# --- 2. file modes follow the umask ---------------------------------------------------------


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_new_files_follow_the_umask(small, tmp_path, umask, mask, mode):
    from keras_vit.saving import atomic_write

    umask(mask)
    path = tmp_path / "m.safetensors"
    export_timm(small[0], path)
    assert _mode(path) == mode
    export_huggingface(small[0], tmp_path / "hf")
    for name in ("config.json", "model.safetensors"):
        assert _mode(tmp_path / "hf" / name) == mode, name
    atomic_write(str(tmp_path / "m.keras"), small[0].save)  # every runner / convert output
    assert _mode(tmp_path / "m.keras") == mode


def test_a_replaced_file_keeps_its_mode(small, tmp_path, umask):
    umask(0o077)
    path = tmp_path / "m.safetensors"
    path.write_bytes(b"old")
    os.chmod(path, 0o644)
    export_timm(small[0], path, overwrite=True)
    assert _mode(path) == 0o644 and path.read_bytes() != b"old"
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    os.chmod(tmp_path / "hf" / "config.json", 0o640)
    export_huggingface(small[0], tmp_path / "hf", overwrite=True)
    assert _mode(tmp_path / "hf" / "config.json") == 0o640
    assert _mode(tmp_path / "hf" / "model.safetensors") == 0o600


# --- 3. refusals before the first byte ------------------------------------------------------


def test_export_huggingface_checks_every_target_before_writing(small, tmp_path):
    folder = tmp_path / "hf"
    export_huggingface(small[0], folder)
    weights = (folder / "model.safetensors").read_bytes()
    os.remove(folder / "config.json")
    (folder / "config.json").mkdir()
    other = _model()
    other.set_weights([w + 1.0 for w in other.get_weights()])
    with pytest.raises(IsADirectoryError, match=r"config\.json' is a folder.*never replaces"):
        export_huggingface(other, folder, overwrite=True)
    assert (folder / "model.safetensors").read_bytes() == weights  # no partial write
    assert sorted(os.listdir(folder)) == ["config.json", "model.safetensors"]


@pytest.mark.parametrize("bad", [None, 3, b"", ""])
def test_a_path_that_is_no_path_is_a_clear_error(small, bad):
    with pytest.raises((TypeError, ValueError), match=r"path must (be a str|name a file)"):
        export_timm(small[0], bad)
    with pytest.raises((TypeError, ValueError), match=r"folder must (be a str|name a file)"):
        export_huggingface(small[0], bad)


def test_an_unwritable_folder_is_named_not_a_hidden_temporary(small, tmp_path, monkeypatch):
    """(Root writes anywhere: the refusal of the file system is simulated.)"""
    from keras_vit.saving import atomic_write

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied", os.path.join(str(tmp_path), ".x.tmp"))

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    monkeypatch.setattr(tempfile, "mkdtemp", refuse)
    for write in (
        lambda: export_timm(small[0], tmp_path / "m.safetensors"),
        lambda: export_huggingface(small[0], tmp_path / "hf"),
        lambda: atomic_write(str(tmp_path / "m.keras"), small[0].save),
    ):
        with pytest.raises(PermissionError) as info:
            write()
        message = str(info.value)
        assert repr(str(tmp_path)) in message and "not writable" in message, message
        assert ".tmp" not in message, message


# --- 4. symbolic links are existing entries -------------------------------------------------


def test_a_dangling_symlink_is_not_replaced_unasked(small, tmp_path):
    link = tmp_path / "m.safetensors"
    os.symlink(tmp_path / "nowhere", link)
    with pytest.raises(FileExistsError, match="a symbolic link"):
        export_timm(small[0], link)
    assert os.path.islink(link) and os.readlink(link) == str(tmp_path / "nowhere")
    (tmp_path / "hf").mkdir()
    os.symlink(tmp_path / "nowhere", tmp_path / "hf" / "config.json")
    with pytest.raises(FileExistsError, match="config.json"):
        export_huggingface(small[0], tmp_path / "hf")
    assert os.path.islink(tmp_path / "hf" / "config.json")
    export_timm(small[0], link, overwrite=True)  # asked: the link itself is replaced
    assert not os.path.islink(link) and not os.path.exists(tmp_path / "nowhere")


# --- 5. the command line and the runner -----------------------------------------------------


def test_finetune_refuses_a_model_that_contradicts_init(small, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["finetune", *SYNTHETIC, "--init", small[1], "--out", str(out)]
    assert main([*argv, "--model", "B/16"]) == 2
    err = _error(capsys)
    assert "--model B/16 contradicts --init" in err and small[1] in err and "hidden_dim=32" in err
    assert not os.path.exists(out)


def test_finetune_from_init_records_the_init_architecture(small, tmp_path, capsys):
    """Without --model the run records the --init model's sizes, not a preset's variant code;
    off a terminal its log is one line per epoch, without progress-bar escapes."""
    out = tmp_path / "run"
    argv = ["finetune", "--smoke", "--dataset", "synthetic:4:96:16", "--init", small[1],
            "--out", str(out), "--epochs", "1", "--steps-per-epoch", "2"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "\x1b[" not in printed and "\r" not in printed and "2/2" in printed, printed
    with open(out / "metrics.json") as f:
        metrics = json.load(f)
    assert metrics["config"]["model"] is None
    assert metrics["model"]["architecture"]["hidden_dim"] == 32
    assert metrics["model"]["architecture"]["num_layers"] == 1


def test_fit_verbosity_follows_the_terminal():
    from keras_vit.runner.config import fit_verbosity

    class Stream:
        def __init__(self, tty):
            self.tty = tty

        def isatty(self):
            return self.tty

    assert fit_verbosity("auto", Stream(True)) == 1
    assert fit_verbosity("auto", Stream(False)) == 2
    assert fit_verbosity("auto", object()) == 2
    assert fit_verbosity(0, Stream(True)) == 0 and fit_verbosity(1, Stream(False)) == 1


def test_sigint_handler_is_installed_before_the_lock_file(tmp_path, monkeypatch):
    out = str(tmp_path / "run")
    os.makedirs(out)
    seen = []
    replace = os.replace

    def spy(src, dst):
        seen.append(signal.getsignal(signal.SIGINT))
        replace(src, dst)

    monkeypatch.setattr(output.os, "replace", spy)
    before = signal.getsignal(signal.SIGINT)
    output.take_lock(out)
    try:
        assert seen == [output._on_sigint]
        try:  # a library that swallows the KeyboardInterrupt
            os.kill(os.getpid(), signal.SIGINT)  # the handler runs as os.kill returns
        except KeyboardInterrupt:
            pass
        with pytest.raises(KeyboardInterrupt):  # the run is not recorded as finished
            output.check_not_interrupted()
    finally:
        output.release_out(out, failed=True)
    assert signal.getsignal(signal.SIGINT) is before
    output.install_interrupt_handler()  # a new run starts with no interrupt on record
    output.check_not_interrupted()
    output.restore_interrupt_handler()


def test_teacher_mistakes_name_the_teacher_before_out_is_written(tmp_path, capsys):
    from keras_vit.training.distillation import Distiller, check_teacher

    wrong_size = str(tmp_path / "t32.keras")
    ViT("mu/8", image_size=32, num_classes=4, num_layers=1).save(wrong_size)
    naflex = str(tmp_path / "naflex.keras")
    ViT("mu/8", image_size=16, num_classes=4, num_layers=1, naflex=True,
        prefix_position_embedding=False).save(naflex)  # fmt: skip
    out = tmp_path / "run"
    argv = ["finetune", *SYNTHETIC, "--distillation", "hard", "--out", str(out)]
    assert main([*argv, "--teacher", wrong_size]) == 2
    err = _error(capsys)
    assert "teacher (--teacher)" in err and "(32, 32, 3)" in err and "--image-size 16" in err
    assert main([*argv, "--teacher", naflex]) == 2
    err = _error(capsys)
    assert "teacher (--teacher)" in err and "NaFlex" in err, err
    assert not os.path.exists(out)  # nothing written: the corrected rerun is not refused
    unbuilt = keras.Sequential([keras.layers.Flatten(), keras.layers.Dense(4)])
    with pytest.raises(ValueError, match=r"teacher \(--teacher\).*no known input shape"):
        check_teacher(unbuilt, image_size=16)
    student = ViT("mu/8", image_size=16, num_classes=4, num_layers=1, distillation_token=True)
    classes = r"teacher \(--teacher\).*predicts 3 classes, not the student's 4"
    with pytest.raises(ValueError, match=classes):
        Distiller(student, ViT("mu/8", image_size=16, num_classes=3, num_layers=1))


def test_convert_without_from_names_the_reader_a_file_needs(small, tmp_path, capsys):
    timm_file = str(tmp_path / "vit.safetensors")
    export_timm(small[0], timm_file)
    hf = str(tmp_path / "hf")
    export_huggingface(small[0], hf)
    cases = ((timm_file, "use --from timm NAME CHECKPOINT OUTPUT"),
             (hf, "use --from huggingface FOLDER OUTPUT"),
             (small[1], "use --to timm or --to huggingface"))  # fmt: skip
    for checkpoint, advice in cases:
        out = str(tmp_path / "out.keras")
        assert main(["convert", checkpoint, out, "--model", "mu/8"]) == 2
        err = _error(capsys)
        assert advice in err and "TFSMLayer" not in err, err
        assert not os.path.exists(out)
    out = str(tmp_path / "out.keras")  # the timm form (NAME CHECKPOINT OUTPUT) without --from
    assert main(["convert", "vit_base_patch16_224", timm_file, out]) == 2
    assert "use --from timm NAME CHECKPOINT OUTPUT" in _error(capsys)


def test_fewshot_refuses_a_naflex_model(tmp_path, capsys):
    path = str(tmp_path / "naflex.keras")
    ViT("mu/8", image_size=16, num_classes=4, num_layers=1, naflex=True,
        prefix_position_embedding=False).save(path)  # fmt: skip
    out = tmp_path / "fewshot"
    code = main(["fewshot", "--model-path", path, "--dataset", "synthetic:4:64:16",
                 "--out", str(out)])  # fmt: skip
    assert code == 2
    err = _error(capsys)
    assert "--model-path" in err and "NaFlex" in err and "tf.function" not in err, err
    assert not os.path.exists(out)


# --- 8. the newcomer path --------------------------------------------------------------------


def test_quickstart_has_one_folder_per_backend():
    from keras_vit.cli.app import build_parser
    from keras_vit.runner import quickstart

    expected = os.path.join("runs", "quickstart", keras.backend.backend())
    assert quickstart.get_config()["out"] == expected
    assert quickstart.quickstart_config()["out"] == expected
    assert build_parser().parse_args(["quickstart"]).out is None  # the command's default too


def test_a_checkpoint_of_another_model_is_a_readable_error(small, tmp_path):
    from keras_vit import from_timm

    path = tmp_path / "tiny.safetensors"
    export_timm(small[0], path)
    with pytest.raises(ValueError) as info:
        from_timm("vit_base_patch16_224", str(path))
    message = str(info.value)
    assert len(message) < 2500, len(message)
    assert "more" in message and "another model" in message
    assert np.sum([line.startswith("  ") for line in message.splitlines()]) <= 32
