"""The fine-tuning toolkit on digits, each addition against the same recipe without it (issue 33).

1. pre-trains a tiny ViT (16 px gray digits, 4x4 patches, 2 layers, width 32) on the digits 0-4
   (all of their images), the common start (one per seed);
2. the fine-tuning task: the digits 5-9 (relabelled 0-4) with `--shots` labelled images per
   class to train, 150 other images as the validation split (for tuning) and the rest as the test
   split; training goes through `keras_vit.data.train_pipeline` (random resized crops 0.6-1 of
   the area, rotations up to 12 degrees) and AdamW, cosine decay, the same epochs and batch;
3. arms: the baseline; + layer-wise LR decay (`--layer-decay`); + weight EMA (`--ema`); +
   repeated augmentation (3 copies); + DeiT hard and soft distillation from a teacher (a small
   CNN trained on the same labelled images, the same pipeline, longer); every arm picks its
   learning rate (and its own setting: decay rate, EMA momentum, tau) on the validation split
   from a small grid, with the first seed; then runs `--seeds` seeds at that choice;
4. reports test accuracy mean +- std per arm and the paired difference to the baseline (same
   seed: same start, split and data order), as Markdown and in a JSON file.

Command (JAX; about 30 minutes on 2 CPU cores shared with other jobs):

    KERAS_BACKEND=jax python benchmarks/finetune_digits.py \\
        --json benchmarks/results/finetune_digits.json
"""

import argparse
import itertools
import json
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402

from keras_vit import data as data_lib  # noqa: E402
from keras_vit.data.source import Source  # noqa: E402
from keras_vit.models.vit import ViT  # noqa: E402
from keras_vit.runner.finetune import transfer_weights  # noqa: E402
from keras_vit.training import build_loss, build_optimizer  # noqa: E402
from keras_vit.training.distillation import Distiller  # noqa: E402
from keras_vit.training.layer_decay import with_layer_decay  # noqa: E402
from keras_vit.training.schedules import WarmupDecay  # noqa: E402

ARCH = dict(num_layers=2, hidden_dim=32, mlp_dim=64, num_heads=2, num_channels=1)
SIZE, BATCH = 16, 30


def digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    images = np.repeat(np.repeat(d.images, 2, axis=1), 2, axis=2)[..., None]  # 8 -> 16 px
    return np.round(images * 255 / 16).astype("uint8"), d.target


def split(labels, shots, seed):
    rng = np.random.default_rng(seed)
    train, val, test = [], [], []
    for c in range(5, 10):
        index = rng.permutation(np.flatnonzero(labels == c))
        train.append(index[:shots])
        val.append(index[shots : shots + 30])
        test.append(index[shots + 30 :])
    return [np.concatenate(part) for part in (train, val, test)]


def source(images, labels):
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensor_slices((images, labels.astype("int64")))
    return Source(ds, len(labels), 5, "digits-5-9", default_flip=False, image_shape=(SIZE, SIZE, 1))


def pipeline(images, labels, epochs, seed, repeats=1):
    steps = max(1, len(labels) // BATCH)
    ds = data_lib.train_pipeline(
        source(images, labels), image_size=SIZE, batch_size=BATCH, epochs=epochs,
        steps_per_epoch=steps, seed=seed, crop_scale=(0.6, 1.0), crop_ratio=(0.9, 1.1),
        rotation=12.0, flip=False, repeated_augmentation=repeats,
    )
    return ds, steps


def scaled(images):
    return (images.astype("float32") / 127.5 - 1.0)


def pretrain(images, labels, seed):
    keras.utils.set_random_seed(seed)
    pre = labels < 5
    model = ViT("mu/4", image_size=SIZE, num_classes=5, **ARCH)
    ds, steps = pipeline(images[pre], labels[pre], 15, seed)
    model.compile(build_optimizer("adamw", WarmupDecay(3e-3, total_steps=15 * steps,
                                  warmup_steps=20, decay="cosine"), weight_decay=0.05),
                  build_loss(0.1))
    model.fit(ds, epochs=15, steps_per_epoch=steps, verbose=0)
    return model


def teacher_cnn(images, labels, seed, epochs):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((SIZE, SIZE, 1))
    x = inputs
    for width in (32, 64):
        x = keras.layers.Conv2D(width, 3, padding="same", activation="relu")(x)
        x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(64, 3, activation="relu")(x))
    model = keras.Model(inputs, keras.layers.Dense(5)(x), name="teacher")
    ds, steps = pipeline(images, labels, epochs, seed)
    model.compile(build_optimizer("adam", WarmupDecay(3e-3, total_steps=epochs * steps,
                                  warmup_steps=5, decay="cosine")), build_loss(0.1))
    model.fit(ds, epochs=epochs, steps_per_epoch=steps, verbose=0)
    return model


def finetune(start, data, arm, lr, setting, seed, epochs, teacher=None):
    """Fine-tunes a copy of `start`; returns (validation accuracy, test accuracy)."""
    (xtr, ytr), (xval, yval), (xte, yte) = data
    keras.utils.set_random_seed(seed)
    distill = arm in ("distill_hard", "distill_soft")
    model = ViT("mu/4", image_size=SIZE, num_classes=5, distillation_token=distill, **ARCH)
    transfer_weights(start, model)
    repeats = setting if arm == "repeated_aug" else 1
    ds, steps = pipeline(xtr, ytr, epochs, seed, repeats)
    schedule = WarmupDecay(lr, total_steps=epochs * steps, warmup_steps=steps, decay="cosine")
    optimizer = build_optimizer(
        "adamw", schedule, weight_decay=0.05, ema_momentum=setting if arm == "ema" else None
    )
    if arm == "layer_decay":
        optimizer = with_layer_decay(optimizer, model, setting)
    trained = model
    if distill:
        trained = Distiller(model, teacher, arm.split("_")[1], tau=setting)
    trained.compile(optimizer, build_loss(0.1), metrics=["accuracy"])
    trained.fit(ds, epochs=epochs, steps_per_epoch=steps, verbose=0)

    def accuracy(x, y):
        logits = model.predict(scaled(x), batch_size=256, verbose=0)
        return float(np.mean(np.argmax(logits, -1) == y))

    return accuracy(xval, yval), accuracy(xte, yte)


# Each arm's own setting grid (tuned on the validation split together with the learning rate).
SETTINGS = {
    "baseline": [None],
    "layer_decay": [0.65],
    "ema": [0.95],
    "repeated_aug": [3],
    "distill_hard": [1.0],
    "distill_soft": [2.0],
}
LRS = [1e-3, 3e-3]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--shots", type=int, default=20)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--arms", default=",".join(SETTINGS))
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    arms = args.arms.split(",")
    start_time = time.time()
    images, labels = digits()
    results = {"arms": {}, "tuning": {}}
    starts, datas, teachers = {}, {}, {}

    def prepare(seed):
        if seed not in starts:
            starts[seed] = pretrain(images, labels, seed)
            tr, val, te = split(labels, args.shots, seed)
            datas[seed] = [(images[i], labels[i] - 5) for i in (tr, val, te)]
            if any(a.startswith("distill") for a in arms):
                teachers[seed] = teacher_cnn(*datas[seed][0], seed, 3 * args.epochs)
                xte, yte = datas[seed][2]
                logits = teachers[seed].predict(scaled(xte), verbose=0)
                results.setdefault("teacher_test_accuracy", []).append(
                    float(np.mean(np.argmax(logits, -1) == yte))
                )
        return starts[seed], datas[seed], teachers.get(seed)

    chosen = {}
    for arm in arms:  # tuning on the validation split, first seed
        start, data, teacher = prepare(0)
        grid = []
        for lr, setting in itertools.product(LRS, SETTINGS[arm]):
            val, _ = finetune(start, data, arm, lr, setting, 0, args.epochs, teacher)
            grid.append({"lr": lr, "setting": setting, "val_accuracy": val})
            print(f"tune {arm} lr={lr} setting={setting}: val {val:.4f}", flush=True)
        best = max(grid, key=lambda g: g["val_accuracy"])
        chosen[arm] = (best["lr"], best["setting"])
        results["tuning"][arm] = grid
    for arm in arms:
        results["arms"][arm] = {"lr": chosen[arm][0], "setting": chosen[arm][1], "test": []}
    for seed in range(args.seeds):
        start, data, teacher = prepare(seed)
        for arm in arms:
            lr, setting = chosen[arm]
            _, test = finetune(start, data, arm, lr, setting, seed, args.epochs, teacher)
            results["arms"][arm]["test"].append(test)
            print(f"seed {seed} {arm}: test {test:.4f}", flush=True)
        if args.json:  # partial results survive a cut-off run
            _write(args, results, start_time)
    if args.json:
        _write(args, results, start_time)
    base = np.array(results["arms"].get("baseline", {}).get("test", []))
    print("\n| arm | lr | setting | test accuracy (mean +- std) | paired diff vs baseline |")
    print("|---|---|---|---|---|")
    for arm, r in results["arms"].items():
        t = np.array(r["test"])
        diff = ""
        if arm != "baseline" and len(base) == len(t):
            d = t - base
            diff = f"{d.mean():+.4f} +- {d.std(ddof=1):.4f} ({(d > 0).sum()}/{len(d)} better)"
        print(f"| {arm} | {r['lr']} | {r['setting']} | {t.mean():.4f} +- {t.std(ddof=1):.4f} | "
              f"{diff} |")


def _write(args, results, start_time):
    out = dict(
        results,
        command="KERAS_BACKEND=jax python benchmarks/finetune_digits.py " + " ".join(sys.argv[1:]),
        backend=keras.backend.backend(),
        machine=f"{platform.machine()} {os.cpu_count()} CPUs (shared)",
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        seconds=round(time.time() - start_time, 1),
        settings=dict(shots=args.shots, epochs=args.epochs, seeds=args.seeds, lrs=LRS,
                      grid=SETTINGS, arch=ARCH, image_size=SIZE, batch_size=BATCH),
    )
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
