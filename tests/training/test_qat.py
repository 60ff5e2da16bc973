"""Tests of keras_vit/training/qat.py: `quantization_aware` (calibration, `fit`, `.keras` files,
refusals). The integer exports of QAT models are tested in tests/export/test_precision.py."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.layers.fake_quant import (
    QuantizationAwareDense,
    QuantizationAwareEinsumDense,
    quantization_aware_layers,
)
from keras_vit.models.vit import ViT
from keras_vit.training.qat import calibrate_ranges, quantization_aware
from tests.helpers import randomize_weights, to_numpy

RNG = np.random.default_rng(0)
PIXELS = RNG.integers(0, 256, (8, 16, 16, 3), dtype="uint8")
IMAGES = (PIXELS / 127.5 - 1).astype("float32")
LABELS = RNG.integers(0, 3, 8)


def tiny(**kwargs):
    model = ViT("mu/8", image_size=16, num_classes=3, num_layers=1, **kwargs)
    randomize_weights(model, seed=3)
    return model


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A QAT model calibrated on uint8 pixels, trained 2 steps with fit, saved and loaded."""
    model = tiny()
    float_logits = to_numpy(model(IMAGES))
    quantization_aware(model, PIXELS)
    calibrated = {
        layer.path: (float(to_numpy(layer.activation_min)), float(to_numpy(layer.activation_max)))
        for layer in quantization_aware_layers(model)
    }
    qat_logits = to_numpy(model(IMAGES))
    kernel = to_numpy(model.head.kernel).copy()
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    history = model.fit(IMAGES, LABELS, batch_size=4, epochs=1, verbose=0)
    path = tmp_path_factory.mktemp("qat") / "qat.keras"
    model.save(path)
    return dict(
        model=model,
        loaded=keras_vit.load_model(path),
        float_logits=float_logits,
        qat_logits=qat_logits,
        calibrated=calibrated,
        kernel=kernel,
        history=history.history,
    )


def test_every_projection_becomes_quantization_aware(trained):
    layers = quantization_aware_layers(trained["model"])
    names = sorted(layer.path.split("/")[-1] for layer in layers)
    assert names == sorted(
        ["query", "key", "value", "attention_output", "mlp_dense_1", "mlp_dense_2", "head"]
    )
    assert {type(layer) for layer in layers} == {
        QuantizationAwareDense,
        QuantizationAwareEinsumDense,
    }
    assert all(layer.weight_bits == 7 and layer.activation_bits == 8 for layer in layers)


def test_calibration_sets_ranges_from_the_images(trained):
    head = trained["calibrated"][trained["model"].head.path]
    assert head[0] < 0 < head[1]
    query = [v for k, v in trained["calibrated"].items() if k.endswith("query")][0]
    assert query[0] < -0.5 and query[1] > 0.5  # LayerNorm outputs


def test_fake_quant_changes_outputs_a_little(trained):
    difference = np.abs(trained["qat_logits"] - trained["float_logits"]).max()
    assert 0 < difference < 0.1 * np.abs(trained["float_logits"]).max()


def test_fit_trains_weights_and_tracks_ranges(trained):
    assert np.isfinite(trained["history"]["loss"]).all()
    assert not np.allclose(to_numpy(trained["model"].head.kernel), trained["kernel"])
    head = trained["model"].head
    moved = (float(to_numpy(head.activation_min)), float(to_numpy(head.activation_max)))
    assert moved != trained["calibrated"][head.path]


def test_keras_file_loads_quantization_aware(trained):
    model, loaded = trained["model"], trained["loaded"]
    assert type(loaded.head) is QuantizationAwareDense
    assert len(quantization_aware_layers(loaded)) == 7
    np.testing.assert_array_equal(to_numpy(loaded(IMAGES)), to_numpy(model(IMAGES)))
    assert loaded.get_config()["quantization_aware"]["weight_bits"] == 7


def test_learned_ranges_are_trainable():
    # (their gradients: tests/layers/test_fake_quant.py; the first batch setting an unset
    # range: the layer test of the moving average)
    model = quantization_aware(tiny(), IMAGES, activation_range="learned", weight_bits=4)
    names = [v.path.split("/")[-1] for v in model.trainable_variables]
    assert names.count("activation_min") == names.count("activation_max") == 7
    assert model.head.weight_bits == 4 and model.head.activation_range == "learned"


@pytest.mark.parametrize(
    "data, match",
    [
        (IMAGES[:, :8], r"input shape \(None, 16, 16, 3\).*\(8, 8, 16, 3\)"),
        (IMAGES * 4, r"range \[-1, 1\].*values in"),
        (IMAGES.astype("int32"), "uint8 pixels.*int32"),
        ([], "no images|shape"),
    ],
)
def test_bad_calibration_data_raises_and_leaves_the_model(data, match):
    model = tiny()
    with pytest.raises(ValueError, match=match):
        quantization_aware(model, data)
    assert not quantization_aware_layers(model)


def test_refusals():
    model = quantization_aware(tiny(), PIXELS)
    with pytest.raises(ValueError, match="already quantization-aware.*twice"):
        quantization_aware(model, PIXELS)
    with pytest.raises(ValueError, match="quantization-aware.*quantize twice"):
        keras_vit.quantize(model, "int8")
    quantized = keras_vit.quantize(tiny(), "int8")
    with pytest.raises(ValueError, match="is quantized.*needs the float model"):
        quantization_aware(quantized)
    lora = tiny()
    keras_vit.enable_lora(lora, 2)
    with pytest.raises(ValueError, match="LoRA adapters.*merge_lora"):
        quantization_aware(lora)
    with pytest.raises(ValueError, match="learned.*calibration_data"):
        quantization_aware(tiny(), activation_range="learned")
    with pytest.raises(ValueError, match="VisionTransformer"):
        quantization_aware(keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)]))
    with pytest.raises(ValueError, match="not quantization-aware"):
        calibrate_ranges(tiny(), PIXELS)
