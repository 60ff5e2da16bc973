"""Does masked patch prediction help? Digits: MPP on all training images, fine-tune on 10% labels.

For each seed:
  1. pre-train a small ViT (16 px digits, 4 px patches, width 64, 4 layers) with masked patch
     prediction (`keras_vit.mpp`, 3-bit mean colour targets, 50% corruption, 80/10/10) on all
     1,257 training images, labels unused;
  2. fine-tune it on a stratified 10% of the training labels (126 images);
  3. train the same architecture from scratch on the same 126 images with the same optimizer,
     schedule, augmentation and number of steps;
  4. evaluate both on the fixed 30% test split (540 images, split seed 0).
Prints and writes (`--out`/results.json) the mean and spread of the test accuracies.

Command (about 5-10 minutes on 2 shared CPU cores with the JAX backend):

    KERAS_BACKEND=jax python benchmarks/mpp_digits.py --out runs/bench_mpp

The encoder goes from the MPP model to the classifier through `keras_vit.mpp.extract_encoder`
and the fine-tuning recipe's `transfer_weights`, the path `keras-vit finetune --init` takes.
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import scipy.ndimage

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402

from keras_vit import mpp  # noqa: E402
from keras_vit.models.vit import ViT  # noqa: E402
from keras_vit.recipes.finetune import transfer_weights  # noqa: E402
from keras_vit.training.schedules import WarmupDecay  # noqa: E402

MODEL = dict(patch_size=4, num_layers=4, hidden_dim=64, mlp_dim=128, num_heads=4)


def load_digits(image_size=16, test_fraction=0.3, seed=0):
    """scikit-learn's digits as 0..255 float images `(N, S, S, 1)`, split train/test.

    The split is stratified and fixed by `seed` (the same 30% test split everywhere).
    """
    from sklearn.datasets import load_digits as sk_load_digits
    from sklearn.model_selection import train_test_split

    digits = sk_load_digits()
    images = digits.images.astype("float32") * (255.0 / 16.0)
    zoom = image_size / images.shape[1]
    if zoom != 1:
        images = scipy.ndimage.zoom(images, (1, zoom, zoom), order=1)
    images = np.clip(images, 0, 255)[..., None]
    return train_test_split(
        images,
        digits.target.astype("int32"),
        test_size=test_fraction,
        random_state=seed,
        stratify=digits.target,
    )


def random_affine(images, rng, max_shift=1.5, max_rotation=12.0, scale=(0.9, 1.1)):
    """Jitters a batch `(B, S, S, 1)` with a random rotation, scale and shift per image.

    One `scipy.ndimage.map_coordinates` call for the whole batch (bilinear, zeros outside).
    """
    b, size = images.shape[0], images.shape[1]
    centre = (size - 1) / 2.0
    angle = np.deg2rad(rng.uniform(-max_rotation, max_rotation, b))
    s = rng.uniform(*scale, b)
    cos, sin = np.cos(angle) / s, np.sin(angle) / s
    shift = rng.uniform(-max_shift, max_shift, (b, 2))
    rows, cols = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
    r = rows[None] - centre + shift[:, 0, None, None]
    c = cols[None] - centre + shift[:, 1, None, None]
    src_r = cos[:, None, None] * r - sin[:, None, None] * c + centre
    src_c = sin[:, None, None] * r + cos[:, None, None] * c + centre
    index = np.broadcast_to(np.arange(b)[:, None, None], src_r.shape)
    out = scipy.ndimage.map_coordinates(
        images[..., 0], np.stack([index, src_r, src_c]), order=1, mode="constant"
    )
    return out[..., None].astype(images.dtype)


class Batches(keras.utils.PyDataset):
    """Random batches (with replacement across epochs) of jittered images in [-1, 1]."""

    def __init__(self, images, labels, batch_size, steps, seed, augment=True):
        super().__init__()
        self.images, self.labels = images, labels
        self.batch_size, self.steps, self.augment = batch_size, steps, augment
        self.rng = np.random.default_rng(seed)

    def __len__(self):
        return self.steps

    def __getitem__(self, index):
        idx = self.rng.integers(0, len(self.images), self.batch_size)
        batch = self.images[idx]
        if self.augment:
            batch = random_affine(batch, self.rng)
        batch = (batch / 127.5 - 1.0).astype("float32")
        if self.labels is None:
            return (batch,)
        return batch, self.labels[idx]


def adam(learning_rate, steps, warmup):
    schedule = WarmupDecay(learning_rate, total_steps=steps, warmup_steps=warmup, decay="cosine")
    return keras.optimizers.Adam(schedule, global_clipnorm=1.0)


def pretrain(x_train, args, seed):
    keras.utils.set_random_seed(seed)
    model = mpp.build_mpp_model(
        "Ti/4", image_size=16, num_channels=1, target=args.target, seed=seed, **MODEL
    )
    model.compile(optimizer=adam(args.pretrain_lr, args.pretrain_steps, args.pretrain_steps // 20))
    data = Batches(x_train, None, args.batch_size, args.pretrain_steps, seed, augment=True)
    history = model.fit(data, epochs=1, verbose=0)
    return model, history.history["loss"][-1]


def classifier(seed, encoder=None):
    keras.utils.set_random_seed(seed)
    model = ViT("Ti/4", image_size=16, num_channels=1, num_classes=10, **MODEL)
    if encoder is not None:
        transfer_weights(encoder, model)  # what `keras-vit finetune --init` does
    return model


def finetune(model, x, y, x_test, y_test, args, seed):
    model.compile(
        optimizer=adam(args.finetune_lr, args.finetune_steps, args.finetune_steps // 10),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    data = Batches(x, y, args.finetune_batch_size, args.finetune_steps, seed + 1000)
    model.fit(data, epochs=1, verbose=0)
    logits = model.predict((x_test / 127.5 - 1.0).astype("float32"), batch_size=256, verbose=0)
    return float((logits.argmax(-1) == y_test).mean())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--target", default="color", choices=mpp.TARGETS)
    parser.add_argument("--pretrain-steps", dest="pretrain_steps", type=int, default=1500)
    parser.add_argument("--pretrain-lr", dest="pretrain_lr", type=float, default=1e-3)
    parser.add_argument("--batch-size", dest="batch_size", type=int, default=64)
    parser.add_argument("--finetune-steps", dest="finetune_steps", type=int, default=400)
    parser.add_argument("--finetune-lr", dest="finetune_lr", type=float, default=1e-3)
    parser.add_argument("--finetune-batch-size", dest="finetune_batch_size", type=int, default=32)
    parser.add_argument("--label-fraction", dest="label_fraction", type=float, default=0.1)
    parser.add_argument("--pretrain-once", dest="pretrain_once", action="store_true",
                        help="Pre-train once (first seed) and fine-tune every seed from it.")
    parser.add_argument("--out", default="runs/bench_mpp")
    args = parser.parse_args(argv)
    from sklearn.model_selection import train_test_split

    start = time.perf_counter()
    x_train, x_test, y_train, y_test = load_digits(16, 0.3, 0)  # fixed 30% test split
    runs = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        labelled, _ = train_test_split(
            np.arange(len(y_train)),
            train_size=args.label_fraction,
            stratify=y_train,
            random_state=seed,
        )
        t0 = time.perf_counter()
        if not (args.pretrain_once and runs):
            mpp_model, mpp_loss = pretrain(x_train, args, seed)
        # A fresh encoder per seed: transfer_weights shares its buffers with the classifier.
        encoder = mpp.extract_encoder(mpp_model)
        t1 = time.perf_counter()
        x, y = x_train[labelled], y_train[labelled]
        acc_mpp = finetune(classifier(seed, encoder), x, y, x_test, y_test, args, seed)
        acc_scratch = finetune(classifier(seed), x, y, x_test, y_test, args, seed)
        run = dict(
            seed=seed,
            labelled=int(len(labelled)),
            mpp_final_loss=round(float(mpp_loss), 4),
            from_mpp=acc_mpp,
            from_scratch=acc_scratch,
            pretrain_seconds=round(t1 - t0, 1),
            finetune_seconds=round(time.perf_counter() - t1, 1),
        )
        print(json.dumps(run), flush=True)
        runs.append(run)
    summary = {}
    for key in ("from_mpp", "from_scratch"):
        values = np.array([r[key] for r in runs])
        std = float(values.std(ddof=1)) if len(values) > 1 else 0.0
        summary[key] = dict(mean=float(values.mean()), std=std)
    gains = np.array([r["from_mpp"] - r["from_scratch"] for r in runs])
    summary["gain_points"] = dict(
        mean=float(100 * gains.mean()), min=float(100 * gains.min()), max=float(100 * gains.max())
    )
    result = dict(
        backend=keras.backend.backend(),
        settings=vars(args),
        model=MODEL,
        test_examples=int(len(y_test)),
        runs=runs,
        summary=summary,
        seconds=round(time.perf_counter() - start, 1),
    )
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(result, f, indent=2)
    m, s = summary["from_mpp"], summary["from_scratch"]
    print(
        f"from MPP: {100 * m['mean']:.1f} +- {100 * m['std']:.1f} %   "
        f"from scratch: {100 * s['mean']:.1f} +- {100 * s['std']:.1f} %   "
        f"gain {summary['gain_points']['mean']:+.1f} points "
        f"(per seed {[round(float(100 * g), 1) for g in gains]}); {result['seconds']} s"
    )
    return result


if __name__ == "__main__":
    main()
