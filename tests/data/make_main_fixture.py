"""Writes a tiny ViT .keras file and its inputs/outputs (.npz) with the code it runs on.

Run on main at 602138d to make tests/data/vit_main_602138d (see README.md).
"""
import sys

import keras
import numpy as np

import keras_vit

out = sys.argv[1]
model = keras_vit.ViT("mu/8", image_size=16, num_layers=1, num_classes=3, representation_size=8,
                      attention_dropout_rate=0.1, layer_scale_init_value=0.5, name="main_fixture")
rng = np.random.default_rng(0)
for w in model.weights:
    value = rng.normal(0.0, 0.2, size=tuple(w.shape)).astype("float32")
    if w.path.endswith(("gamma", "scale")):
        value += 1.0
    w.assign(value)
x = rng.uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
model.save(out + ".keras")
tokens = keras.Model(model.input, model.get_layer("encoder_norm").output)
np.savez(out + ".npz", images=x, logits=keras.ops.convert_to_numpy(model(x)),
         tokens=keras.ops.convert_to_numpy(tokens(x)))
print([ (w.path, tuple(w.shape)) for w in model.weights])
