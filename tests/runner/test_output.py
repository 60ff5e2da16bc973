"""The output-folder policy (keras_vit/runner/output.py): nothing a user made is replaced unasked,
a folder in use by a live run is refused, a failed run leaves no empty folder behind."""

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

from keras_vit.runner import output
from keras_vit.runner.output import LOCK, prepare_out, release_out
from keras_vit.runner.resume import resume_line
from keras_vit.runner.run_files import MARKER, run_entries
from tests.helpers import backend_independent


def test_files_a_run_writes_are_not_replaced_without_overwrite(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "log.csv").write_text("my own log\n")
    (out / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"files a run writes \(log.csv\).*--overwrite"):
        prepare_out({"out": str(out)})
    assert (out / "log.csv").read_text() == "my own log\n" and not (out / LOCK).exists()
    prepare_out({"out": str(out), "overwrite": True})  # replaces only what the run writes
    assert not (out / "log.csv").exists() and (out / "notes.txt").read_text() == "mine"
    release_out(str(out))
    assert sorted(os.listdir(out)) == [MARKER, "notes.txt"]


def _finished_run(out):
    """What a finished smoke run leaves (the names a run writes), as empty files."""
    for name in ("metrics.json", "model.keras", "log.csv", MARKER, "checkpoints/last.keras",
                 "checkpoints/best.keras", "logs/train/events.out.tfevents.1.host.9.0.v2",
                 "logs/validation/events.out.tfevents.1.host.9.1.v2",
                 "checkpoints/.last.keras.tmp-x1y2/last.keras"):  # fmt: skip
        os.makedirs(os.path.dirname(out / name), exist_ok=True)
        (out / name).write_text("run")


@backend_independent  # file-system policy only
def test_overwrite_removes_only_what_a_run_writes_even_inside_its_folders(tmp_path):
    """The battery's data loss: a user's files in checkpoints/ and logs/ of a finished run
    survive `--overwrite`; the folders stay while they hold something of the user's."""
    out = tmp_path / "run"
    _finished_run(out)
    mine = ["notes.txt", "checkpoints/my_best_ever.keras", "logs/my_notes.txt",
            "logs/train/my_plot.png", "backup_of_mine/latest.weights.h5"]  # fmt: skip
    for name in mine:
        os.makedirs(os.path.dirname(out / name), exist_ok=True)
        (out / name).write_text("mine")
    with pytest.raises(FileExistsError, match="a finished run .*your other files stay"):
        prepare_out({"out": str(out)})
    prepare_out({"out": str(out), "overwrite": True})
    release_out(str(out))
    for name in mine:
        assert (out / name).read_text() == "mine", name
    assert run_entries(str(out)) == [MARKER]  # nothing of the old run, the new marker
    assert not (out / "logs" / "validation").exists()  # emptied: removed
    # A link named like a run folder is never followed into.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "last.keras").write_text("mine")
    linked = tmp_path / "linked"
    _finished_run(linked)
    shutil.rmtree(linked / "checkpoints")
    os.symlink(elsewhere, linked / "checkpoints")
    prepare_out({"out": str(linked), "overwrite": True})
    release_out(str(linked))
    assert (elsewhere / "last.keras").read_text() == "mine"


@backend_independent  # file-system policy only
def test_an_unfinished_run_without_a_backup_reruns_without_overwrite(tmp_path):
    """A Ctrl-C in the first epoch leaves the marker, an empty log.csv and an events file: the
    same command reruns there; without the marker the same files are refused (a user's)."""
    out = tmp_path / "run"
    prepare_out({"out": str(out)})
    (out / "log.csv").write_text("")
    os.makedirs(out / "logs" / "train")
    (out / "logs" / "train" / "events.out.tfevents.1.host.9.0.v2").write_text("")
    release_out(str(out), failed=True)  # interrupted
    assert sorted(os.listdir(out)) == [MARKER, "log.csv", "logs"]
    assert prepare_out({"out": str(out)}) == str(out)
    release_out(str(out))
    os.remove(out / MARKER)
    with pytest.raises(FileExistsError, match=r"files a run writes \(log.csv, logs\)"):
        prepare_out({"out": str(out)})


def test_an_interrupted_run_resumes_into_its_own_log(tmp_path):
    (tmp_path / "backup").mkdir()
    (tmp_path / "log.csv").write_text("epoch,loss\n0,1.0\n")
    assert prepare_out({"out": str(tmp_path)}) == str(tmp_path)
    assert (tmp_path / "log.csv").exists()
    release_out(str(tmp_path))


def _write_lock(out, pid, host=None):
    (out / LOCK).write_text(json.dumps({"pid": pid, "host": host or socket.gethostname()}))


def test_a_folder_in_use_by_a_live_run_is_refused_even_with_overwrite(tmp_path):
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _write_lock(tmp_path, other.pid)
        for overwrite in (False, True):
            with pytest.raises(FileExistsError, match=rf"in use .*process {other.pid}"):
                prepare_out({"out": str(tmp_path), "overwrite": overwrite})
    finally:
        other.kill()
        other.wait()
    # Its process is gone: the lock is stale and taken over.
    prepare_out({"out": str(tmp_path)})
    assert json.loads((tmp_path / LOCK).read_text())["pid"] == os.getpid()
    release_out(str(tmp_path))
    assert not (tmp_path / LOCK).exists()


def test_a_lock_of_another_host_is_refused(tmp_path):
    _write_lock(tmp_path, 1, host="elsewhere.example")
    with pytest.raises(FileExistsError, match="host 'elsewhere.example'"):
        prepare_out({"out": str(tmp_path), "overwrite": True})


def test_two_cli_runs_into_one_folder(tmp_path):
    """The second of two runs into the same --out fails at once, naming the first's process."""
    out = tmp_path / "run"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _write_lock(out, holder.pid)
        result = subprocess.run(
            [sys.executable, "-m", "keras_vit", "pretrain", "--smoke", "--out", str(out),
             "--overwrite"],
            capture_output=True, text=True, timeout=300,
            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        )  # fmt: skip
    finally:
        holder.kill()
        holder.wait()
    assert result.returncode == 2, result.stderr
    assert f"in use by a running keras-vit run (process {holder.pid}" in result.stderr
    assert sorted(os.listdir(out)) == [LOCK]


def test_a_failed_run_leaves_no_empty_folder_it_created(tmp_path):
    out = tmp_path / "new"
    prepare_out({"out": str(out)})
    release_out(str(out), failed=True)
    assert not out.exists()
    existing = tmp_path / "existing"
    existing.mkdir()
    prepare_out({"out": str(existing)})
    release_out(str(existing), failed=True)
    assert existing.is_dir() and not os.listdir(existing)  # the user's folder stays, emptied


def test_a_run_whose_data_is_missing_leaves_no_folder(tmp_path):
    pytest.importorskip("tensorflow")
    from keras_vit.runner import pretrain

    config = pretrain.get_config(smoke=True)
    empty = tmp_path / "images"
    empty.mkdir()
    config.update(out=str(tmp_path / "run"), verbose=0, dataset=f"folder:{empty}")
    with pytest.raises((ValueError, FileNotFoundError)):
        pretrain.run(config)
    assert not (tmp_path / "run").exists()
    assert os.path.abspath(tmp_path / "run") not in output._created


def test_resuming_with_changed_settings_says_what_changed_and_refuses_another_model(
    tmp_path, capsys
):
    pytest.importorskip("tensorflow")
    import keras

    from keras_vit.runner import pretrain

    class Stop(Exception):
        pass

    class StopAfterFirstEpoch(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            raise Stop()

    def config(**overrides):
        base = pretrain.get_config(smoke=True)
        base.update(out=str(tmp_path / "run"), verbose=0, jit_compile=False, **overrides)
        return base

    with pytest.raises(Stop):
        pretrain.run(config(), callbacks=[StopAfterFirstEpoch()])
    capsys.readouterr()
    wider = config(model_overrides={"hidden_dim": 48}, image_size=24)
    with pytest.raises(ValueError) as info:
        pretrain.run(wider)
    message = str(info.value)
    assert "Cannot resume" in message and "image_size (--image-size) 16 -> 24" in message
    assert "model_overrides" in message and len(message) < 700 and "\n" not in message
    metrics = pretrain.run(config(learning_rate=0.004, epochs=2))
    printed = capsys.readouterr().out
    assert "Resuming with a changed setting: learning_rate (--lr) 0.002 -> 0.004" in printed
    assert "Resuming with a changed setting: epochs (--epochs) 3 -> 2" in printed
    assert metrics["resumed_at_epoch"] == 1


def test_the_resume_line_names_the_next_epoch_or_that_none_is_left():
    assert resume_line("out/backup", 1, 3) == "Resuming from the backup in out/backup at epoch 2/3."
    # A backup of the last epoch (killed before the results were written): not "epoch 4/3".
    line = resume_line("out/backup", 3, 3)
    assert line.startswith("Resuming from the backup in out/backup: all 3 epochs are trained")
    assert "4/3" not in line


@backend_independent  # the settings record only
def test_a_decoder_change_on_resume_is_refused_before_anything_is_rewritten(tmp_path, capsys):
    """The battery's `pretrain-mae` resumed with another --decoder-hidden-dim: it printed
    "Resuming with a changed setting", rewrote run_config.json, then failed to load 13 objects.
    Now the change is refused in one paragraph and the record stays the backup's."""
    from keras_vit.runner import presets
    from keras_vit.runner.resume import CONFIG_FILE, check_resume, record_run_config, run_config

    backup = tmp_path / "run" / "backup"
    before = presets.get_config("pretrain_mae", smoke=True)
    record_run_config(str(backup), run_config(before))
    recorded = (backup / CONFIG_FILE).read_text()
    wider = dict(before, decoder_hidden_dim=32)
    with pytest.raises(ValueError, match=r"decoder_hidden_dim \(--decoder-hidden-dim\) 16 -> 32"):
        check_resume(wider, str(backup), start_epoch=1)
    assert (backup / CONFIG_FILE).read_text() == recorded and capsys.readouterr().out == ""
    # A setting that may change is printed, and recorded only with the next backup.
    assert check_resume(dict(before, learning_rate=0.5), str(backup), start_epoch=1) == [
        "Resuming with a changed setting: learning_rate (--lr) 0.001 -> 0.5"
    ]
    assert (backup / CONFIG_FILE).read_text() == recorded


def test_a_backup_that_does_not_fit_is_refused_naming_the_changed_settings(tmp_path):
    """A change no rule names that still changes the weights: the restore fails with the
    changed settings named, and nothing is rewritten (the class behind the decoder case)."""
    pytest.importorskip("tensorflow")
    import keras

    from keras_vit.runner.backup import AtomicBackupAndRestore
    from keras_vit.runner.resume import CONFIG_FILE, changes_since

    backup = str(tmp_path / "backup")
    small = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    small.compile("sgd", "mse")
    saver = AtomicBackupAndRestore(backup, run_config={"width": 2})
    saver.set_model(small)
    saver._current_epoch = 1
    saver._write_backup()
    recorded = open(os.path.join(backup, CONFIG_FILE)).read()
    wide = keras.Sequential([keras.Input((3,)), keras.layers.Dense(5)])
    wide.compile("sgd", "mse")
    restorer = AtomicBackupAndRestore(backup, run_config={"width": 5},
                                      describe_changes=changes_since)  # fmt: skip
    restorer.set_model(wide)
    with pytest.raises(ValueError, match=r"does not fit this model .*width \(--width\) 2 -> 5"):
        restorer.on_train_begin()
    assert open(os.path.join(backup, CONFIG_FILE)).read() == recorded
