"""The command line under misuse (issue 56's battery): values and flags refused before any
framework is imported, `--version`, "did you mean", a closed output pipe, a bad
`KERAS_VIT_THREADS`, warm-ups that scale with the run, and runs whose loss becomes NaN."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from keras_vit.cli import main
from tests.helpers import backend_independent

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FRAMEWORKS = ("keras", "tensorflow", "jax", "torch")


def error_of(capsys):
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


# Each case: argv, and what the one-line error must say (the flag, and what to change).
REFUSED = [
    # Non-finite or absurd numbers (the battery's runs that trained to loss nan, exit 0).
    (["pretrain", "--lr", "inf"], "argument --lr: expected a positive number, finite"),
    (["pretrain", "--lr", "nan"], "argument --lr: expected a positive number, finite"),
    (["pretrain", "--weight-decay", "inf"], "argument --weight-decay: expected a number >= 0"),
    (["finetune", "--distillation-tau", "inf"], "argument --distillation-tau"),
    (["pretrain", "--lr", "1e30"], "learning_rate (--lr) must be > 0 and at most 10"),
    (["quickstart", "--lr", "inf"], "argument --lr"),
    # Settings that leave nothing to learn.
    (["pretrain-mae", "--mask-ratio", "0"], "mask_ratio (--mask-ratio) must be in (0, 1)"),
    (["pretrain-mpp", "--corruption-rate", "0"], "corruption_rate (--corruption-rate)"),
    # A warm-up given explicitly and not shorter than the run.
    (["pretrain", "--steps", "10", "--warmup-steps", "10"], "warmup_steps (10, --warmup-steps)"),
    (["quickstart", "--epochs", "2", "--warmup-epochs", "2"], "--warmup-epochs (2) must be"),
    # Flags that cannot apply to the run they are given to, naming what they need.
    (["finetune", "--data-dir", "/data"], "--data-dir /data cannot apply"),
    (["pretrain", "--download"], "--download cannot apply"),
    (["pretrain", "--on-corrupt", "skip"], "needs an image-folder dataset"),
    (["pretrain-mae", "--pooling", "gap"], "--pooling gap cannot apply to this run of keras-vit "
                                           "pretrain-mae: it needs a classifier"),
    (["pretrain-mae", "--fc-norm"], "--fc-norm cannot apply"),
    (["pretrain-mpp", "--label-smoothing", "0.1"], "--label-smoothing 0.1 cannot apply"),
    (["pretrain-mae", "--patch-dropout-rate", "0.5"], "--patch-dropout-rate 0.5 cannot apply"),
    (["pretrain-mae", "--validation-fraction", "0.2"], "needs per-epoch validation"),
    (["finetune", "--distillation", "hard", "--teacher", "t.keras", "--distillation-tau", "2"],
     "--distillation-tau 2.0 cannot apply"),
    (["finetune", "--naflex", "--max-patches", "16", "--rotation", "5"],
     "--rotation 5.0 cannot apply"),
    (["finetune", "--timm-name", "vit_tiny_patch16_224"], "--timm-name"),
    (["pretrain", "--print-config", "--overwrite"], "--overwrite cannot apply with --print-config"),
    (["finetune", "--teacher", "t.keras"], "Distillation needs both --teacher"),
    (["finetune", "--init", "m.keras", "--weights", "w.npz"], "--weights w.npz cannot apply"),
]


@backend_independent  # one fresh process: every refusal comes before any framework is imported
def test_bad_values_and_flags_that_cannot_apply_are_refused_before_any_framework():
    """Each case exits 2 with one line naming the flag; no framework is in sys.modules after
    all of them (so each answers within a second, where it used to take 7-11 s)."""
    code = f"""
        import json, sys, io, contextlib
        from keras_vit.cli import main
        results = []
        for argv in {[argv for argv, _ in REFUSED]!r}:
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                try:
                    code = main(argv + ["--out", "never_written"])
                except SystemExit as exit_:
                    code = exit_.code
            results.append([code, err.getvalue()])
        loaded = [m for m in {FRAMEWORKS!r} if m in sys.modules]
        print("RESULT" + json.dumps([results, loaded]))
        """
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT),
                         timeout=300)  # fmt: skip
    line = [x for x in run.stdout.splitlines() if x.startswith("RESULT")]
    assert line, run.stderr[-3000:]
    results, loaded = json.loads(line[0][len("RESULT") :])
    assert loaded == [], f"refusals imported {loaded}"
    for (argv, expected), (code, err) in zip(REFUSED, results, strict=True):
        assert code == 2, (argv, err)
        assert expected in err and "Traceback" not in err, (argv, err)
        assert len(err.strip().splitlines()) == 1, (argv, err)
    assert not os.path.exists(os.path.join(ROOT, "never_written"))


@backend_independent  # parsing only
def test_version_and_did_you_mean(capsys):
    from keras_vit import __version__

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"keras-vit {__version__}"
    assert main(["pretrain", "--modle", "B/16"]) == 2
    assert "--modle: did you mean --model?" in error_of(capsys)
    assert main(["finetune", "--lora-rnak=4"]) == 2
    assert "--lora-rnak: did you mean --lora-rank?" in error_of(capsys)
    assert main(["pretrian"]) == 2
    assert "pretrian: did you mean pretrain?" in error_of(capsys)
    assert main(["pretrain", "--zzzz"]) == 2  # nothing near: no suggestion
    assert "did you mean" not in error_of(capsys)
    # The shared "--" alone made a match: `fewshot --lr` suggested --help, `export --out`
    # suggested --format (audit of issue 56).
    for argv in (["fewshot", "--lr", "0.1"], ["export", "m.keras", "--out", "x"]):
        assert main(argv) == 2
        assert "did you mean" not in error_of(capsys), argv


@backend_independent  # export's flags are checked before any framework loads
def test_export_representative_samples_without_data_is_refused_naming_both(tmp_path, capsys):
    """It was refused after the framework import, in the library's words
    (`representative_samples ... without representative_data`; audit of issue 56)."""
    model = tmp_path / "m.keras"
    model.write_bytes(b"not read")
    out = tmp_path / "m.onnx"
    argv = ["export", str(model), str(out), "--format", "onnx", "--representative-samples", "4"]
    assert main(argv) == 2
    err = error_of(capsys)
    assert "--representative-samples 4 and no --representative-data" in err, err
    assert not out.exists()


@backend_independent  # the threads variable is read before any framework
def test_a_bad_threads_variable_names_the_variable(monkeypatch, capsys):
    for value in ("²", "two", "-1"):
        monkeypatch.setenv("KERAS_VIT_THREADS", value)
        assert main(["weights"]) == 2
        err = error_of(capsys)
        assert "KERAS_VIT_THREADS must be" in err and repr(value) in err, err


@backend_independent  # --print-config imports no framework
def test_print_config_into_a_closed_pipe_ends_quietly():
    """`keras-vit pretrain --print-config | head -1`: no BrokenPipeError, no message, exit 141
    (what a shell reports for a process ended by SIGPIPE)."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the command writes (as `head -1` once it has read)
    try:
        run = subprocess.run(
            [sys.executable, "-m", "keras_vit", "pretrain-mae", "--print-config"],
            stdout=write, stderr=subprocess.PIPE, cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=ROOT), timeout=120,
        )  # fmt: skip
    finally:
        os.close(write)
    err = run.stderr.decode()
    assert run.returncode == 141 and err == "", err


# (on every backend: the quickstart preset's output folder is named after the active backend)
def test_preset_warm_ups_scale_with_the_run_and_explicit_ones_are_kept():
    """`keras-vit quickstart --epochs 1|2|3` used to fail (warmup 57 > total steps 19): the
    presets' warm-ups are a share of the run; the defaults are unchanged at their own length."""
    from keras_vit.runner import presets
    from keras_vit.runner.quickstart_defaults import quickstart_config
    from keras_vit.runner.steps import plan_steps

    train = 1257  # the digits training split (1131 after a 10% validation carve)
    assert plan_steps(quickstart_config(), train) == (60, 19, 1140, 57)  # 3 epochs, as before
    for epochs, warmup in ((1, 1), (2, 2), (3, 3)):
        assert plan_steps(quickstart_config(epochs=epochs), train)[3] == warmup
    assert plan_steps(quickstart_config(epochs=3, warmup_epochs=2), train)[3] == 38
    with pytest.raises(ValueError, match=r"warmup_epochs \(3 epochs, 57 steps\) must be shorter"):
        plan_steps(quickstart_config(epochs=3, warmup_epochs=3), train)
    for recipe, n in (("pretrain", 1131), ("finetune", 1131), ("pretrain_mpp", 1257)):
        config = presets.get_config(recipe)
        assert plan_steps(config, n)[3] == 100  # the preset's own 100 steps
        short = dict(config, epochs=1, steps=None) if config["epochs"] else dict(config, steps=20)
        total, warmup = plan_steps(short, n)[2:]
        assert 0 < warmup < total  # scaled, never the whole run
        assert plan_steps(dict(short, warmup_steps=3, warmup_fraction=None), n)[3] == 3


@backend_independent  # config merging only
def test_an_explicit_warm_up_replaces_the_presets_in_every_unit(tmp_path):
    from keras_vit.cli.app import build_parser
    from keras_vit.cli.config import config_from_args
    from keras_vit.runner import presets

    def config(*argv, recipe="pretrain-mae"):
        args = build_parser().parse_args([recipe, *argv])
        return config_from_args(presets.recipe(recipe.replace("-", "_")), recipe, args)

    paper = config("--preset", "paper")
    assert paper["warmup_epochs"] == 40  # MAE's 40 warm-up epochs
    given = config("--preset", "paper", "--warmup-steps", "5")
    assert (given["warmup_steps"], given["warmup_epochs"]) == (5, None)  # not silently ignored
    digits = config("--warmup-steps", "7", recipe="pretrain")
    assert (digits["warmup_steps"], digits["warmup_fraction"]) == (7, None)


def test_a_run_whose_loss_becomes_nan_stops_and_claims_no_result(tmp_path, capsys):
    """The battery's `--weight-decay inf` class at a finite value: AdamW's decay of 1e30 sends the
    weights to inf within two steps. The run stops at the first non-finite loss, exits 2 with
    one line, and writes no model.keras and no metrics.json."""
    pytest.importorskip("tensorflow")
    out = tmp_path / "run"
    argv = ["pretrain", "--smoke", "--weight-decay", "1e30", "--epochs", "1",
            "--steps-per-epoch", "4", "--validation-fraction", "0", "--verbose", "0",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 2
    err = error_of(capsys)
    assert "Training diverged: the loss became nan" in err or "loss became inf" in err, err
    assert "weight_decay=1e+30 (--weight-decay)" in err and "--overwrite" in err
    assert not (out / "model.keras").exists() and not (out / "metrics.json").exists()
    assert not (out / "backup" / "latest.weights.h5").exists()  # no backup of diverged weights
