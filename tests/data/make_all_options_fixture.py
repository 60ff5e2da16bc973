"""Writes tests/data/vit_all_options.keras (+ .npz): every architecture option, under JAX.

    KERAS_BACKEND=jax PYTHONPATH=. python tests/data/make_all_options_fixture.py

tests/models/test_architectures.py loads it on every backend (on TensorFlow and PyTorch that
is a cross-backend load) and compares the outputs at two image sizes.
"""

import os

import keras
import numpy as np

import keras_vit
from tests.helpers import randomize_weights

HERE = os.path.dirname(os.path.abspath(__file__))

model = keras_vit.ViT(
    "mu/8",
    image_size=(16, 24),
    num_layers=2,
    num_classes=4,
    num_register_tokens=2,
    prefix_position_embedding=False,
    pre_norm=True,
    qk_norm=True,
    activation="quick_gelu",
    approximate_gelu=False,
    dynamic_image_size=True,
    pooling="map",
    fc_norm=True,
    name="all_options",
)
randomize_weights(model, seed=3)
rng = np.random.default_rng(3)
arrays = {}
for key, size in (("small", (16, 24)), ("large", (32, 32))):
    images = rng.uniform(-1, 1, (2, *size, 3)).astype("float32")
    arrays[f"images_{key}"] = images
    arrays[f"outputs_{key}"] = keras.ops.convert_to_numpy(model(images))
model.save(os.path.join(HERE, "vit_all_options.keras"))
np.savez(os.path.join(HERE, "vit_all_options.npz"), **arrays)
print(keras.backend.backend(), {k: v.shape for k, v in arrays.items()})
