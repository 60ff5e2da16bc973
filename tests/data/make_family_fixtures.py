"""Writes tests/data/families_01eef0b/<family>.keras (+ .npz: inputs and outputs), one tiny model
of each model family, with the code it runs on.

Run on main at 01eef0b, the last commit before the family folders and the registry (issue 41),
under JAX (see tests/data/README.md):

    git worktree add --detach /tmp/old 01eef0b && cd /tmp/old && \
        KERAS_BACKEND=jax PYTHONPATH=. python /path/to/this/script.py OUT_DIR

Each model is a timm architecture built at a tiny size (random weights, `randomize_weights`), a
transformers-style DINOv2 encoder, or a masked autoencoder; `tests/families/test_saved_before.py`
loads every file on every backend and checks the outputs.
"""

import json
import os
import sys

import keras
import numpy as np

import keras_vit
from tests.helpers import randomize_weights

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
TINY = dict(num_layers=2, hidden_dim=32, num_heads=2, mlp_dim=64, num_classes=3)

# family -> (timm architecture, overrides); each at a tiny size.
TIMM = {
    "vit": ("vit_base_patch16_224", dict(image_size=32)),
    "stems": (
        "vit_base_resnet50d_224",
        dict(image_size=64, patch_size=1, resnet_units=(1, 1, 1), resnet_width=8),
    ),
    "eva": ("eva02_base_patch14_224", dict(image_size=28)),
    "dinov3": ("vit_small_patch16_dinov3", dict(image_size=32)),
    "aimv2": ("aimv2_large_patch14_224", dict(image_size=28)),
    "parallel": ("vit_small_patch16_18x2_224", dict(image_size=32)),
    "parallel_scaling": ("vit_base_patch16_xp_224", dict(image_size=32)),
    "differential": ("vit_dpwee_patch16_reg1_gap_256", dict(image_size=32)),
    "naflex": ("naflexvit_base_patch16_gap", {}),
    "pe": ("vit_pe_spatial_base_patch16_512", dict(image_size=32)),
    "beit": ("beit_base_patch16_224", dict(image_size=32)),
    "beit3": ("beit3_base_patch16_224", dict(image_size=32)),
    "radio": ("vit_base_patch16_radio_v3", dict(image_size=32)),
    "vlm": ("qwen3_vit_306m_enc", dict(image_size=64, merger_dim=16, merger_hidden_dim=32)),
}

made = {}
for family, (arch, overrides) in TIMM.items():
    try:
        model = keras_vit.from_timm(arch, **{**TINY, **overrides})
    except Exception as error:  # noqa: BLE001 - report and go on
        print(f"SKIP {family} ({arch}): {type(error).__name__}: {str(error)[:300]}")
        continue
    made[family] = (model, arch)

# transformers' DINOv2 (SwiGLU, registers, layer scale) as the dinov2 family's readers build it.
made["dinov2"] = (
    keras_vit.ViT(
        "mu/4",
        image_size=32,
        mlp="swiglu",
        num_register_tokens=2,
        layer_scale_init_value=0.1,
        pooling="token_gap",
        **TINY,
    ),
    None,
)

records = {}
for family, (model, arch) in made.items():
    randomize_weights(model, seed=0)
    size = model.config.image_size
    rng = np.random.default_rng(1)
    if model.config.naflex:  # two images of other aspect ratios, padded to 8 patches
        from keras_vit.data.naflex import naflex_batch

        images = [
            rng.uniform(-1, 1, shape).astype("float32") for shape in ((32, 48, 3), (48, 16, 3))
        ]
        x = naflex_batch(images, model.config.patch_size, 8)
    else:
        x = {"images": rng.uniform(-1, 1, (2, *size, 3)).astype("float32")}
    y = keras.ops.convert_to_numpy(model(x if model.config.naflex else x["images"]))
    model.save(os.path.join(out, family + ".keras"))
    np.savez(os.path.join(out, family + ".npz"), outputs=y, **x)
    records[family] = dict(architecture=arch, image_size=list(size), outputs=list(y.shape))
    print(family, arch, y.shape, [type(b).__name__ for b in model.blocks][:1])

# A masked autoencoder (its own model class), on fixed noise.
from keras_vit.models.mae import build_mae_model  # noqa: E402

mae = build_mae_model(
    "mu/4",
    image_size=16,
    decoder_hidden_dim=16,
    decoder_num_layers=1,
    decoder_num_heads=2,
    decoder_mlp_dim=32,
    norm_pix_loss=True,
    seed=0,
)
randomize_weights(mae, seed=0)
x = np.random.default_rng(1).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
noise = np.random.default_rng(2).uniform(size=(2, 16)).astype("float32")
result = mae(x, noise=noise)
mae.save(os.path.join(out, "mae.keras"))
np.savez(
    os.path.join(out, "mae.npz"),
    images=x,
    noise=noise,
    **{k: keras.ops.convert_to_numpy(v) for k, v in result.items()},
)
records["mae"] = dict(architecture=None, image_size=[16, 16])
with open(os.path.join(out, "index.json"), "w") as f:
    json.dump(records, f, indent=1, sort_keys=True)
print("wrote", sorted(records))
