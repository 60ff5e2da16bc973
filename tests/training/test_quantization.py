"""int8 and float8 quantization (`keras_vit.quantize`, Keras' `model.quantize`) of a tiny ViT
(width 32, 1 layer, 16 px): int8 outputs close to the float model's, quantized `.keras` files
that load back quantized, float8 training, clear errors."""

import keras
import numpy as np
import pytest

from keras_vit.layers import TransformerBlock
from keras_vit.models.vit import ViT
from keras_vit.saving import load_model
from keras_vit.training.lora import enable_lora
from keras_vit.training.quantization import quantization_modes, quantize
from tests.helpers import randomize_weights, to_numpy

IMAGES = np.random.default_rng(11).uniform(-1, 1, (16, 16, 16, 3)).astype("float32")
LABELS = np.eye(3, dtype="float32")[np.arange(16) % 3]


def _model(pooling="token", seed=3):
    # One block: every block quantizes the same way (Keras quantizes layer by layer, slowly on
    # TensorFlow: about a second per block).
    model = ViT("mu/8", image_size=16, num_classes=3, pooling=pooling, num_layers=1)
    randomize_weights(model, seed=seed)
    return model


# Keras 3.15's own MultiHeadAttention does not reload an int8-quantized .keras file (it rebuilds
# its EinsumDense sublayers with the float policy in build()); upstream reproduction:
#
#     x = keras.Input((4, 8))
#     model = keras.Model(x, keras.layers.MultiHeadAttention(2, 4)(x, x))
#     model.quantize("int8")
#     model.save("mha.keras")
#     keras.saving.load_model("mha.keras")
#     # ValueError: A total of 4 objects could not be loaded. ... Layer 'key' expected 2
#     # variables, but received 0 variables during loading. Expected: ['kernel', 'bias']
#
# Our TransformerBlock / MultiHeadSelfAttention / MAPHead record their quantized sublayers'
# policies in their configs (keras_vit/layers/_quantization.py), tested here.
@pytest.mark.parametrize("pooling", ["token", "map"])
def test_int8_close_to_float_and_keras_file_reloads_quantized(pooling, tmp_path):
    model = _model(pooling)  # never called before quantize (DropPath used to be unbuilt)
    reference = to_numpy(_model(pooling)(IMAGES))
    quantize(model, "int8")
    modes = quantization_modes(model)
    # 6 projections per block, the classifier; the MAP head's q, kv, out, 2 MLP denses.
    assert set(modes.values()) == {"int8"}
    assert len(modes) == 1 * 6 + 1 + (5 if pooling == "map" else 0)
    kernel = model.get_layer("encoderblock_0").attention.query_dense._kernel
    assert keras.backend.standardize_dtype(kernel.dtype) == "int8"
    out = to_numpy(model(IMAGES))
    # Per-channel int8 weights and per-token int8 inputs: a few % of the logits' range.
    assert np.abs(out - reference).max() < 0.05 * np.abs(reference).max()
    assert (out.argmax(-1) == reference.argmax(-1)).mean() >= 14 / 16
    path = str(tmp_path / "int8.keras")
    model.save(path)
    loaded = load_model(path)
    assert quantization_modes(loaded) == modes
    np.testing.assert_array_equal(to_numpy(loaded(IMAGES)), out)


def test_int8_block_built_without_call():
    block = TransformerBlock(num_heads=2, mlp_dim=64, drop_path_rate=0.1)
    block.build((None, 5, 32))
    model = keras.Sequential([block])  # the block's sublayers are quantized through the model
    model.build((None, 5, 32))
    quantize(model, "int8")
    assert block.mlp_dense_1.quantization_mode == "int8"
    config = block.get_config()
    clone = TransformerBlock.from_config(config)
    clone.build((None, 5, 32))
    assert clone.attention.value_dense.dtype_policy.name == "int8_from_float32"
    assert clone.get_config() == config


def test_float8_trains():
    # Emulated on CPU (casts around float32 products); float8 matrix units make it fast.
    model = _model()
    quantize(model, "float8")
    assert set(quantization_modes(model).values()) == {"float8"}
    model.compile(
        keras.optimizers.Adam(1e-3), keras.losses.CategoricalCrossentropy(from_logits=True)
    )
    losses = model.fit(IMAGES, LABELS, batch_size=16, epochs=3, verbose=0).history["loss"]
    assert np.isfinite(losses).all() and losses[-1] < losses[0], losses
    history = to_numpy(model.get_layer("head").inputs_amax_history)
    assert history.max() > 0  # the delayed scaling saw the inputs


def test_quantize_errors_name_expected_and_received():
    model = ViT("mu/8", image_size=16, num_classes=3, num_layers=1)
    with pytest.raises(ValueError, match=r"mode must be one of \('int8', 'float8'\). Received"):
        quantize(model, "int4")
    enable_lora(model, 2)
    with pytest.raises(ValueError, match="merge_lora"):
        quantize(model, "int8")
    model = quantize(ViT("mu/8", image_size=16, num_classes=3, num_layers=1), "int8")
    with pytest.raises(ValueError, match=r"already quantized \(\['int8'\]"):
        quantize(model, "float8")


@pytest.mark.parametrize(
    "options,count",
    [
        (dict(block_kind="parallel_scaling", attention_type="differential"), 2),  # in, out_proj
        # DifferentialAttention's q, k, v, out and the MLP's 2: about 10 s on a loaded CPU
        pytest.param(dict(attention_type="differential"), 6, marks=pytest.mark.slow),
    ],
)
def test_int8_parallel_scaling_and_differential_reload_quantized(options, count, tmp_path):
    """timm's ParallelScalingBlock / DiffAttention models: int8 Dense layers, `.keras` reload."""
    model = ViT("mu/8", image_size=16, num_classes=3, num_layers=1, **options)
    randomize_weights(model, seed=2)
    quantize(model, "int8")
    modes = quantization_modes(model)
    assert set(modes.values()) == {"int8"} and len(modes) == count + 1  # + the classifier
    out = to_numpy(model(IMAGES[:2]))
    path = str(tmp_path / "int8.keras")
    model.save(path)
    loaded = load_model(path)
    assert quantization_modes(loaded) == modes
    np.testing.assert_array_equal(to_numpy(loaded(IMAGES[:2])), out)


def test_quantize_collects_once_and_equals_keras_own(monkeypatch):
    """keras_vit.quantize runs Keras' model.quantize with one garbage collection at the end
    (not one per deleted float kernel, `training.quantization.one_collection`): the same int8
    variables as Keras' own call, and gc.collect restored."""
    import gc

    ours, theirs = _model(seed=5), _model(seed=5)
    calls = []
    collect = gc.collect
    monkeypatch.setattr(gc, "collect", lambda *args: calls.append(args) or collect(*args))
    quantize(ours, "int8")
    assert len(calls) == 1  # Keras' Layer.__delattr__ alone would collect once per kernel
    theirs.quantize("int8")
    assert len(calls) > 5
    assert [v.path for v in ours.weights] == [v.path for v in theirs.weights]
    for a, b in zip(ours.weights, theirs.weights, strict=True):
        assert a.dtype == b.dtype, a.path
        np.testing.assert_array_equal(to_numpy(a), to_numpy(b), err_msg=a.path)
    np.testing.assert_array_equal(to_numpy(ours(IMAGES[:2])), to_numpy(theirs(IMAGES[:2])))
