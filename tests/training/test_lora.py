"""LoRA (`keras_vit.training.lora`): Keras' `enable_lora` on the blocks' projections, checked
against a NumPy merge of the low-rank update into the kernels, on a tiny ViT (width 32, 2 layers,
16 px)."""

import os
import re

import keras
import numpy as np
import pytest

from keras_vit.models.vit import ViT
from keras_vit.saving import load_model
from keras_vit.training.lora import (
    TARGETS,
    enable_lora,
    get_lora_settings,
    max_rank,
    merge_lora,
    merged_copy,
)
from keras_vit.training.lora_files import load_lora_weights, save_lora_weights
from tests.helpers import randomize_weights, to_numpy

IMAGES = np.random.default_rng(7).uniform(-1, 1, (3, 16, 16, 3)).astype("float32")


@pytest.fixture(scope="module")
def base_weights():
    model = ViT("mu/8", image_size=16, num_classes=3)
    randomize_weights(model, seed=3)
    return [to_numpy(w) for w in model.weights]


def _model(weights, **kwargs):
    model = ViT("mu/8", image_size=16, num_classes=3, **kwargs)
    model.set_weights(weights)
    return model


def _randomize_lora(model, seed=5):
    """What training would do: nonzero A and B on every adapted layer."""
    rng = np.random.default_rng(seed)
    for w in model.weights:
        if "lora_kernel" in w.path:
            w.assign(rng.normal(0, 0.3, tuple(w.shape)).astype("float32"))


def _lora_layers(model):
    return [layer for layer in model._flatten_layers() if getattr(layer, "lora_enabled", False)]


def test_enable_lora_keeps_outputs_and_trains_only_adapters_and_head(base_weights):
    model = _model(base_weights)
    before = to_numpy(model(IMAGES))
    enable_lora(model, rank=2)
    np.testing.assert_allclose(to_numpy(model(IMAGES)), before, atol=1e-6)  # B starts at zero
    paths = sorted(w.path for w in model.trainable_weights)
    expected = sorted(
        f"encoderblock_{i}/attention/{t}/lora_kernel_{ab}"
        for i in range(2)
        for t in ("query", "value")
        for ab in "ab"
    ) + ["head/bias", "head/kernel"]
    assert paths == expected
    assert get_lora_settings(model) == {"rank": 2, "alpha": 2.0, "targets": ("query", "value")}
    # query/key/value kernels are (D, heads, D / heads): A (32, 2, rank), B (rank, 16).
    query = model.get_layer("encoderblock_0").attention.query_dense
    assert tuple(query.lora_kernel_a.shape) == (32, 2, 2)
    assert tuple(query.lora_kernel_b.shape) == (2, 16)


@pytest.mark.parametrize("targets", [("query", "value"), TARGETS])
def test_lora_outputs_equal_numpy_merged_kernels(base_weights, targets):
    # A trained adapter changes the outputs on every backend (the attention calls its
    # EinsumDense layers, and PyTorch's fused path steps aside while LoRA is on), and by
    # exactly W + alpha / rank * A @ B, merged here in NumPy into a plain model.
    model = enable_lora(_model(base_weights), rank=2, targets=targets, alpha=6.0)
    _randomize_lora(model)
    out = to_numpy(model(IMAGES))
    reference = _model(base_weights)
    for layer, plain in zip(model._flatten_layers(), reference._flatten_layers(), strict=True):
        if getattr(layer, "lora_enabled", False):
            a, b = to_numpy(layer.lora_kernel_a), to_numpy(layer.lora_kernel_b)
            delta = np.tensordot(a, b, axes=1) * (6.0 / 2)
            plain.kernel.assign(to_numpy(plain.kernel) + delta)  # W from the base weights
    assert len(_lora_layers(model)) == 2 * len(targets)
    expected = to_numpy(reference(IMAGES))
    assert np.abs(expected - to_numpy(_model(base_weights)(IMAGES))).max() > 1e-2
    np.testing.assert_allclose(out, expected, atol=1e-5, rtol=1e-5)


def test_fit_updates_only_adapters_and_head(base_weights):
    model = enable_lora(_model(base_weights), rank=2)
    frozen = {w.path: to_numpy(w) for w in model.weights if not w.trainable}
    model.compile(
        keras.optimizers.Adam(1e-2), keras.losses.CategoricalCrossentropy(from_logits=True)
    )
    labels = np.eye(3, dtype="float32")[[0, 1, 2]]
    model.fit(IMAGES, labels, batch_size=3, epochs=2, verbose=0)
    for w in model.weights:
        if w.path in frozen:
            np.testing.assert_array_equal(to_numpy(w), frozen[w.path], err_msg=w.path)
    b = model.get_layer("encoderblock_1").attention.value_dense.lora_kernel_b
    assert np.abs(to_numpy(b)).max() > 0


def test_bad_arguments_name_expected_and_received(base_weights):
    model = _model(base_weights)
    with pytest.raises(ValueError, match=r"targets must be.*'mlp_dense_2'.*Received.*'qkv'"):
        enable_lora(model, 2, targets=("query", "qkv"))
    with pytest.raises(ValueError, match="rank must be a positive integer. Received: rank=0"):
        enable_lora(model, 0)
    with pytest.raises(ValueError, match="alpha must be a positive number"):
        enable_lora(model, 2, alpha=-1)
    with pytest.raises(ValueError, match="no TransformerBlock"):
        enable_lora(keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]), 2)
    assert not _lora_layers(model) and all(w.trainable for w in model.weights)
    enable_lora(model, 2)
    with pytest.raises(ValueError, match="already enabled"):
        enable_lora(model, 4)


@pytest.mark.parametrize("targets", [("query", "value"), ("mlp_dense_1",), ("attention_output",)])
def test_rank_above_what_a_target_can_use_is_refused(base_weights, targets):
    """A rank above min(inputs, outputs) of a target's update only adds parameters: refused,
    naming the layer and the bound, with the model left as it was."""
    model = _model(base_weights)
    block = model.get_layer("encoderblock_0")
    layer = {
        "query": block.attention.query_dense,
        "mlp_dense_1": block.mlp_dense_1,
        "attention_output": block.attention.output_dense,
    }[targets[0]]
    kernel = tuple(layer.kernel.shape)
    top = max_rank(layer)
    assert top == min(int(np.prod(kernel[:-1])), kernel[-1])
    with pytest.raises(
        ValueError, match=r"rank must be at most \d+ for layer .*Received: rank=1000"
    ):
        enable_lora(model, 1000, targets=targets)
    assert not _lora_layers(model) and all(w.trainable for w in model.weights)
    with pytest.raises(ValueError, match=f"rank must be at most {top} "):
        enable_lora(model, top + 1, targets=targets)
    enable_lora(model, top, targets=targets)  # the bound itself is fine
    assert get_lora_settings(model)["rank"] == top


def test_truncated_or_damaged_lora_file_names_it_and_changes_nothing(base_weights, tmp_path):
    source = enable_lora(_model(base_weights), rank=2)
    _randomize_lora(source)
    path = save_lora_weights(source, tmp_path / "r2.lora.npz")
    data = open(path, "rb").read()
    truncated = tmp_path / "truncated.lora.npz"
    truncated.write_bytes(data[: len(data) // 2])
    model = _model(base_weights)
    before = [to_numpy(w).copy() for w in model.weights]
    with pytest.raises(ValueError, match=re.escape(repr(str(truncated)))):
        load_lora_weights(model, truncated)
    with pytest.raises(IsADirectoryError, match="is a folder"):
        load_lora_weights(model, tmp_path)
    with np.load(path) as stored:
        arrays = dict(stored)
    for dtype in (bool, "complex64"):
        key = next(k for k in arrays if k.endswith("lora_kernel_a"))
        damaged = dict(arrays, **{key: arrays[key].astype(dtype)})
        bad = tmp_path / f"{np.dtype(dtype).name}.lora.npz"
        np.savez(bad, **damaged)
        with pytest.raises(ValueError, match=f"{re.escape(repr(str(bad)))}.*{key} holds"):
            load_lora_weights(model, bad)
    assert not _lora_layers(model)
    for old, new in zip(before, model.weights, strict=True):
        np.testing.assert_array_equal(old, to_numpy(new))


def test_keras_file_round_trip_keeps_outputs(base_weights, tmp_path):
    # Keras writes the merged kernels (W + scale * A @ B) into the .keras file: it loads as a
    # plain model with the LoRA model's outputs.
    model = enable_lora(_model(base_weights), rank=2, targets=("query", "mlp_dense_1"))
    _randomize_lora(model)
    path = str(tmp_path / "lora.keras")
    model.save(path)
    loaded = load_model(path)
    np.testing.assert_allclose(to_numpy(loaded(IMAGES)), to_numpy(model(IMAGES)), atol=1e-5)
    assert get_lora_settings(loaded) is None


def test_lora_weights_file_round_trip_onto_base_model(base_weights, tmp_path):
    model = enable_lora(_model(base_weights), rank=2, targets=("key", "mlp_dense_2"), alpha=4)
    _randomize_lora(model)
    model.get_layer("head").kernel.assign(np.full((32, 3), 0.1, "float32"))
    path = save_lora_weights(model, tmp_path / "adapter.lora.npz")
    with np.load(path, allow_pickle=False) as data:
        stored = sorted(k for k in data.files if not k.startswith("__lora__"))
    assert stored == sorted(w.path for w in model.trainable_weights)
    # The adapters and head only: far smaller than the model.
    assert os.path.getsize(path) < 0.3 * sum(4 * np.prod(w.shape) for w in model.weights)
    base = _model(base_weights)
    load_lora_weights(base, path)
    assert get_lora_settings(base) == {"rank": 2, "alpha": 4.0, "targets": ("key", "mlp_dense_2")}
    np.testing.assert_allclose(to_numpy(base(IMAGES)), to_numpy(model(IMAGES)), atol=1e-6)


def test_mismatched_lora_file_errors_and_leaves_model_untouched(base_weights, tmp_path):
    source = enable_lora(_model(base_weights), rank=2)
    _randomize_lora(source)
    path = save_lora_weights(source, tmp_path / "r2.lora.npz")

    def state(model):
        return [(w.path, to_numpy(w)) for w in model.weights]

    def check_untouched(model, before):
        after = state(model)
        assert [p for p, _ in after] == [p for p, _ in before]
        for (p, a), (_, b) in zip(after, before, strict=True):
            np.testing.assert_array_equal(a, b, err_msg=p)

    other_rank = enable_lora(_model(base_weights), rank=4)
    before = state(other_rank)
    with pytest.raises(ValueError, match=r"differ from the file's.*'rank': 2.*'rank': 4"):
        load_lora_weights(other_rank, path)
    check_untouched(other_rank, before)

    other_targets = enable_lora(_model(base_weights), rank=2, targets=("query", "key"))
    with pytest.raises(ValueError, match="differ from the file's"):
        load_lora_weights(other_targets, path)

    wider = ViT("mu/8", image_size=16, num_classes=3, hidden_dim=48, mlp_dim=64, num_heads=2)
    before = state(wider)
    with pytest.raises(ValueError, match=r"other shapes.*expected \(48, 2, 2\), received"):
        load_lora_weights(wider, path)
    check_untouched(wider, before)
    assert get_lora_settings(wider) is None

    deeper = ViT("mu/8", image_size=16, num_classes=3, num_layers=3)
    with pytest.raises(ValueError, match="lacks LoRA weights.*encoderblock_2"):
        load_lora_weights(deeper, path)
    assert not _lora_layers(deeper)

    garbage = tmp_path / "garbage.npz"
    np.savez(garbage, x=np.zeros(2))
    with pytest.raises(ValueError, match="not a LoRA weights file"):
        load_lora_weights(_model(base_weights), garbage)
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, obj=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ValueError, match="not a LoRA weights file"):
        load_lora_weights(_model(base_weights), pickled)


def test_merge_lora_gives_plain_model_with_same_outputs(base_weights):
    model = enable_lora(_model(base_weights), rank=2, targets=TARGETS, alpha=3)
    _randomize_lora(model)
    out = to_numpy(model(IMAGES))
    copy = merged_copy(model)  # the exporters' copy: the model keeps its adapters
    assert _lora_layers(model) and not _lora_layers(copy)
    np.testing.assert_allclose(to_numpy(copy(IMAGES)), out, atol=1e-5)
    assert merge_lora(model) is model
    assert get_lora_settings(model) is None and not _lora_layers(model)
    assert not any("lora" in w.path for w in model.weights)
    assert len(model.weights) == len(_model(base_weights).weights)
    np.testing.assert_allclose(to_numpy(model(IMAGES)), out, atol=1e-5)


@pytest.mark.parametrize("attention_type", ["differential"])  # fused out_proj (CI time)
def test_parallel_scaling_block_targets(attention_type):
    """A ParallelScalingBlock's Dense layers: in_proj, attention_out / mlp_out or out_proj."""
    model = ViT("mu/8", image_size=16, num_classes=3, num_layers=1,
                block_kind="parallel_scaling", attention_type=attention_type)  # fmt: skip
    randomize_weights(model, seed=4)
    before = to_numpy(model(IMAGES))
    with pytest.raises(ValueError, match="has no LoRA target 'query'; its targets are"):
        enable_lora(model, rank=2)
    fused = attention_type == "differential"
    targets = ("in_proj", "out_proj") if fused else ("in_proj", "attention_out", "mlp_out")
    enable_lora(model, rank=2, targets=targets)
    assert get_lora_settings(model)["targets"] == targets
    np.testing.assert_allclose(to_numpy(model(IMAGES)), before, rtol=1e-6, atol=1e-6)
    _randomize_lora(model)
    adapted = to_numpy(model(IMAGES))
    merge_lora(model)
    assert not _lora_layers(model)
    np.testing.assert_allclose(to_numpy(model(IMAGES)), adapted, rtol=1e-5, atol=1e-5)
