"""Recipes on several processes: local JAX processes on 127.0.0.1 against one process.

The subprocess tests run on the JAX backend only (keras.distribution's multi-process runtime;
gloo collectives between CPU processes). Each launch picks a free port, is bounded in time, and
kills its process groups when it ends, whatever happens. The model is the smoke size (mu/4,
16 px), with deterministic preprocessing, so that the weights of one and two processes compare.
The in-process tests (clear errors before anything connects) run on every backend.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import keras
import numpy as np
import pytest

pytest.importorskip("tensorflow")

from keras_vit.cli import main  # noqa: E402
from keras_vit.runner.run_files import MARKER  # noqa: E402
from keras_vit.saving import load_model  # noqa: E402
from tests.helpers import xla_flags  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JAX_ONLY = pytest.mark.skipif(
    keras.backend.backend() != "jax",
    reason="several processes train through keras.distribution, which Keras implements for JAX",
)
LAUNCH_TIMEOUT = 300  # seconds for a whole launch (imports and XLA compilation included)

# The smoke run with deterministic preprocessing, 3 epochs of 4 steps (global batch 32), and an
# evaluation batch (200) that does not divide the 540 held-out digits: the padded, weighted
# evaluation of several processes is compared with one process's plain one.
CONFIG = {
    "RECIPE": "pretrain",
    "CONFIG": {
        "model": "mu/4", "model_overrides": {}, "image_size": 16, "representation_size": 32,
        "batch_size": 32, "epochs": 3, "steps": None, "steps_per_epoch": 4, "warmup_steps": 1,
        "validation_freq": 3, "eval_batch_size": 200, "verbose": 0,
        "crop_scale": [1, 1], "crop_ratio": [1, 1], "rotation": 0.0, "flip": False,
        "dropout_rate": 0.0,
    },
}
# The deterministic flags, given on the command line as a user would.
DETERMINISTIC = ["--crop-scale", "1,1", "--crop-ratio", "1,1", "--rotation", "0", "--no-flip",
                 "--dropout", "0"]


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(commands, logs, timeout=LAUNCH_TIMEOUT, devices=None):
    """Runs `commands` (argv lists) at once; returns `[(returncode, output, seconds)]`.

    Each process leads its own process group (`start_new_session`); any still running at the
    deadline or when this function leaves (an exception included) is killed with its group.
    `devices`: the virtual CPU devices of each process (one for None), or a list of one count
    per command.
    """
    env = {**os.environ, "PYTHONPATH": ROOT, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "3"}
    for name in ("KERAS_DISTRIBUTION_JOB_ADDRESSES", "KERAS_DISTRIBUTION_NUM_PROCESSES",
                 "KERAS_DISTRIBUTION_PROCESS_ID", "TF_CONFIG"):
        env.pop(name, None)
    if not isinstance(devices, list):
        devices = [devices] * len(commands)
    procs, files = [], []
    start = time.monotonic()
    try:
        for argv, log, count in zip(commands, logs, devices, strict=True):
            files.append(open(log, "w"))
            procs.append(subprocess.Popen(  # (one CPU device by default; the tests' options)
                argv, env={**env, "XLA_FLAGS": xla_flags(count)}, stdout=files[-1],
                stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT,
            ))
        ended = {}
        while len(ended) < len(procs) and time.monotonic() - start < timeout:
            for i, proc in enumerate(procs):
                if i not in ended and proc.poll() is not None:
                    ended[i] = time.monotonic() - start
            time.sleep(0.2)
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for f in files:
            f.close()
    results = []
    for i, (proc, log) in enumerate(zip(procs, logs, strict=True)):
        with open(log) as f:
            results.append((proc.returncode, f.read(), ended.get(i, float("inf"))))
    return results


def cli(*args):
    return [sys.executable, "-m", "keras_vit", "pretrain", *args]


def cluster(port, index, processes=2):
    return ["--job-addresses", f"127.0.0.1:{port}", "--num-processes", str(processes),
            "--process-id", str(index), "--init-timeout", "120"]


def check_ok(results):
    for code, output, _ in results:
        assert code == 0, output[-3000:]


def weights(path):
    return [keras.ops.convert_to_numpy(w) for w in load_model(path).weights]


def assert_same_weights(a, b, rtol=1e-5):
    """Relative difference of the whole weight vector <= rtol: max |a - b| / max |a|.

    Not tensor by tensor: the attention's key bias has a zero gradient in exact arithmetic
    (softmax ignores a shift shared by all keys), so it holds rounding noise (1e-7) whose
    relative difference between any two summation orders is of order 1.
    """
    flat_a = np.concatenate([w.ravel() for w in weights(a)])
    flat_b = np.concatenate([w.ravel() for w in weights(b)])
    assert flat_a.shape == flat_b.shape
    difference = np.abs(flat_a - flat_b).max() / np.abs(flat_a).max()
    assert difference <= rtol, difference


def metrics(out):
    with open(os.path.join(out, "metrics.json")) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def config_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("config") / "smoke.json"
    path.write_text(json.dumps(CONFIG))
    return str(path)


@pytest.fixture(scope="module")
def one_process(config_file, tmp_path_factory):
    """The reference: the same run in one process, no distribution."""
    out = str(tmp_path_factory.mktemp("one") / "run")
    check_ok(launch([cli("--config", config_file, *DETERMINISTIC, "--out", out)],
                    [out + ".log"]))
    return out


@pytest.mark.slow
@JAX_ONLY
def test_two_processes_train_to_the_weights_of_one(config_file, one_process, tmp_path):
    port = free_port()
    out, elsewhere = str(tmp_path / "run"), str(tmp_path / "process1")
    results = launch(
        [cli("--config", config_file, *DETERMINISTIC, "--distribution", "data_parallel",
             *cluster(port, 0), "--out", out),
         # Process 1 gets its own --out: it must write nothing, not even create the folder.
         cli("--config", config_file, *DETERMINISTIC, "--distribution", "data_parallel",
             *cluster(port, 1), "--out", elsewhere)],
        [str(tmp_path / "p0.log"), str(tmp_path / "p1.log")],
    )
    check_ok(results)
    assert not os.path.exists(elsewhere)
    assert "(2 processes, 2 devices)" in results[0][1] and "pretrain:" not in results[1][1]
    assert sorted(os.listdir(out)) == [  # the run marker (process 0's) and the run's files
        MARKER, "checkpoints", "log.csv", "logs", "metrics.json", "model.keras"
    ]
    assert_same_weights(os.path.join(one_process, "model.keras"), os.path.join(out, "model.keras"))
    one, two = metrics(one_process), metrics(out)
    assert (two["num_processes"], two["num_devices"]) == (2, 2)
    assert (one["num_processes"], one["num_devices"]) == (1, 1)
    # The same batches in the same order: the same per-epoch losses; the evaluation covers the
    # 540 held-out digits once (padded to 600 in two processes, the padding weighing 0).
    np.testing.assert_allclose(two["history"]["loss"], one["history"]["loss"], rtol=1e-5)
    for key in ("test_loss", "test_accuracy"):
        np.testing.assert_allclose(two[key], one[key], rtol=1e-5, err_msg=key)
    assert two["config"]["batch_size"] == 32  # the global batch


KILL_SCRIPT = textwrap.dedent(
    """
    import json, os, signal, sys
    import keras
    from keras_vit.runner import pretrain

    config_file, out, index, port, kill = sys.argv[1:6]

    class KillAfterFirstEpoch(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):  # after the backup (written by process 0)
            if kill == "kill" and epoch == 0:
                os.kill(os.getpid(), signal.SIGKILL)

    config = pretrain.get_config()
    with open(config_file) as f:
        config.update(json.load(f)["CONFIG"])
    config.update(
        crop_scale=tuple(config["crop_scale"]), crop_ratio=tuple(config["crop_ratio"]), out=out,
        distribution="model_parallel", job_addresses=f"127.0.0.1:{port}", num_processes=2,
        process_id=int(index), init_timeout=120,
    )
    pretrain.run(config, callbacks=[KillAfterFirstEpoch()])
    """
)


@pytest.mark.slow
@JAX_ONLY
def test_model_parallel_over_two_processes_killed_and_resumed(config_file, one_process, tmp_path):
    """The library path: ModelParallel shards the attention and MLP kernels over the two
    processes; both are killed after the first epoch's backup (a sharded checkpoint: each
    process wrote its own blocks), restarted, and finish with the weights of one process."""
    out = str(tmp_path / "run")

    def run(mode):
        port = free_port()
        return launch(
            [[sys.executable, "-c", KILL_SCRIPT, config_file, out, str(i), str(port), mode]
             for i in (0, 1)],
            [str(tmp_path / f"{mode}{i}.log") for i in (0, 1)],
        )

    killed = run("kill")
    assert [code for code, _, _ in killed] == [-signal.SIGKILL] * 2, killed[0][1][-3000:]
    assert sorted(os.listdir(os.path.join(out, "backup", "latest.sharded"))) == [
        "process-00000-of-00002.safetensors", "process-00001-of-00002.safetensors", "sharded.json"
    ]  # fmt: skip
    assert not os.path.exists(os.path.join(out, "model.sharded"))
    resumed = run("resume")
    check_ok(resumed)
    assert "Resuming from the backup" in resumed[0][1]
    assert not os.path.exists(os.path.join(out, "backup"))
    with open(os.path.join(out, "log.csv")) as f:
        assert [row.split(",")[0] for row in f.read().split()[1:]] == ["0", "1", "2"]
    assert metrics(out)["resumed_at_epoch"] == 1
    # model.sharded: each process wrote its blocks; read here whole, on one device.
    sharded = os.path.join(out, "model.sharded")
    assert_same_weights(os.path.join(one_process, "model.keras"), sharded)


@pytest.mark.slow
@JAX_ONLY
def test_joining_fails_clearly_within_the_timeout(config_file, tmp_path):
    """A coordinator nobody runs, processes started with different counts, --multi-host with no
    cluster to detect: clear errors, well within the bound (--init-timeout 10 s, plus start-up)."""
    args = ["--config", config_file, "--distribution", "data_parallel", "--init-timeout", "10"]
    lonely, pair = free_port(), free_port()
    results = launch(
        [cli(*args, "--job-addresses", f"127.0.0.1:{lonely}", "--num-processes", "2",
             "--process-id", "1", "--out", str(tmp_path / "a")),
         cli(*args, "--job-addresses", f"127.0.0.1:{pair}", "--num-processes", "2",
             "--process-id", "0", "--out", str(tmp_path / "b")),
         cli(*args, "--job-addresses", f"127.0.0.1:{pair}", "--num-processes", "3",
             "--process-id", "1", "--out", str(tmp_path / "b")),
         cli(*args, "--multi-host", "--out", str(tmp_path / "c"))],
        [str(tmp_path / f"{i}.log") for i in range(4)],
        timeout=120,
    )
    code, output, seconds = results.pop()  # --multi-host where JAX detects no cluster
    assert code == 2 and "JAX found no cluster to join here" in output, output[-2000:]
    code, output, seconds = results[0]
    assert code == 1 and seconds < 100, output[-2000:]
    assert "could not join the others within 10 s" in output
    assert f"nothing answers at the coordinator address 127.0.0.1:{lonely}" in output
    for code, output, seconds in results[1:]:
        assert code == 2 and seconds < 100, output[-2000:]
        assert "different numbers of processes (process 0: 2, process 1: 3)" in output
    assert not os.path.exists(tmp_path / "b")  # stopped before process 0 made its --out


# A tiny timm ViT (width 32, 4 heads, MLP 64, one block, patch 8 at 16 px: 60 KB of tensors)
# whose every variable the rules shard (min_shard_bytes=0), the heads and widths divisible by
# the model axis (4) and the data axis (2).
TINY_TIMM = ("vit_tiny_patch16_224", dict(image_size=16, num_classes=4, num_layers=1,
                                          hidden_dim=32, num_heads=4, mlp_dim=64, patch_size=8))

FSDP_TP_SCRIPT = textwrap.dedent(
    """
    import contextlib, json, sys
    import numpy as np
    import keras
    import keras_vit
    from keras_vit.training import multihost
    from keras_vit.weights import lazy

    name, options, checkpoint, port, index = sys.argv[1:6]
    options, port, index = json.loads(options), int(port), int(index)
    if port:  # two processes: join before anything runs on JAX
        multihost.initialize(multihost.cluster_spec(f"127.0.0.1:{port}", 2, index), timeout=120)
    rng = np.random.default_rng(0)  # the same global batch in every process
    x = rng.uniform(-1, 1, (8, 16, 16, 3)).astype("float32")
    y = np.eye(4, dtype="float32")[rng.integers(0, 4, 8)]
    distribution = keras_vit.distribution.model_parallel(
        "fsdp_tp", mesh_shape=(2, 4), min_shard_bytes=0)

    def local(array):
        # This process's rows of the global batch: Keras' JAX trainer takes each process's
        # batch as its part of the global one (jax.make_array_from_process_local_data).
        sharding = distribution.get_data_layout(array.shape).backend_layout
        rows = [i[0].indices(len(array)) for i in
                sharding.addressable_devices_indices_map(array.shape).values()]
        return array[min(r[0] for r in rows):max(r[1] for r in rows)]

    def train(scope, local=lambda array: array):
        with scope:
            start = lazy.STATISTICS["bytes_read"]
            model = keras_vit.from_timm(name, checkpoint=checkpoint, **options)
            read = lazy.STATISTICS["bytes_read"] - start
            model.compile(keras.optimizers.SGD(0.1),
                          keras.losses.CategoricalCrossentropy(from_logits=True))
            return [float(model.train_on_batch(local(x), local(y))) for _ in range(3)], read

    losses, read = train(distribution.scope(), local)
    result = {"losses": losses, "bytes_read": read, "processes": multihost.process_count()}
    if not port:  # the reference: one device, no distribution
        result["reference"] = train(contextlib.nullcontext())[0]
    print("RESULT " + json.dumps(result), flush=True)
    """
)


@pytest.mark.slow
@JAX_ONLY
def test_fsdp_tp_over_two_processes_reads_its_shards_and_trains_as_one(tmp_path):
    """FSDP + tensor parallelism on a (2, 4) mesh over two processes of 4 virtual CPU devices,
    joined by `jax.distributed` on 127.0.0.1: loading a timm checkpoint, each process reads
    only (about) its half of the tensors (each holds one half of the data axis), the two
    together about the file; 3 SGD steps on one global batch give the losses of one process
    of 8 devices on the same mesh (which reads every tensor byte once), and those equal the
    losses of one device without any distribution."""
    import keras_vit
    from keras_vit.weights import lazy
    from tests.helpers import randomize_weights

    name, options = TINY_TIMM
    model = keras_vit.from_timm(name, **options)
    randomize_weights(model, scale=0.1)  # (0.2: logits so large that the steps diverge)
    checkpoint = str(tmp_path / "model.safetensors")
    keras_vit.export_timm(model, checkpoint)
    total = sum(t.nbytes for t in lazy.open_safetensors(checkpoint).values())
    port = free_port()
    argv = [sys.executable, "-c", FSDP_TP_SCRIPT, name, json.dumps(options), checkpoint]
    # All three at once (one process of 8 devices, two of 4): one start-up's wait, not two.
    results = launch(
        [[*argv, "0", "0"], [*argv, str(port), "0"], [*argv, str(port), "1"]],
        [str(tmp_path / f"{run}.log") for run in ("one", "two0", "two1")],
        devices=[8, 4, 4],
    )
    check_ok(results)
    one, *two = [json.loads(output.split("RESULT ", 1)[1].splitlines()[0])
                 for _, output, _ in results]
    assert one["processes"] == 1 and [r["processes"] for r in two] == [2, 2]
    assert one["losses"][2] < one["losses"][0] - 0.1, one  # the steps train
    # The same program on the same mesh (measured: the same losses to the last bit; one device
    # without distribution sums in another order: 2e-7 relative).
    np.testing.assert_allclose(one["losses"], one["reference"], rtol=1e-5)
    for result in two:
        np.testing.assert_allclose(result["losses"], one["losses"], rtol=1e-5)
    # One process holds every block: each tensor byte read once. Two: each reads its half of
    # the data axis, plus the few variables sharded over the model axis alone (the position
    # embedding, the MLP's and the head's biases), which both processes hold whole (measured:
    # 30864 of the 60432 bytes each; 192 of them because a block of part of a head's bias is
    # no slice of timm's fused qkv bias, which each process then reads whole, once).
    assert one["bytes_read"] == total, (one["bytes_read"], total)
    read = [r["bytes_read"] for r in two]
    assert all(r < 0.75 * total for r in read), (read, total)
    assert total <= sum(read) <= 1.3 * total, (read, total)


# --- clear errors before anything connects (every backend, in this process) -------------------


@pytest.fixture
def no_cluster_variables(monkeypatch):
    for name in ("KERAS_DISTRIBUTION_JOB_ADDRESSES", "KERAS_DISTRIBUTION_NUM_PROCESSES",
                 "KERAS_DISTRIBUTION_PROCESS_ID", "TF_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def error(capsys):
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    return err


def test_cluster_mistakes_are_usage_errors(no_cluster_variables, tmp_path, capsys):
    out = ["--smoke", "--out", str(tmp_path / "run")]
    assert main(["pretrain", *out, "--job-addresses", "127.0.0.1:1", "--num-processes", "2",
                 "--process-id", "2", "--distribution", "data_parallel"]) == 2
    assert "process_id must be in [0, num_processes - 1] = [0, 1]" in error(capsys)
    assert main(["pretrain", *out, "--num-processes", "2", "--process-id", "1",
                 "--distribution", "data_parallel"]) == 2
    assert "missing: --job-addresses (KERAS_DISTRIBUTION_JOB_ADDRESSES)" in error(capsys)
    no_cluster_variables.setenv("KERAS_DISTRIBUTION_NUM_PROCESSES", "3")
    assert main(["finetune", *out, "--job-addresses", "h:1,h:2", "--process-id", "0",
                 "--distribution", "data_parallel"]) == 2
    assert "name 2 processes but num_processes is 3" in error(capsys)
    no_cluster_variables.delenv("KERAS_DISTRIBUTION_NUM_PROCESSES")
    assert main(["pretrain", *out, "--job-addresses", "10.0.0.1"]) == 2
    assert "argument --job-addresses: expected HOST:PORT" in error(capsys)
    assert not os.path.exists(tmp_path / "run")


def test_several_processes_need_jax_and_a_distribution(no_cluster_variables, tmp_path, capsys):
    argv = ["pretrain-mpp", "--smoke", "--out", str(tmp_path / "run"), "--job-addresses",
            "127.0.0.1:1", "--num-processes", "2", "--process-id", "1"]
    backend = keras.backend.backend()
    if backend == "jax":  # (with a distribution it would connect: tested in subprocesses)
        assert main(argv) == 2
        assert "pass --distribution data_parallel" in error(capsys)
    else:
        assert main([*argv, "--distribution", "data_parallel"]) == 2
        assert "Run with KERAS_BACKEND=jax" in error(capsys)
    if backend == "tensorflow":
        workers = {"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
                   "task": {"type": "worker", "index": 0}}
        no_cluster_variables.setenv("TF_CONFIG", json.dumps(workers))
        assert main(["pretrain", "--smoke", "--out", str(tmp_path / "run")]) == 2
        err = error(capsys)
        assert "TF_CONFIG describes 2 TensorFlow workers" in err and "KERAS_BACKEND=jax" in err
    assert not os.path.exists(tmp_path / "run")


def test_fewshot_runs_in_one_process(no_cluster_variables, tmp_path, capsys):
    no_cluster_variables.setenv("KERAS_DISTRIBUTION_NUM_PROCESSES", "2")
    assert main(["fewshot", "--smoke", "--out", str(tmp_path / "run")]) == 2
    assert "Few-shot evaluation runs in one process" in error(capsys)
    assert not os.path.exists(tmp_path / "run")
