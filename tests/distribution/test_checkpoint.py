"""Sharded checkpoints (`keras_vit/distribution/checkpoint.py`) and the runner's use of them.

In this process, on every backend (one device, nothing sharded: the format is portable): a
round trip of a model and its optimizer (and of bfloat16 weights), `keras_vit.load_model` of
the folder (a LoRA model's: the merged model), and the refusals (an existing folder, a user's
folder where it would be staged, a model that does not fit, a damaged, incomplete or
contradicting checkpoint: each field of the index and each block), each before anything is
written or assigned; `--overwrite` removes only a sharded checkpoint's own files; `keras-vit
export` and `convert --to timm` of the folder.

On 8 virtual CPU devices (JAX, one child process): a `pretrain` run on a (2, 4) `fsdp_tp` mesh
interrupted by Ctrl-C after its first epoch's backup (written sharded) resumes on a (4, 2) mesh
and ends with the losses and weights of an uninterrupted run; its `model.sharded` and
`checkpoints/last.sharded` (with AdamW's state) load onto an `fsdp` (8, 1) mesh and onto no
distribution alike, each byte read once; a masked autoencoder sharded over the mesh writes its
encoder as `encoder.sharded`; a LoRA model's saved form (adapters merged) stays sharded.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.distribution.checkpoint import (
    MANIFEST,
    fingerprint,
    is_sharded_checkpoint,
    load_sharded,
    read_manifest,
    save_sharded,
)
from keras_vit.weights.state_dict import read_safetensors, write_safetensors
from tests.helpers import backend_independent, xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _model(num_layers=1):
    model = keras_vit.ViT("mu/8", image_size=16, num_classes=3, num_layers=num_layers)
    model.compile(keras.optimizers.AdamW(1e-2), "categorical_crossentropy")
    return model


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A one-block model whose weights and AdamW state (moments, a step count of 3) are drawn
    at random (no compiled step), saved sharded with its optimizer."""
    rng = np.random.default_rng(0)
    model = _model()
    model.optimizer.build(model.trainable_variables)
    for variable in [*model.weights, *model.optimizer.variables]:
        value = rng.normal(0, 1, variable.shape) if "float" in variable.dtype else 3
        variable.assign(np.asarray(value).astype(variable.dtype))
    folder = save_sharded(model, tmp_path_factory.mktemp("ckpt") / "run")
    return model, folder


def test_round_trip_with_the_optimizer_and_load_model(trained):
    model, folder = trained
    assert is_sharded_checkpoint(folder) and fingerprint(folder)
    assert sorted(os.listdir(folder)) == ["process-00000-of-00001.safetensors", MANIFEST]
    assert "compile_config" not in read_manifest(folder)["model"]  # built uncompiled
    other = _model()
    load_sharded(other, folder)
    for a, b in zip(model.weights, other.weights, strict=True):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))
    for a, b in zip(model.optimizer.variables, other.optimizer.variables, strict=True):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))
    assert int(keras.ops.convert_to_numpy(other.optimizer.iterations)) == 3
    loaded = keras_vit.load_model(folder)  # the saved config, then the weights
    assert type(loaded).__name__ == "VisionTransformer"
    assert loaded.get_config() == model.get_config()
    from keras_vit.runner.init_checkpoint import load_init_model

    init, kind = load_init_model({"init": str(folder)})  # --init a sharded run's model.sharded
    assert kind == "keras"
    for a, b, c in zip(model.weights, loaded.weights, init.weights, strict=True):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(c))


def test_a_lora_models_saved_form_is_the_merged_model(tmp_path):
    """As `model.save()`: `keras_vit.load_model` of a LoRA model's `model.sharded` gives the
    plain model, each adapted kernel `W + alpha / rank * A @ B` (NumPy)."""
    from keras_vit.runner.backup import sharded_form
    from keras_vit.training.lora import enable_lora

    model = enable_lora(keras_vit.ViT("mu/8", image_size=16, num_classes=3, num_layers=1), 2)
    rng = np.random.default_rng(0)
    for variable in model.weights:
        if "lora" in variable.path:  # B starts at zero: the merge would change nothing
            variable.assign(rng.normal(0, 0.1, variable.shape).astype("float32"))
    saved, with_optimizer = sharded_form(model)
    assert saved is not model and not with_optimizer
    loaded = keras_vit.load_model(save_sharded(saved, tmp_path / "lora"))
    source = {v.path: keras.ops.convert_to_numpy(v) for v in model.weights}
    assert len(loaded.weights) == len(source) - 4  # no A, B on query and value
    for variable in loaded.weights:
        expected = source[variable.path]
        layer = variable.path.rsplit("/", 1)[0]
        if f"{layer}/lora_kernel_a" in source and variable.path.endswith("/kernel"):
            a, b = source[f"{layer}/lora_kernel_a"], source[f"{layer}/lora_kernel_b"]
            expected = expected + (2 / 2) * (a @ b)  # alpha 2 (the rank), rank 2
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(variable), expected, rtol=1e-5, atol=1e-6
        )


def test_bfloat16_weights_round_trip(tmp_path):
    def dense():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, dtype="bfloat16")])
        model.layers[0].kernel.assign(rng.normal(0, 1, (3, 4)))
        return model

    rng = np.random.default_rng(0)
    model, other = dense(), dense()
    folder = save_sharded(model, tmp_path / "bf16")
    index = json.loads((tmp_path / "bf16" / MANIFEST).read_text())
    assert [e["dtype"] for e in index["groups"]["weights"]] == ["bfloat16", "bfloat16"]

    def values(m):
        return [keras.ops.convert_to_numpy(keras.ops.cast(w, "float32")) for w in m.weights]

    assert not np.array_equal(values(model)[0], values(other)[0])
    load_sharded(other, folder)
    for a, b in zip(values(model), values(other), strict=True):
        np.testing.assert_array_equal(a, b)


def test_refusals_come_before_anything_changes(trained, tmp_path):
    model, folder = trained
    with pytest.raises(FileExistsError, match="Pass overwrite=True"):
        save_sharded(model, folder)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("a user's")
    with pytest.raises(FileExistsError, match="is not a sharded checkpoint"):
        save_sharded(model, mine, overwrite=True)
    assert os.listdir(mine) == ["notes.txt"]
    # A user's folder where save_sharded would stage (`.<name>.partial`) is never replaced.
    staged = tmp_path / ".new.partial"
    staged.mkdir()
    (staged / "notes.txt").write_text("a user's")
    with pytest.raises(FileExistsError, match=r"\.new\.partial.*Move it away"):
        save_sharded(model, tmp_path / "new")
    assert os.listdir(staged) == ["notes.txt"] and not (tmp_path / "new").exists()

    deeper = _model(num_layers=2)
    before = [keras.ops.convert_to_numpy(w) for w in deeper.weights]
    with pytest.raises(ValueError, match=r"does not fit model .* the checkpoint holds \d+ "):
        load_sharded(deeper, folder)
    wider = keras_vit.ViT("mu/8", image_size=16, num_classes=5, num_layers=1)
    with pytest.raises(ValueError, match=r"'head/kernel' has shape \(32, 5\)"):
        load_sharded(wider, folder)
    for a, b in zip(before, deeper.weights, strict=True):
        np.testing.assert_array_equal(a, keras.ops.convert_to_numpy(b))
    with pytest.raises(FileNotFoundError, match="has no sharded.json"):
        load_sharded(deeper, tmp_path)



def test_export_reads_a_sharded_folder_and_refuses_what_it_cannot_export(trained, tmp_path, capsys):
    """`keras-vit export model.sharded OUT` (a sharded run's final model, `export_saved_model`
    underneath): the folder is read onto one device where the model is traced (this process on
    TensorFlow, the TensorFlow subprocess on JAX and PyTorch) and the SavedModel computes the
    saved model's logits; `keras-vit convert model.sharded OUT --to timm` writes its state
    dict. Refused before anything is written: a folder that is no checkpoint,
    a checkpoint without a model config, a masked autoencoder's (no image-to-logits graph)."""
    from keras_vit.cli.app import main
    from keras_vit.export import export_saved_model

    tf = pytest.importorskip("tensorflow", reason="SavedModel export needs TensorFlow")
    model, folder = trained
    out = tmp_path / "serving"
    assert main(["export", str(folder), str(out)]) == 0
    images = np.random.default_rng(1).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    served = tf.saved_model.load(str(out)).signatures["serving_default"](images=tf.constant(images))
    expected = keras.ops.convert_to_numpy(model(images, training=False))
    np.testing.assert_allclose(served["logits"].numpy(), expected, rtol=1e-5, atol=1e-5)
    timm_file = tmp_path / "timm.safetensors"  # `convert --to timm` of the folder
    assert main(["convert", str(folder), str(timm_file), "--to", "timm"]) == 0
    head = keras.ops.convert_to_numpy(model.get_layer("head").kernel)
    np.testing.assert_array_equal(read_safetensors(timm_file)["head.weight"], head.T)

    capsys.readouterr()
    assert main(["export", str(tmp_path), str(tmp_path / "a")]) != 0
    assert "or a sharded run's checkpoint folder (model.sharded" in capsys.readouterr().err
    bare = _tampered(folder, tmp_path / "bare", manifest=lambda m: m.update(model=None))
    with pytest.raises(ValueError, match="holds weights without a model config"):
        export_saved_model(str(bare), tmp_path / "b")

    def autoencoder(manifest):
        manifest["model"]["class_name"] = "MaskedAutoencoder"

    mae = _tampered(folder, tmp_path / "mae", manifest=autoencoder)
    with pytest.raises(ValueError, match="Received: a MaskedAutoencoder"):
        export_saved_model(str(mae), tmp_path / "c")
    assert not any((tmp_path / name).exists() for name in "abc")


PART = "process-00000-of-00001.safetensors"


def _tampered(folder, target, manifest=None, blocks=None):
    """A copy of the checkpoint `folder` at `target`, its index edited by `manifest(dict)` and
    its blocks by `blocks(dict) -> dict` (the index then records the part's new size)."""
    shutil.copytree(folder, target)
    index = json.loads((target / MANIFEST).read_text())
    if blocks is not None:
        write_safetensors(blocks(read_safetensors(target / PART)), target / PART)
        index["files"][PART] = os.path.getsize(target / PART)
    if manifest is not None:
        manifest(index)
    (target / MANIFEST).write_text(json.dumps(index))
    return target


def _head_key(blocks):
    return next(k for k, v in blocks.items() if k.startswith("weights/") and v.shape == (32, 3))


def _head_at(blocks, bounds):
    """The head kernel's block name with other `bounds`."""
    return _head_key(blocks).rsplit("/", 1)[0] + "/" + bounds


def _edit(blocks, key, new_key, value):
    return {(new_key if k == key else k): (value if k == key else v) for k, v in blocks.items()}


# (what is edited, the expected message): a damaged or contradicting folder, named.
DAMAGE = {
    "truncated part": (None, None, r"incomplete or damaged: process-00000-of-00001"),
    "not JSON": ("text", None, r"sharded.json' is damaged .* not valid JSON"),
    "version": (lambda m: m.update(version=99), None, "format version 99"),
    "a file outside": (
        lambda m: m.update(files={"../x.safetensors": 10}), None, r"its files must be \["
    ),
    "a shape": (
        lambda m: m["groups"]["weights"][0].update(shape=[-1]), None, r"weights\[0\] .* shape"
    ),
    "a dtype": (
        lambda m: m["groups"]["weights"][0].update(dtype="object"), None, "dtype 'object'"
    ),
    "a code path": (lambda m: m["groups"]["weights"].append("os.system"), None, "an object"),
    "out of bounds": (
        None, lambda b: _edit(b, _head_key(b), _head_at(b, "0:32,0:4"), b[_head_key(b)]),
        r"block 'weights/\d+/0:32,0:4' lies outside head/kernel \(32, 3\)",
    ),
    "a block's shape": (
        None, lambda b: _edit(b, _head_key(b), _head_key(b), b[_head_key(b)][:16]),
        r"holds an array of shape \(16, 3\)",
    ),
    "a block's dtype": (
        None, lambda b: _edit(b, _head_key(b), _head_key(b), b[_head_key(b)].astype("float16")),
        r"is F16; .* is float32",
    ),
    "no block name": (
        None, lambda b: _edit(b, _head_key(b), "head", b[_head_key(b)]), "'head' is no block name"
    ),
    "a block of no variable": (
        None, lambda b: {**b, "weights/999/0:1": b[_head_key(b)][:1, 0]}, "names no variable"
    ),
    "a block missing": (
        None, lambda b: {k: v for k, v in b.items() if k != _head_key(b)},
        r"blocks of weights 'head/kernel' \(32, 3\) hold 0 of its 96 values",
    ),
}  # fmt: skip


def test_damaged_or_contradicting_folders_are_named_and_change_nothing(trained, tmp_path):
    model, folder = trained
    target = _model()
    before = [keras.ops.convert_to_numpy(w) for w in target.weights]
    for case, (manifest, blocks, message) in DAMAGE.items():
        copy = _tampered(folder, tmp_path / case.replace(" ", "_"), None, blocks)
        if case == "truncated part":
            (copy / PART).write_bytes((copy / PART).read_bytes()[:-8])
        elif manifest == "text":
            (copy / MANIFEST).write_text("{'format': ")
        elif manifest is not None:
            index = json.loads((copy / MANIFEST).read_text())
            manifest(index)
            (copy / MANIFEST).write_text(json.dumps(index))
        with pytest.raises(ValueError, match=message):
            load_sharded(target, copy)
        if case in ("truncated part", "version"):
            assert fingerprint(copy) is None  # never taken as a backup
    for a, b in zip(before, target.weights, strict=True):
        np.testing.assert_array_equal(a, keras.ops.convert_to_numpy(b))
    # Two blocks over the same values: refused even when their sizes add up.
    def overlap(blocks):
        key, second = _head_key(blocks), _head_at(blocks, "8:24,0:3")
        head = blocks[key]
        return {**_edit(blocks, key, _head_at(blocks, "0:16,0:3"), head[:16]), second: head[8:24]}

    copy = _tampered(folder, tmp_path / "overlap", None, overlap)
    with pytest.raises(ValueError, match=r"blocks .* of head/kernel overlap"):
        load_sharded(target, copy)
    # A model config that is no ViTConfig: refused naming the file, before Keras builds it.
    def bad_config(index):
        index["model"]["config"]["config"]["hidden_dim"] = "big"

    copy = _tampered(folder, tmp_path / "config", bad_config)
    with pytest.raises(ValueError, match=r"sharded.json: its config.json does not describe"):
        keras_vit.load_model(copy)


@backend_independent
def test_overwrite_removes_only_a_runs_sharded_files(tmp_path):
    """`--overwrite` (keras_vit.runner.run_files) removes a sharded run's checkpoint files by
    name, and keeps a user's file inside them."""
    from keras_vit.runner.run_files import remove_run_entries, run_entries

    for folder in ("model.sharded", "backup/latest.sharded", "checkpoints/.last.sharded.partial"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / MANIFEST).write_text("{}")
        (tmp_path / folder / PART).write_bytes(b"")
    (tmp_path / "model.sharded" / "notes.txt").write_text("a user's")
    (tmp_path / "mine.sharded").mkdir()
    assert run_entries(tmp_path) == [
        "backup/latest.sharded", "checkpoints/.last.sharded.partial", "model.sharded"
    ]  # fmt: skip
    remove_run_entries(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["mine.sharded", "model.sharded"]
    assert os.listdir(tmp_path / "model.sharded") == ["notes.txt"]


SCRIPT = textwrap.dedent(
    """
    import contextlib, os, signal, tempfile
    import numpy as np
    import jax
    import keras
    import keras_vit
    from keras_vit import distribution as kd
    from keras_vit.distribution.checkpoint import load_sharded, read_manifest
    from keras_vit.models.mae import build_mae_model, extract_mae_encoder
    from keras_vit.runner import pretrain, pretrain_mpp
    from keras_vit.weights import lazy

    assert len(jax.devices()) == 8
    work = tempfile.mkdtemp()
    # A 2-block width-32 model with 4 heads: tensor parallelism splits it over 4 or 2 devices.
    BASE = dict(
        model="mu/4", model_overrides=dict(num_heads=4), image_size=16,
        representation_size=None, batch_size=16, epochs=2, steps=None, steps_per_epoch=2,
        warmup_steps=1, validation_freq=0, eval_batch_size=200, verbose=0, crop_scale=(1, 1),
        crop_ratio=(1, 1), rotation=0.0, flip=False, dropout_rate=0.0, tensorboard=False,
    )

    class CtrlC(keras.callbacks.Callback):  # after the runner's own callbacks: the backup
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 0:
                os.kill(os.getpid(), signal.SIGINT)

    def run(out, mesh, callbacks=()):
        config = pretrain.get_config(smoke=True)
        config.update(BASE, out=out, distribution="fsdp_tp", mesh=mesh)
        return pretrain.run(config, callbacks=callbacks)

    out, ref_out = os.path.join(work, "run"), os.path.join(work, "ref")
    try:
        run(out, "2x4", [CtrlC()])
        raise AssertionError("not interrupted")
    except KeyboardInterrupt:
        pass
    backup = os.path.join(out, "backup")
    assert "latest.sharded" in os.listdir(backup), os.listdir(backup)
    assert "model.sharded" not in os.listdir(out)
    resumed = run(out, "4x2")  # another mesh shape
    assert resumed["resumed_at_epoch"] == 1
    assert sorted(os.listdir(out)) == [
        ".keras_vit_run.json", "checkpoints", "log.csv", "metrics.json", "model.sharded"
    ], os.listdir(out)
    assert os.listdir(os.path.join(out, "checkpoints")) == ["last.sharded"]
    ref = run(ref_out, "2x4")
    np.testing.assert_allclose(resumed["history"]["loss"], ref["history"]["loss"][1:], rtol=1e-5)
    np.testing.assert_allclose(resumed["test_loss"], ref["test_loss"], rtol=1e-5)

    def values(variables):
        return [np.asarray(v) for v in variables]

    def load(folder, scope):
        with scope:
            start = lazy.STATISTICS["bytes_read"]
            model = keras_vit.load_model(folder)
            read = lazy.STATISTICS["bytes_read"] - start
        return model, read

    fsdp = kd.model_parallel("fsdp", mesh_shape=(8, 1), min_shard_bytes=256)
    a, _ = load(os.path.join(out, "model.sharded"), fsdp.scope())
    assert any(v.value.sharding.spec and v.value.sharding.spec[0] == "batch" for v in a.weights)
    b, read = load(os.path.join(ref_out, "model.sharded"), contextlib.nullcontext())
    assert read == sum(np.asarray(v).nbytes for v in b.weights), read  # each byte once
    worst = max(float(np.abs(x - y).max()) for x, y in zip(values(a.weights), values(b.weights)))
    assert worst <= 1e-5, worst

    # checkpoints/last.sharded holds AdamW's state: the same on another mesh as on none.
    last = os.path.join(ref_out, "checkpoints", "last.sharded")
    assert "optimizer" in read_manifest(last)["groups"]
    states = []
    for mesh in ("fsdp 8x1", None):
        with fsdp.scope() if mesh else contextlib.nullcontext():
            model = keras_vit.load_model(os.path.join(ref_out, "model.sharded"))
            # As the runner's: a schedule (no learning-rate variable).
            schedule = keras.optimizers.schedules.CosineDecay(1e-3, 10)
            model.compile(keras.optimizers.AdamW(schedule), "mse")
            load_sharded(model, last)
            states.append(values(model.weights) + values(model.optimizer.variables))
    for x, y in zip(*states):
        np.testing.assert_array_equal(x, y)
    assert int(states[0][len(b.weights)]) == 4  # the optimizer's step count: 2 epochs x 2
    print("RUNNER OK")

    # A masked autoencoder sharded over the mesh: its encoder written sharded, as extracted.
    class Setup:
        out, num_processes = work, 1

    options = dict(image_size=16, decoder_hidden_dim=16, decoder_num_layers=1,
                   decoder_num_heads=4, decoder_mlp_dim=32, num_layers=1, num_heads=4)
    with kd.model_parallel("fsdp_tp", mesh_shape=(2, 4), min_shard_bytes=256).scope():
        mae = build_mae_model("mu/4", **options)
        for v in mae.weights:
            v.assign(np.random.default_rng(len(v.path)).normal(0, 1, v.shape).astype("float32"))
        _, info = pretrain_mpp.write_encoder(mae, Setup, extract_mae_encoder)
    assert info["encoder_path"].endswith("encoder.sharded"), info
    encoder = keras_vit.load_model(info["encoder_path"])
    for x, y in zip(values(encoder.weights), values(mae.encoder.weights)):
        np.testing.assert_array_equal(x, y)
    print("MAE OK")

    # A LoRA model's saved form (the adapters merged, as model.save()) stays on the layouts.
    from keras_vit.distribution.checkpoint import is_sharded_model
    from keras_vit.runner.backup import sharded_form
    from keras_vit.training.lora import enable_lora

    with kd.model_parallel("fsdp_tp", mesh_shape=(2, 4), min_shard_bytes=256).scope():
        vit = keras_vit.ViT("mu/4", image_size=16, num_classes=4, num_layers=1, num_heads=4)
        enable_lora(vit, 2)
        for v in vit.weights:
            v.assign(np.full(v.shape, 0.1, "float32") if "lora" in v.path else v.value)
        merged, _ = sharded_form(vit)
        assert is_sharded_model(merged)
        folder = kd.save_sharded(merged, os.path.join(work, "lora.sharded"))
    loaded = keras_vit.load_model(folder)
    for x, y in zip(values(loaded.weights), values(merged.weights)):
        np.testing.assert_array_equal(x, y)
    print("LORA OK")
    """
)


@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() != "jax", reason="keras.distribution shards on JAX")
def test_sharded_runs_resume_on_another_mesh():
    """Three short runs (two compiled meshes) and a few loads in one child process (slow: JAX's
    start-up and XLA compilation for 8 devices dominate)."""
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "jax",
           "XLA_FLAGS": xla_flags(8)}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    for stage in ("RUNNER OK", "MAE OK", "LORA OK"):
        assert stage in proc.stdout, (stage, proc.stdout[-2000:])
