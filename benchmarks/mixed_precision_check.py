"""Mixed precision on the current Keras backend: a short training run per policy (issue 17).

For `float32`, `mixed_bfloat16` and `mixed_float16` (Keras adds a dynamic `LossScaleOptimizer`
under `mixed_float16`), trains the same model from the same initial weights with `model.fit`
on class-patterned synthetic images (NumPy, in memory: each class a random 4x4 colour grid
enlarged to the image size, plus noise, as `--dataset synthetic`) and prints one Markdown row per
policy: first and last loss, whether any loss was NaN or infinite, the steps the loss scaling
skipped, the final loss scale, and the median step time.

    KERAS_BACKEND=jax python benchmarks/mixed_precision_check.py                 # ViT-B/16, GPU
    KERAS_BACKEND=torch python benchmarks/mixed_precision_check.py --model mu/8 --image-size 32 \
        --batch 16 --steps 20                                                   # CPU, seconds

On a CPU, bf16/fp16 matmuls are slow, and XLA's CPU compiler has no float16 x float16 ->
float32 dot, which the gradient of `keras.ops.dot_product_attention` needs under
`mixed_float16` on JAX (the row then says so); GPUs have it.
"""

import argparse
import statistics
import time

import keras
import numpy as np

import keras_vit

POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")


def synthetic(n, size, classes, seed=0):
    """`(images in [-1, 1], one-hot labels)`: class colour grids plus uniform noise."""
    rng = np.random.default_rng(seed)
    patterns = rng.uniform(32, 224, (classes, 4, 4, 3)).astype("float32")
    rows = np.arange(size) * 4 // size
    labels = np.arange(n) % classes
    images = patterns[labels][:, rows][:, :, rows] + rng.uniform(-32, 32, (n, size, size, 3))
    images = np.clip(images, 0, 255).astype("float32") / 127.5 - 1.0
    return images, np.eye(classes, dtype="float32")[labels]


class StepTimer(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.times.append(time.perf_counter() - self._start)  # logs are synced: step done

    def on_train_begin(self, logs=None):
        self.times = []


def run(policy, args, x, y):
    keras.config.set_dtype_policy(policy)
    keras.utils.set_random_seed(0)
    model = keras_vit.ViT(args.model, image_size=args.image_size, num_classes=args.num_classes)
    model.compile(
        optimizer=keras.optimizers.AdamW(args.learning_rate, weight_decay=0.05),
        loss=keras.losses.CategoricalCrossentropy(from_logits=True),
    )
    timer = StepTimer()
    history = model.fit(x, y, batch_size=args.batch, epochs=args.steps * args.batch // len(x),
                        shuffle=False, callbacks=[timer], verbose=0)
    losses = np.asarray(history.history["loss"])
    row = {
        "optimizer": type(model.optimizer).__name__,
        "first": float(losses[0]),
        "last": float(losses[-1]),
        "finite": bool(np.isfinite(losses).all()),
        "logits": keras.backend.standardize_dtype(model(x[:2]).dtype),
        "ms_per_step": 1e3 * statistics.median(timer.times[1:] or timer.times),
        "steps": len(timer.times),
    }
    if isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer):
        outer = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
        inner = int(keras.ops.convert_to_numpy(model.optimizer.inner_optimizer.iterations))
        row["skipped"] = outer - inner
        row["scale"] = float(keras.ops.convert_to_numpy(model.optimizer.dynamic_scale))
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="B/16")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--num-classes", type=int, default=10)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=60, help="training steps per policy")
    parser.add_argument("--batches", type=int, default=4, help="distinct batches, cycled")
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--policies", nargs="+", default=list(POLICIES), choices=POLICIES)
    args = parser.parse_args(argv)
    args.steps -= args.steps % args.batches  # whole passes over the distinct batches
    x, y = synthetic(args.batch * args.batches, args.image_size, args.num_classes)
    print(f"{keras.backend.backend()} backend, keras {keras.__version__}, {args.model} at "
          f"{args.image_size} px, batch {args.batch}, {args.steps} steps (loss per epoch of "
          f"{args.batches} batches), AdamW {args.learning_rate:g}")
    print("| policy | optimizer | logits | loss first -> last epoch | all finite "
          "| skipped steps | loss scale | ms per step |")
    print("|---|---|---|---|---|---|---|---|")
    for policy in args.policies:
        try:
            row = run(policy, args, x, y)
        except Exception as e:  # report the failure in the table and go on
            print(f"| {policy} | failed: {type(e).__name__}: {str(e).splitlines()[0][:150]} "
                  "| | | | | | |", flush=True)
            continue
        print(f"| {policy} | {row['optimizer']} | {row['logits']} | {row['first']:.4f} -> "
              f"{row['last']:.4f} | {row['finite']} | {row.get('skipped', '')} "
              f"| {row.get('scale', '')} | {row['ms_per_step']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
