#!/usr/bin/env python
"""Makes the inspection pictures of docs/inspection.md (docs/images/inspect_*.png), offline.

Trains a small ViT on scikit-learn's 8x8 handwritten digits (upsampled to
32 px, one channel, patch 4: an 8 x 8 grid of 64 patches; 4 layers, width 64,
4 heads) for a few epochs, or loads a saved model with `--model`, then draws
with `keras_vit.inspection`:

- `inspect_attention_overlay.png`: attention rollout on scikit-image's
  `chelsea()` photo (converted to the model's channels) and on test digits;
- `inspect_attention_distance.png`: mean attention distance per head against
  depth, over test digits (the paper's Fig. 7 right);
- `inspect_position_embedding_similarity.png`: Fig. 7 centre;
- `inspect_embedding_filters.png`: Fig. 7 left.

Usage (about a minute on 2 CPU cores with the JAX backend):

    KERAS_BACKEND=jax python scripts/make_inspect_figures.py
    python scripts/make_inspect_figures.py --model run/model.keras --out /tmp/figs
"""

import argparse
import os
import sys
import time

import keras
import numpy as np

# Run from a checkout without installing the package.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DIGITS_SHOWN = 3


def digits_dataset(image_size, channels):
    """scikit-learn digits as (images in [-1, 1], labels), resized to `image_size`."""
    from skimage.transform import resize
    from sklearn.datasets import load_digits

    digits = load_digits()
    pixels = digits.images.astype("float64") * (255.0 / 16.0)  # 0..16 -> 0..255
    images = np.stack(
        [resize(p, image_size, order=1, mode="edge", anti_aliasing=False) for p in pixels]
    )
    images = np.repeat(images[..., None], channels, axis=-1)
    return (images / 127.5 - 1.0).astype("float32"), digits.target.astype("int32")


def photo(channels, image_size, display_side=256):
    """scikit-image's `chelsea()` as (model input (H, W, C) in [-1, 1], display uint8 image)."""
    import skimage.data
    from skimage.color import rgb2gray
    from skimage.transform import resize

    rgb = skimage.data.chelsea().astype("float64") / 255.0  # (300, 451, 3)
    if channels == 1:
        image = rgb2gray(rgb)[..., None]
    elif channels == 3:
        image = rgb
    else:
        raise ValueError(f"The photo needs a model with 1 or 3 channels. Received: {channels}")
    model_input = resize(image, image_size, order=1, anti_aliasing=True) * 2.0 - 1.0
    scale = display_side / max(image.shape[:2])
    shape = (round(image.shape[0] * scale), round(image.shape[1] * scale))
    display = resize(image, shape, order=1, anti_aliasing=True)
    return model_input.astype("float32"), (display * 255).round().astype("uint8")


def train_digits_vit(images, labels, epochs, seed):
    from keras_vit.models.vit import ViT

    keras.utils.set_random_seed(seed)
    image_size = images.shape[1:3]
    model = ViT(
        "mu/4",
        image_size=image_size,
        num_channels=images.shape[-1],
        num_classes=10,
        num_layers=4,
        hidden_dim=64,
        mlp_dim=128,
        num_heads=4,
        name="vit_digits",
    )
    steps = epochs * -(-len(images) // 64)
    schedule = keras.optimizers.schedules.CosineDecay(
        1e-4, steps, warmup_target=2e-3, warmup_steps=steps // 10
    )
    model.compile(
        optimizer=keras.optimizers.AdamW(schedule, weight_decay=1e-4),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    model.fit(images, labels, batch_size=64, epochs=epochs, verbose=2, shuffle=True)
    return model


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="Saved .keras model to inspect instead of training one.")
    parser.add_argument(
        "--out", default="docs/images", help="Output folder (default: docs/images)."
    )
    parser.add_argument("--epochs", type=int, default=12, help="Training epochs (default: 12).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save-model", help="Also save the trained model to this .keras path.")
    args = parser.parse_args(argv)

    from keras_vit import inspection as vi
    from keras_vit.cli.commands import load_model

    start = time.time()
    if args.model:
        model = load_model(args.model)
        _, height, width, channels = vi.model_input_shape(model)
        images, labels = digits_dataset((height, width), channels)
        test_images, test_labels = images[-297:], labels[-297:]
    else:
        images, labels = digits_dataset((32, 32), 1)
        # the last 297 digits are held out (as sklearn's own examples split them)
        model = train_digits_vit(images[:1500], labels[:1500], args.epochs, args.seed)
        test_images, test_labels = images[1500:], labels[1500:]
        if args.save_model:
            model.save(args.save_model)
    _, height, width, channels = vi.model_input_shape(model)
    logits = model.predict(test_images, batch_size=128, verbose=0)
    if logits.shape[-1] == 10:
        accuracy = float((np.argmax(logits, -1) == test_labels).mean())
        print(f"test accuracy on {len(test_labels)} held-out digits: {accuracy:.3f}")

    photo_input, photo_display = photo(channels, (height, width))
    shown = [int(np.flatnonzero(test_labels == d)[0]) for d in (0, 4, 7)][:DIGITS_SHOWN]
    inputs = np.concatenate([photo_input[None], test_images[shown]], axis=0)
    display = [photo_display] + [((test_images[i] + 1) * 127.5).astype("uint8") for i in shown]
    titles = ["chelsea (skimage)"] + [f"digit {test_labels[i]}" for i in shown]
    paths = vi.save_inspection_figures(
        model,
        inputs,
        args.out,
        display_images=display,
        titles=titles,
        distance_images=test_images[:256],
        prefix="inspect_",
        dpi=72,
    )
    distances = vi.mean_attention_distance(model, test_images[:256])
    print("mean attention distance (pixels), layers x heads:")
    print(np.array2string(distances, precision=2))
    for path in paths.values():
        print(path, os.path.getsize(path), "bytes")
    print(f"done in {time.time() - start:.0f} s on the {keras.backend.backend()} backend")
    return 0


if __name__ == "__main__":
    sys.exit(main())
