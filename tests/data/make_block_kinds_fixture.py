"""Writes tests/data/vit_{post_norm,parallel}_d5404a7.keras (+ .npz) with the code it runs on.

Run on main at d5404a7, before the block kinds were classes of their own (post-norm and parallel
blocks were `TransformerBlock(block_norm="post")` / `TransformerBlock(num_parallel=2)`), under
JAX (see README.md):

    cd /path/to/main && KERAS_BACKEND=jax PYTHONPATH=. python /path/to/this/script.py OUT_DIR
"""

import os
import sys

import keras
import numpy as np

import keras_vit
from tests.helpers import randomize_weights

out = sys.argv[1]
models = {
    "vit_post_norm_d5404a7": dict(block_norm="post", qk_norm=True, mlp_inner_norm=True),
    "vit_parallel_d5404a7": dict(num_parallel=3, layer_scale_init_value=0.5, key_bias=False),
}
for name, options in models.items():
    model = keras_vit.ViT("mu/8", image_size=16, num_layers=2, num_classes=3, name=name, **options)
    randomize_weights(model, seed=0)
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    model.save(os.path.join(out, name + ".keras"))
    np.savez(
        os.path.join(out, name + ".npz"),
        images=x,
        logits=keras.ops.convert_to_numpy(model(x)),
    )
    print(name, [type(block).__name__ for block in model.blocks])
