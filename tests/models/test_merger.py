"""Tests for keras_vit/models/merger.py: the `merger_*` options of `ViTConfig` / `keras_vit.ViT`."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.models.config import ViTConfig
from tests.helpers import to_numpy

TINY = dict(image_size=32, num_layers=1, class_token=False)
MERGER = dict(merger_size=2, merger_dim=12)


@pytest.mark.parametrize(
    "kwargs,shape",
    [
        (dict(include_top=False, pooling=None), (None, 4, 12)),  # timm's *_enc: merged tokens
        (dict(include_top=False, pooling="gap"), (None, 12)),
        (dict(pooling="gap", num_classes=5, fc_norm=True, final_norm=False), (None, 5)),
    ],
)
def test_every_top_with_the_merger(kwargs, shape):
    model = keras_vit.ViT("mu/8", **TINY, **MERGER, merger_norm=True, **kwargs)
    assert model.output_shape == shape and model.merger.name == "merger"
    assert model.merger.get_config()["norm"] == "layernorm"
    images = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    assert tuple(model(images).shape) == (2, *shape[1:])


def test_fit_step_and_keras_round_trip_with_padding_and_both_norms(tmp_path):
    model = keras_vit.ViT("mu/8", **TINY, merger_size=3, merger_dim=12, merger_hidden_dim=12,
                          merger_padding=True, pooling="gap", num_classes=3, fc_norm=True,
                          final_and_fc_norm=True, norm="rmsnorm")  # fmt: skip
    assert model.final_norm is not None and model.fc_norm is not None
    images = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(images, np.array([0, 2]), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    path = str(tmp_path / "merger.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.config == model.config
    np.testing.assert_allclose(to_numpy(loaded(images)), to_numpy(model(images)), atol=1e-6)


def test_configs_without_the_new_fields_still_load():
    fields = ViTConfig.from_variant("mu/8", image_size=32).to_dict()
    for name in ("merger_size", "merger_dim", "merger_hidden_dim", "merger_norm",
                 "merger_padding", "final_and_fc_norm"):  # fmt: skip
        del fields[name]
    config = ViTConfig.from_dict(fields)
    assert config.merger_size is None and not config.final_and_fc_norm


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(merger_size=0, merger_dim=4), "merger_size must be a positive integer"),
        (dict(merger_size=2), r"merger_dim=None \(expected the merged tokens' width\)"),
        (dict(merger_dim=4), r"merger_dim=4 need merger_size. Received: merger_size=None"),
        (dict(**MERGER, class_token=True, pooling="token"),
         r"prefix tokens \(class_token=True.*pooling='token' \(expected 'gap' or None\)"),
        (dict(**MERGER, num_register_tokens=1, pooling="gap"), "num_register_tokens=1"),
        (dict(final_and_fc_norm=True), "needs fc_norm=True and final_norm=True. Received: "
                                       "fc_norm=False, final_norm=True"),
        (dict(position_embedding_align_corners=True, position_embedding_antialias=False),
         "only apply to NaFlex models .*dynamic_image_size=False"),
    ],
)  # fmt: skip
def test_validation_errors_name_expected_and_received(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ViTConfig.from_variant("mu/8", image_size=32, **kwargs)


def test_int8_model_with_the_merger_saves_and_loads(tmp_path):
    model = keras_vit.ViT("mu/8", **TINY, **MERGER, include_top=False, pooling=None)
    keras_vit.quantize(model, "int8")  # Keras' model.quantize, one garbage collection
    assert model.merger.fc1.dtype_policy.name.startswith("int8")
    images = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    path = str(tmp_path / "int8.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.merger.fc1.dtype_policy.name == model.merger.fc1.dtype_policy.name
    np.testing.assert_allclose(to_numpy(loaded(images)), to_numpy(model(images)), atol=1e-6)
