"""Writes tests/data/vit_{post_norm,parallel}_5cfe72d.keras (+ .npz) with the code it runs on.

Run on main at 5cfe72d, before the block kinds were classes of their own (post-norm and parallel
blocks were `TransformerBlock(block_norm="post")` / `TransformerBlock(num_parallel=2)`), under
JAX (see README.md):

    KERAS_BACKEND=jax PYTHONPATH=/path/to/main python tests/data/make_block_kinds_fixture.py OUT_DIR
"""

import os
import sys

import keras
import numpy as np

import keras_vit

out = sys.argv[1]
models = {
    "vit_post_norm_5cfe72d": dict(block_norm="post", qk_norm=True, mlp_inner_norm=True),
    "vit_parallel_5cfe72d": dict(num_parallel=3, layer_scale_init_value=0.5, key_bias=False),
}
for name, options in models.items():
    model = keras_vit.ViT("mu/8", image_size=16, num_layers=2, num_classes=3, name=name, **options)
    rng = np.random.default_rng(0)
    for w in model.weights:
        value = rng.normal(0.0, 0.2, size=tuple(w.shape)).astype("float32")
        if w.path.endswith(("gamma", "scale")):
            value += 1.0
        w.assign(value)
    x = rng.uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    model.save(os.path.join(out, name + ".keras"))
    np.savez(
        os.path.join(out, name + ".npz"),
        images=x,
        logits=keras.ops.convert_to_numpy(model(x)),
    )
    print(name, [type(block).__name__ for block in model.blocks])
