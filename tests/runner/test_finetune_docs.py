"""Every `keras-vit finetune --init ...` command of README.md and docs/training.md runs, as
written, against tiny checkpoints the test makes: local files, and timm names and Hugging Face
repo ids served by a loopback Hub (tests/weights/hub_server.py) with their real names (issue 56:
`--init <timm or Hugging Face name>` failed on the default settings because the digits preset's
model sizes were applied to the checkpoint).

Only what a test machine cannot hold is changed in each command: the data (a small synthetic
set instead of `folder:/data/pets`), image sizes above 64 px divided by 8 (224 -> 28, 384 -> 48,
the same patch grids' shape), the output folder (under the test's), and a one-step run
(`--epochs 1 --steps-per-epoch 1 --warmup-steps 0`); the paper-scale experiment file's command
is left out. The commands run in one fresh process (huggingface_hub reads
`HF_ENDPOINT` when first imported), on one backend: what is checked (the architecture comes from
the checkpoint, nothing of the preset's applies) is backend-independent, and each backend's
numerics of these loaders are tested elsewhere.
"""

import json
import os
import shlex
import subprocess
import sys
import textwrap

import keras
import pytest

import keras_vit
from tests.helpers import randomize_weights
from tests.weights.hub_server import HubServer

pytest.importorskip("huggingface_hub")
pytest.importorskip("tensorflow")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Widths every name's head count divides (vit_base: 12 heads, DINOv2 S: 6, vit_tiny: 3).
TINY = dict(num_layers=1, hidden_dim=48, mlp_dim=96)


def documented_commands(sharded=False):
    """`(page, command)` of every `keras-vit finetune ... --init ...` line of the pages' shell
    blocks (`tests.test_docs.command_lines`: continuations joined, comments dropped); with
    `sharded`, the lines of sharded runs (`--distribution`) only, else the others."""
    from tests.test_docs import command_lines

    found = []
    for page in ("README.md", os.path.join("docs", "training.md")):
        with open(os.path.join(ROOT, page), encoding="utf-8") as f:
            lines = command_lines(f.read())
        # A paper-scale experiment file (`--config recipes/..._b16.py`: ViT-B at 224 px, a
        # data-parallel bf16 run) is not for a test machine; its file is read in
        # tests/cli/test_cli.py::test_every_experiment_file_reads_with_known_keys.
        # A sharded run (`--distribution fsdp|tensor_parallel|fsdp_tp --mesh AxB`) needs JAX on
        # several devices, not this test's one PyTorch process: those lines run in
        # test_every_documented_sharded_init_command_runs.
        found += [(page, line) for line in lines if line.startswith("keras-vit finetune")
                  and "--init" in line and "--config" not in line
                  and ("--distribution" in line) == sharded]  # fmt: skip
    return found


def _shrunk(command, out_root):
    """The command's arguments, shrunk to a test-sized run (see the module docstring)."""
    args = shlex.split(command)[2:]
    shrunk, i = [], 0
    while i < len(args):
        flag = args[i]
        value = args[i + 1] if i + 1 < len(args) else None
        if flag == "--dataset":
            value = "synthetic:3:24:32"
        elif flag == "--image-size" and int(value) > 64:
            value = str(int(value) // 8)
        elif flag == "--out":
            value = os.path.join(out_root, value)
        elif flag == "--teacher":
            value = "teacher.keras"
        if value is not None and not value.startswith("--"):
            shrunk += [flag, value]
            i += 2
        else:
            shrunk.append(flag)
            i += 1
    if "--dataset" not in shrunk:
        shrunk += ["--dataset", "synthetic:3:24:32"]
    batch = "6" if "--repeated-augmentation" in shrunk else "4"
    run = ["--epochs", "1", "--steps-per-epoch", "1", "--batch-size", batch, "--warmup-steps", "0"]
    return ["finetune", *shrunk, *run, "--validation-fraction", "0", "--verbose", "0"]


def _timm_repo(tmp_path, arch, tag, **tiny):
    model = keras_vit.from_timm(arch, num_classes=0, **(tiny or TINY))
    randomize_weights(model, seed=1)
    path = tmp_path / f"{arch}.safetensors"
    keras_vit.export_timm(model, str(path), config_json=str(tmp_path / f"{arch}.json"))
    files = {"model.safetensors": path.read_bytes(),
             "config.json": (tmp_path / f"{arch}.json").read_bytes()}  # fmt: skip
    return f"timm/{arch}.{tag}", files


def _huggingface_repo(tmp_path):
    # A stand-in for google/vit-base-patch16-224 whose patch divides the shrunk 224 px (28).
    model = keras_vit.ViT("mu/14", image_size=28, num_classes=5, hidden_dim=48, num_heads=2)
    randomize_weights(model, seed=2)
    keras_vit.export_huggingface(model, str(tmp_path / "hf"))
    folder = tmp_path / "hf"
    return {name: (folder / name).read_bytes() for name in os.listdir(folder)}


def _local_files(cwd):
    """The local checkpoints the commands name, tiny, under `cwd`."""
    for path in ("runs/pre/model.keras", "runs/digits_pre/model.keras"):
        os.makedirs(cwd / os.path.dirname(path), exist_ok=True)
        keras_vit.ViT("mu/4", image_size=16, num_classes=10, representation_size=32).save(
            cwd / path
        )
    for path in ("runs/mpp/encoder.keras", "runs/mae/encoder.keras"):
        os.makedirs(cwd / os.path.dirname(path), exist_ok=True)
        keras_vit.ViT("mu/4", image_size=16, include_top=False, pooling=None).save(cwd / path)
    keras_vit.ViT("mu/4", image_size=24, num_classes=3).save(cwd / "teacher.keras")
    base = keras_vit.from_timm("vit_base_patch16_224", num_classes=0, **TINY)
    keras_vit.export_timm(base, str(cwd / "vit_base.safetensors"))
    keras_vit.from_timm("eva02_tiny_patch14_224", num_layers=1, hidden_dim=48, num_heads=3).save(
        cwd / "eva02.keras"
    )


CLIENT = """
    import json, sys
    import keras_vit
    from keras_vit.cli import main
    results = []
    for argv in json.load(open(sys.argv[1])):
        results.append(main(argv))
    print("RESULT" + json.dumps(results))
"""


def _run_commands(argvs, tmp_path, server, cwd, **env):
    """Runs `keras-vit` with each of `argvs` in one fresh process (CLIENT) in `cwd`, against the
    loopback Hub `server` (`env`: more variables); returns `(exit codes, stderr)`."""
    (tmp_path / "argv.json").write_text(json.dumps(argvs))
    env = {**os.environ, "PYTHONPATH": ROOT, "HF_ENDPOINT": server.url,
           "HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_DISABLE_TELEMETRY": "1",
           "HF_HUB_DISABLE_XET": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", **env}  # fmt: skip
    env.pop("HF_HUB_OFFLINE", None)
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CLIENT), str(tmp_path / "argv.json")],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    line = [x for x in run.stdout.splitlines() if x.startswith("RESULT")]
    assert line, run.stderr[-4000:]
    return json.loads(line[0][len("RESULT") :]), run.stderr


@pytest.mark.slow  # ten tiny fine-tuning runs in one fresh process (300 s on 2 busy cores)
@pytest.mark.skipif(keras.backend.backend() != "torch", reason="runs once: torch compiles least")
def test_every_documented_init_command_runs(tmp_path):
    commands = documented_commands()
    names = " ".join(command for _, command in commands)
    for needed in ("vit_small_patch14_dinov2.lvd142m", "google/vit-base-patch16-224",
                   "vit_tiny_patch16_224.augreg_in21k_ft_in1k", "--timm-name"):  # fmt: skip
        assert needed in names, f"the docs no longer show {needed}"
    server = HubServer().start()
    try:
        for arch, tag in (("vit_small_patch14_dinov2", "lvd142m"),
                          ("vit_tiny_patch16_224", "augreg_in21k_ft_in1k")):  # fmt: skip
            server.add_commit(*_timm_repo(tmp_path, arch, tag))
        server.add_commit("google/vit-base-patch16-224", _huggingface_repo(tmp_path))
        cwd = tmp_path / "cwd"
        cwd.mkdir()
        _local_files(cwd)
        argvs = [_shrunk(command, str(tmp_path / "out")) for _, command in commands]
        codes, stderr = _run_commands(argvs, tmp_path, server, cwd)
    finally:
        server.stop()
    failed = [(page, command) for (page, command), code in zip(commands, codes, strict=True)
              if code != 0]  # fmt: skip
    assert not failed, (failed, stderr[-4000:])
    for argv in argvs:
        out = argv[argv.index("--out") + 1]
        with open(os.path.join(out, "metrics.json")) as f:
            metrics = json.load(f)
        model = metrics["model"]
        assert metrics["config"]["model"] is None and metrics["config"]["model_overrides"] == {}
        assert model["name"] != "vit_b16", model  # the checkpoint's name, not a fallback's


@pytest.mark.slow  # a sharded one-step run on 8 virtual devices in a fresh JAX process
@pytest.mark.skipif(keras.backend.backend() != "jax", reason="the command names KERAS_BACKEND=jax")
def test_every_documented_sharded_init_command_runs(tmp_path):
    """docs/training.md's `KERAS_BACKEND=jax keras-vit finetune --init <timm name> --distribution
    fsdp_tp --mesh 4x2` runs as written (shrunk as above) on 8 virtual CPU devices, the name
    served by the loopback Hub: the model comes from the checkpoint and is saved sharded
    (`model.sharded`, its tensor-parallel kernels in several blocks), and loads back."""
    from safetensors import safe_open

    from keras_vit.distribution.checkpoint import read_manifest
    from tests.helpers import xla_flags

    commands = documented_commands(sharded=True)
    assert any("--distribution fsdp_tp --mesh 4x2" in c for _, c in commands), commands
    server = HubServer().start()
    try:
        # 16 heads as vit_large's (the model axis of 2 divides them), widths a test can hold.
        server.add_commit(*_timm_repo(tmp_path, "vit_large_patch16_224", "augreg_in21k",
                                      num_layers=1, hidden_dim=64, mlp_dim=128))  # fmt: skip
        argvs = [_shrunk(command, str(tmp_path / "out")) for _, command in commands]
        codes, stderr = _run_commands(argvs, tmp_path, server, tmp_path,
                                      KERAS_BACKEND="jax", XLA_FLAGS=xla_flags(8))  # fmt: skip
    finally:
        server.stop()
    assert codes == [0] * len(argvs), stderr[-4000:]
    for argv in argvs:
        out = argv[argv.index("--out") + 1]
        with open(os.path.join(out, "metrics.json")) as f:
            metrics = json.load(f)
        assert metrics["model"]["name"] != "vit_b16", metrics["model"]
        assert not os.path.exists(os.path.join(out, "model.keras"))
        folder = os.path.join(out, "model.sharded")
        manifest = read_manifest(folder)
        blocks = []
        for name in manifest["files"]:
            with safe_open(os.path.join(folder, name), framework="numpy") as part:
                blocks += list(part.keys())
        assert len(blocks) > len(manifest["groups"]["weights"]), "nothing was split"
        model = keras_vit.load_model(folder)  # one device here
        assert model.config.hidden_dim == 64 and model.config.num_heads == 16
