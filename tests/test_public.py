"""Tests for keras_vit/_public.py: the public names, derived once from each package's imports."""

import sys

import keras_vit
import keras_vit.models
import keras_vit.weights

REMOVED = (
    "ViTHybrid",
    "config_from_model",
    "list_weights",
    "get_weights_file",
    "lora_config",
    "parse_variant",
    "build_vit",
    "build_hybrid",
)


def test_all_is_every_public_import_and_nothing_else():
    for package in (keras_vit, keras_vit.models, keras_vit.weights):
        assert package.__all__ == sorted(package.__all__)
        for name in package.__all__:
            assert getattr(package, name) is not None, name
            assert not isinstance(getattr(package, name), type(sys)), name
        assert not any(name.startswith("_") and name != "__version__" for name in package.__all__)
    names = set(keras_vit.__all__)
    assert {"VisionTransformer", "ViT", "ViTConfig", "list_presets", "get_lora_settings"} <= names
    assert not names & set(REMOVED)
    # Nothing `from keras_vit import *` brings shadows a standard-library module.
    assert not names & set(sys.stdlib_module_names)
    assert "VisionTransformer" in keras_vit.models.__all__
    assert "register_weights_handler" not in keras_vit.weights.__all__
