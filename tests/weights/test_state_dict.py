"""Tests for keras_vit/weights/state_dict.py: PyTorch-style state dicts read safely."""

import json
import struct
import sys

import numpy as np
import pytest

from keras_vit.weights import state_dict as sd
from keras_vit.weights.state_dict import read_safetensors, read_state_dict, write_safetensors

ARRAYS = {
    "blocks.0.attn.qkv.weight": np.arange(24, dtype="float32").reshape(6, 4) / 7,
    "half": np.linspace(-2, 2, 5).astype("float16"),
    "steps": np.array([1, -2, 3], dtype="int64"),
    "flags": np.array([True, False]),
    "scalar": np.array(2.5, dtype="float64"),
}


@pytest.fixture(params=["package", "numpy"])
def reader(request, monkeypatch):
    """Reads with the safetensors package (when installed) and with the NumPy reader."""
    if request.param == "package":
        pytest.importorskip("safetensors", reason="the safetensors package is not installed")
    else:
        monkeypatch.setitem(sys.modules, "safetensors", None)  # import fails: NumPy reader
    return request.param


def _bf16_bits(values):
    return (np.asarray(values, "float32").view("<u4") >> 16).astype("<u2")


def _write_raw(path, tensors):
    """A safetensors file from {name: (dtype name, shape, raw bytes)}, written by hand."""
    header, offset, data = {}, 0, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        data += raw
    encoded = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)) + encoded + data)
    return str(path)


def test_safetensors_round_trip(tmp_path, reader):
    path = write_safetensors(ARRAYS, tmp_path / "w.safetensors", metadata={"format": "pt"})
    arrays = read_safetensors(path)
    assert list(arrays) == list(ARRAYS) or set(arrays) == set(ARRAYS)
    for name, value in ARRAYS.items():
        assert arrays[name].dtype == value.dtype and arrays[name].shape == value.shape
        np.testing.assert_array_equal(arrays[name], value)


def test_bfloat16_is_widened_to_float32(tmp_path, reader):
    values = np.array([[1.0, -2.5, 3.14159], [1e-3, 65504.0, -0.1]], "float32")
    bits = _bf16_bits(values)
    path = _write_raw(tmp_path / "bf16.safetensors", {"w": ("BF16", [2, 3], bits.tobytes())})
    read = read_safetensors(path)["w"]
    assert read.dtype == np.float32 and read.shape == (2, 3)
    np.testing.assert_array_equal(read, (bits.astype("<u4") << 16).view("<f4"))
    np.testing.assert_allclose(read, values, rtol=1e-2)  # bf16 keeps ~3 significant digits


def test_bfloat16_matches_torch(tmp_path):
    torch = pytest.importorskip("torch")
    tensor = torch.randn(3, 4).bfloat16()
    bits = tensor.view(torch.int16).numpy().view("<u2")
    path = _write_raw(tmp_path / "t.safetensors", {"t": ("BF16", [3, 4], bits.tobytes())})
    np.testing.assert_array_equal(read_safetensors(path)["t"], tensor.float().numpy())
    # A dict of torch tensors (bfloat16 included) reads the same.
    np.testing.assert_array_equal(read_state_dict({"t": tensor})["t"], tensor.float().numpy())


def test_files_of_the_safetensors_package_read_with_numpy(tmp_path, monkeypatch):
    numpy_io = pytest.importorskip("safetensors.numpy")
    path = str(tmp_path / "pkg.safetensors")
    numpy_io.save_file({k: v for k, v in ARRAYS.items() if v.ndim}, path)
    monkeypatch.setitem(sys.modules, "safetensors", None)
    arrays = read_safetensors(path)
    for name, value in arrays.items():
        np.testing.assert_array_equal(value, ARRAYS[name])


_HEADER = b'{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}'  # 16 bytes, 8 present


@pytest.mark.parametrize(
    "content,reason",
    [
        (b"\x01\x02", "shorter than the 8-byte header length"),
        (struct.pack("<Q", 10**9) + b"{}", "does not fit"),
        (struct.pack("<Q", 4) + b"{no}", "JSON"),
        (struct.pack("<Q", len(_HEADER)) + _HEADER + b"\x00" * 8, "byte range"),
    ],
)
def test_corrupt_safetensors_names_the_file(tmp_path, reader, content, reason):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content)
    with pytest.raises(ValueError, match="bad.safetensors") as info:
        read_safetensors(path)
    if reader == "numpy":
        assert reason in str(info.value)


def test_unknown_safetensors_dtype(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "safetensors", None)
    path = _write_raw(tmp_path / "c.safetensors", {"z": ("C64", [1], b"\x00" * 8)})
    with pytest.raises(ValueError, match=r"dtype C64.*Expected one of"):
        read_safetensors(path)


def test_nesting_and_prefixes_are_unwrapped():
    weights = {"module.model.head.weight": np.ones((2, 3)), "module.model.head.bias": np.zeros(2)}
    arrays = read_state_dict({"state_dict": weights, "epoch": 7, "optimizer": {"lr": 0.1}})
    assert sorted(arrays) == ["head.bias", "head.weight"]
    # A prefix only some names carry stays.
    assert sorted(sd.unwrap({"model.a": np.ones(1), "b": np.ones(1)})) == ["b", "model.a"]
    with pytest.raises(ValueError, match=r"Found no arrays.*'epoch'"):
        read_state_dict({"epoch": 3})
    with pytest.raises(ValueError, match="Received: list"):
        read_state_dict([np.ones(2)])


def test_pytorch_files_load_with_weights_only(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "ckpt.pth"
    torch.save({"model": {"w": torch.arange(6.0).reshape(2, 3), "b": torch.ones(2).half()}}, path)
    arrays = read_state_dict(path)
    np.testing.assert_array_equal(arrays["w"], np.arange(6.0).reshape(2, 3))
    assert arrays["b"].dtype == np.float16
    # Pickled objects are refused (weights_only=True): data, never code.
    evil = tmp_path / "evil.bin"
    torch.save({"w": torch.ones(1), "payload": _Payload()}, evil)
    with pytest.raises(ValueError) as info:
        read_state_dict(evil)
    message = str(info.value)  # our own sentence: never PyTorch's advice to turn the check off
    assert "evil.bin" in message and "pickled Python objects besides tensors" in message
    assert "weights_only" not in message and message.endswith("or as .safetensors.")
    truncated = tmp_path / "cut.pt"
    truncated.write_bytes(path.read_bytes()[:50])
    with pytest.raises(ValueError, match=r"cut\.pt.*not a readable PyTorch checkpoint"):
        read_state_dict(truncated)
    with pytest.raises(IsADirectoryError, match="is a folder"):
        read_state_dict(str(tmp_path))


class _Payload:
    """Stands for an arbitrary pickled object in a checkpoint."""


def test_pytorch_file_without_torch_names_the_package(tmp_path, monkeypatch):
    path = tmp_path / "w.pth"
    path.write_bytes(b"anything")
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError, match="pip install torch"):
        read_state_dict(path)


def test_sharded_checkpoint(tmp_path):
    write_safetensors({"a": np.ones(2, "float32")}, tmp_path / "model-1.safetensors")
    write_safetensors({"b": np.zeros(3, "float32")}, tmp_path / "model-2.safetensors")
    index = tmp_path / "model.safetensors.index.json"
    weight_map = {"a": "model-1.safetensors", "b": "model-2.safetensors"}
    index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    assert sorted(read_state_dict(index)) == ["a", "b"]
    index.write_text(json.dumps({"weight_map": {"a": "../outside.safetensors"}}))
    with pytest.raises(ValueError, match=r"names the shard '\.\./outside\.safetensors'"):
        read_state_dict(index)


def test_bad_paths(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        read_state_dict(tmp_path / "missing.safetensors")
    with pytest.raises(IsADirectoryError, match="is a folder"):
        read_state_dict(tmp_path)
    (tmp_path / "w.txt").write_text("x")
    with pytest.raises(ValueError, match=r"Unknown checkpoint file type .*w\.txt.*\.safetensors"):
        read_state_dict(tmp_path / "w.txt")


def test_npz_files(tmp_path):
    np.savez(tmp_path / "w.npz", **{"params/a": np.ones(2)})
    assert list(read_state_dict(tmp_path / "w.npz")) == ["a"]
