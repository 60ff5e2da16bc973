"""LoRA against full fine-tuning on digits, and int8 against float (issue 20, parts 1-2).

1. pre-trains a small ViT (16 px gray digits, 4x4 patches, 4 layers, width 64) on the digits
   0-4 (all of their images), the common start;
2. fine-tunes it to the digits 5-9 (a new zero head; a stratified half of their images to train,
   the other half to test) four ways, same epochs and batch: full fine-tuning, LoRA
   (`keras_vit.enable_lora`) on query + value, LoRA on all six projections, and the head alone;
   reports held-out accuracy, trainable parameters and seconds per epoch;
3. quantizes the fully fine-tuned model to int8 (`keras_vit.quantize`): held-out accuracy change,
   top-1 agreement with the float model, largest logit difference;
4. builds a random `--big` model (ViT-S/16 by default, 224 px, 1000 classes, random head) and
   reports int8 / float top-1 agreement on random images, weight bytes, and the median time of
   `predict_on_batch` for a batch of `--batch` (float and int8 alternated in one process).

Prints Markdown tables. Command (JAX, about 5 minutes on 2 shared CPU cores):

    KERAS_BACKEND=jax python benchmarks/lora_quant_digits.py
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402

import keras_vit  # noqa: E402
from keras_vit.models.vit import ViT  # noqa: E402

ARCH = dict(num_layers=4, hidden_dim=64, mlp_dim=128, num_heads=4, num_channels=1)


def digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    images = np.repeat(np.repeat(d.images, 2, axis=1), 2, axis=2)[..., None]  # 8 -> 16 px
    return (images / 8.0 - 1.0).astype("float32"), d.target


def split(images, labels, seed):
    """Digits 0-4: pre-training. Digits 5-9 (relabelled 0-4): a stratified half each way."""
    rng = np.random.default_rng(seed)
    pre = labels < 5
    train, test = [], []
    for c in range(5, 10):
        index = rng.permutation(np.flatnonzero(labels == c))
        train.append(index[: len(index) // 2])
        test.append(index[len(index) // 2 :])
    train, test = rng.permutation(np.concatenate(train)), np.concatenate(test)
    return (
        (images[pre], labels[pre]),
        (images[train], labels[train] - 5),
        (images[test], labels[test] - 5),
    )


def new_model():
    return ViT("mu/4", image_size=16, num_classes=5, **ARCH)


def compile_fit(model, data, lr, epochs, batch):
    model.compile(
        keras.optimizers.AdamW(lr, weight_decay=0.05),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    start = time.perf_counter()
    model.fit(*data, batch_size=batch, epochs=epochs, verbose=0, shuffle=True)
    return (time.perf_counter() - start) / epochs


def accuracy(model, data):
    logits = model.predict(data[0], batch_size=256, verbose=0)
    return float((logits.argmax(-1) == data[1]).mean()), logits


def count(weights):
    return int(sum(np.prod(w.shape) for w in weights))


def weight_bytes(model):
    return int(sum(np.prod(w.shape) * np.dtype(w.dtype).itemsize for w in model.weights))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pretrain-epochs", type=int, default=30)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3, help="full fine-tuning")
    parser.add_argument("--lora-lr", type=float, default=5e-3, help="LoRA and head-only")
    parser.add_argument("--rank", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--big", default="S/16", help="variant of the random int8 model")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    keras.utils.set_random_seed(args.seed)
    print(f"keras {keras.__version__}, backend {keras.backend.backend()}, {os.cpu_count()} CPUs")

    pre, train, test = split(*digits(), args.seed)
    start = time.perf_counter()
    base = new_model()
    compile_fit(base, pre, 1e-3, args.pretrain_epochs, args.batch_size)
    seconds = time.perf_counter() - start
    print(f"pre-trained on digits 0-4 ({len(pre[1])} images) in {seconds:.0f} s")
    start_weights = [keras.ops.convert_to_numpy(w) for w in base.weights]

    def from_start():
        model = new_model()
        model.set_weights(start_weights)
        for w in model.get_layer("head").weights:  # a new zero head (paper's fine-tuning)
            w.assign(np.zeros(w.shape, "float32"))
        return model

    rows, models = [], {}
    variants = (
        ("full fine-tuning", args.lr, None),
        (f"LoRA r={args.rank} query,value", args.lora_lr, ("query", "value")),
        (f"LoRA r={args.rank} all 6", args.lora_lr, keras_vit.training.lora.TARGETS),
        ("head only", args.lora_lr, "head"),
    )
    for name, lr, targets in variants:
        model = from_start()
        if targets == "head":
            for layer in model.layers:
                layer.trainable = layer.name == "head"
        elif targets:
            keras_vit.enable_lora(model, args.rank, targets=targets)
        trainable = count(model.trainable_weights)
        seconds = compile_fit(model, train, lr, args.epochs, args.batch_size)
        acc, _ = accuracy(model, test)
        rows.append((name, lr, trainable, trainable / count(model.weights), acc, seconds))
        models[name] = model
    print(
        f"\nFine-tuning to digits 5-9: {len(train[1])} train / {len(test[1])} held-out images, "
        f"{args.epochs} epochs of batch {args.batch_size}, AdamW (weight decay 0.05)\n"
    )
    print("| run | lr | trainable params | share | held-out accuracy | s / epoch |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, lr, trainable, share, acc, seconds in rows:
        print(f"| {name} | {lr:g} | {trainable:,} | {share:.1%} | {acc:.4f} | {seconds:.2f} |")

    full = models["full fine-tuning"]
    float_acc, float_logits = accuracy(full, test)
    keras_vit.quantize(full, "int8")
    int8_acc, int8_logits = accuracy(full, test)
    agree = float((float_logits.argmax(-1) == int8_logits.argmax(-1)).mean())
    print("\nint8 (keras_vit.quantize) of the fully fine-tuned digits model\n")
    print("| float acc | int8 acc | change | top-1 agreement | max logit diff |")
    print("|---:|---:|---:|---:|---:|")
    print(
        f"| {float_acc:.4f} | {int8_acc:.4f} | {int8_acc - float_acc:+.4f} | {agree:.4f} | "
        f"{np.abs(float_logits - int8_logits).max():.4f} |"
    )

    rng = np.random.default_rng(args.seed)
    images = rng.uniform(-1, 1, (4 * args.batch, 224, 224, 3)).astype("float32")
    big = ViT(args.big, image_size=224, num_classes=1000)
    head = big.get_layer("head")
    head.kernel.assign(rng.normal(0, 0.02, head.kernel.shape).astype("float32"))
    big_int8 = ViT(args.big, image_size=224, num_classes=1000)
    big_int8.set_weights([keras.ops.convert_to_numpy(w) for w in big.weights])
    keras_vit.quantize(big_int8, "int8")
    float_logits = big.predict(images, batch_size=args.batch, verbose=0)
    int8_logits = big_int8.predict(images, batch_size=args.batch, verbose=0)
    agree = float((float_logits.argmax(-1) == int8_logits.argmax(-1)).mean())
    batch = images[: args.batch]
    times = {"float32": [], "int8": []}
    for model in (big, big_int8):
        model.predict_on_batch(batch)  # compile
    for _ in range(args.repeats):  # alternated, so both see the same machine load
        for key, model in (("float32", big), ("int8", big_int8)):
            start = time.perf_counter()
            model.predict_on_batch(batch)
            times[key].append(time.perf_counter() - start)
    f_time, q_time = (statistics.median(times[k]) for k in ("float32", "int8"))
    print(
        f"\nRandom ViT-{args.big} at 224 px, 1000 classes: {len(images)} random images, "
        f"predict_on_batch of {args.batch}, median of {args.repeats} alternated calls\n"
    )
    print("| model | top-1 agreement with float | weight MB | s / batch | ratio to float |")
    print("|---|---:|---:|---:|---:|")
    print(f"| float32 | 1.0000 | {weight_bytes(big) / 1e6:.1f} | {f_time:.3f} | 1.00 |")
    print(
        f"| int8 | {agree:.4f} | {weight_bytes(big_int8) / 1e6:.1f} | {q_time:.3f} | "
        f"{q_time / f_time:.2f} |"
    )
    print(f"max logit difference {np.abs(float_logits - int8_logits).max():.4f}")


if __name__ == "__main__":
    main()
