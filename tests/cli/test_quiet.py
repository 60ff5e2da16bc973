"""The quiet and quick command line (keras_vit/cli/quiet.py and the lazy package imports):
`--help` and usage errors load no framework; a run shows only keras_vit's own output unless
`--debug`; keras_vit's warnings print once each, without their source file and line."""

import json
import os
import subprocess
import sys
import textwrap
import warnings

from keras_vit.cli import COMMANDS
from keras_vit.cli.quiet import quiet
from tests.helpers import backend_independent

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FRAMEWORKS = ("keras", "tensorflow", "jax", "torch")


def _python(code, **env):
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=ROOT, **env),
        timeout=300,
    )
    return result


USAGE = [
    ["--help"],
    *[[name, "--help"] for name in COMMANDS],
    [],
    ["nope"],
    ["finetune", "--bogus"],
    ["pretrain", "--steps", "0"],
    ["pretrain", "--steps", "2", "--epochs", "1"],
    ["finetune", "--augment", "keras_cv.RandAugment("],
    ["finetune", "--augment", "randaugment", "--job-addresses", "nohost"],
    ["finetune", "--lora-rank", "two"],
    ["convert"],
    ["quickstart", "--epochs", "-1"],
]


@backend_independent  # the subprocess loads no framework (asserted): KERAS_BACKEND is unread
def test_help_and_usage_errors_import_no_framework():
    """Every command's --help and a range of rejected flag values answer with no framework in
    sys.modules (so well under a second, and without their start-up lines)."""
    result = _python(
        f"""
        import json, sys
        from keras_vit.cli import main
        codes = []
        for argv in {USAGE!r}:
            try:
                codes.append(main(argv))
            except SystemExit as exit_:
                codes.append(exit_.code)
        loaded = [m for m in {FRAMEWORKS!r} if m in sys.modules]
        print("RESULT" + json.dumps([codes, loaded]))
        """
    )
    line = [x for x in result.stdout.splitlines() if x.startswith("RESULT")]
    assert line, result.stderr
    codes, loaded = json.loads(line[0][len("RESULT") :])
    assert loaded == [], f"--help / usage errors imported {loaded}"
    help_count = 1 + len(COMMANDS)
    assert codes[:help_count] == [0] * help_count and all(c == 2 for c in codes[help_count:])
    assert "I0000" not in result.stderr and "absl" not in result.stderr


def test_importing_keras_vit_loads_no_framework_until_a_name_is_used():
    result = _python(
        f"""
        import sys, keras_vit
        assert keras_vit.__version__
        print([m for m in {FRAMEWORKS!r} if m in sys.modules])
        from keras_vit import ViT, enable_lora, inspection
        print(ViT.__name__, enable_lora.__name__, inspection.__name__, "keras" in sys.modules)
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[]", "ViT enable_lora keras_vit.inspection True"]


# Not backend-independent: TensorFlow's own import loads Keras (and so the Keras backend's).
def test_framework_start_up_lines_show_only_with_debug():
    code = """
        import sys
        from keras_vit.cli.quiet import quiet
        with quiet("keras-vit test", debug={debug}):
            import tensorflow
            tensorflow.constant(1.0) + 1
        print("done", file=sys.stderr)
        """
    silent = _python(code.format(debug=False))
    assert silent.returncode == 0 and silent.stderr == "done\n", silent.stderr
    loud = _python(code.format(debug=True))
    assert loud.returncode == 0 and loud.stderr.endswith("done\n")
    assert len(loud.stderr) > len("done\n")  # TensorFlow's own start-up lines


def test_keras_vit_warnings_print_once_without_source_and_others_are_dropped(tmp_path, capsys):
    from keras_vit.runner.backup import find_backup

    backup = tmp_path / "backup"
    backup.mkdir()
    (backup / "training_metadata.json").write_text("{not json")
    with quiet("keras-vit pretrain", debug=False):
        assert find_backup(str(backup)) is None
        assert find_backup(str(backup)) is None  # the runner looks twice: one warning
        warnings.warn("a third-party warning", UserWarning, stacklevel=1)
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("keras-vit pretrain: warning: Damaged or unmatched backup files")
    assert "backup.py" not in err and ".py:" not in err and "third-party" not in err
