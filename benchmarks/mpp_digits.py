"""Does masked patch prediction help? Digits, 10% of the labels, every arm tuned on validation.

The paper's Sec. 4.6 / Appendix B.1.2 experiment, small enough for a CPU. For each seed:

  1. the labelled subset: a stratified `--label-fraction` (10%: 125 images) of the 1,257
     training images; a stratified `--val-fraction` (30%: 38 images) of it is held out as the
     validation split;
  2. pre-training, once per seed and arm (nothing shared between seeds):
     - `mpp-<target>`: masked patch prediction (`keras_vit.models.mpp`, 50% corruption, 80/10/10) on
       all 1,257 training images, labels unused, for each of `--targets` (`color`: 3-bit mean
       colour; `downsampled`: 4x4 cells x 3 bits; `pixels`: L2 on the patch pixels);
     - `mae` (with `--mae`): a masked autoencoder (`keras_vit.models.mae`: 75% of the patches
       dropped before the encoder, a 64-wide 2-block decoder, per-patch normalised pixel
       targets) on all 1,257 training images, with the MPP arms' optimizer, steps and batches;
     - `supervised` (with `--supervised`): a classifier trained on the labels of the *other*
       training images (the 90% outside the labelled subset; the analogue of the paper's
       supervised pre-training on a bigger labelled set);
     - `scratch`: none (random initialisation);
  3. fine-tuning, the same for every arm: a fresh classifier gets the pre-trained encoder
     (`keras_vit.models.mpp.extract_encoder` + the fine-tuning recipe's `transfer_weights`, the
     path `keras-vit finetune --init` takes) and a zero head, then trains on the labelled images
     outside the validation split with Adam (10% warm-up, cosine decay to 0), once for every
     learning rate of `--finetune-lrs` and length of `--finetune-steps`;
  4. selection on the validation split only: the (learning rate, length) whose run ends with
     the best validation accuracy (ties: lower validation loss, then shorter, then smaller
     rate) is the arm's result, scored on the fixed 30% test split (540 images, split seed 0).
     The test split never chooses anything. With `--refit` the chosen setting is trained again
     on the whole labelled subset (validation images included) and that model is scored;
  5. few-shot linear evaluation (`keras_vit.training.fewshot_accuracy`, `--shots`) of each
     arm's pre-trained encoder (the random initialisation for `scratch`), on the class token
     and on the mean patch token: shots drawn from the 1,257 training images, accuracy on the
     test split.

It prints one progress line per pre-training and per fine-tuning arm, then Markdown tables,
and writes everything (settings, every grid point, the summary with mean, std, per-seed gains
over scratch and paired tests from scipy, timings) to `--out`/results.json after every seed.

Default protocol (5 seeds, scratch vs MPP with the colour target, learning rates {1e-3, 3e-3}
x lengths {1000, 4000} steps, few-shot; 13.5 minutes on 2 quiet CPU cores with JAX, about 24
on a loaded machine, see benchmarks/RESULTS.md):

    KERAS_BACKEND=jax python benchmarks/mpp_digits.py --out runs/bench_mpp

The whole study (the three targets and supervised pre-training on the other 90% of the
labels; `--label-fraction 1 --val-fraction 0.1` without `--supervised` uses every label):

    KERAS_BACKEND=jax python benchmarks/mpp_digits.py --targets all --supervised --out runs/all

The superseded protocol of the first claim (one pre-training shared by all seeds, 400
fine-tuning steps at one learning rate, no validation split, scored on the test split):

    KERAS_BACKEND=jax python benchmarks/mpp_digits.py --seeds 0,1,2 --pretrain-once \
        --val-fraction 0 --finetune-lrs 1e-3 --finetune-steps 400 --shots "" \
        --out runs/bench_mpp_old
"""

import argparse
import json
import os
import platform
import sys
import time

import numpy as np
import scipy.ndimage
import scipy.stats

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402

from keras_vit.layers.patch_targets import TARGETS  # noqa: E402
from keras_vit.models import mae, mpp  # noqa: E402
from keras_vit.models.vit import ViT  # noqa: E402
from keras_vit.runner.finetune import transfer_weights  # noqa: E402
from keras_vit.training.fewshot import fewshot_accuracy  # noqa: E402
from keras_vit.training.schedules import WarmupDecay  # noqa: E402

MODEL = dict(patch_size=4, num_layers=4, hidden_dim=64, mlp_dim=128, num_heads=4)
IMAGE_SIZE = 16
NUM_CLASSES = 10
FEATURES = ("token", "gap")  # few-shot features: class token, mean of the patch tokens


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


def to_inputs(images):
    """0..255 images -> the model's [-1, 1] float32 inputs."""
    return (np.asarray(images) / 127.5 - 1.0).astype("float32")


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
        batch = to_inputs(batch)
        if self.labels is None:
            return (batch,)
        return batch, self.labels[idx]


# ----------------------------------------------------------------------------- protocol helpers


def parse_seeds(text):
    """`"0,1,2"` or `"3-9"` or `"0-2,7"` -> a list of ints (in order, no repeats)."""
    seeds = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part:
                first, last = (int(v) for v in part.split("-", 1))
                values = range(first, last + 1)
            else:
                values = [int(part)]
        except ValueError:
            raise ValueError(
                f"--seeds expects ints >= 0 or ranges like 3-9. Received: {text!r}"
            ) from None
        if not values:
            raise ValueError(f"--seeds range {part!r} is empty. Received: {text!r}")
        seeds.extend(v for v in values if v not in seeds)
    if not seeds:
        raise ValueError(f"--seeds names no seed. Received: {text!r}")
    return seeds


def parse_targets(text):
    """`"color"`, `"color,pixels"` or `"all"` -> a tuple of `TARGETS` names (the MPP targets)."""
    if str(text).strip() == "all":
        return TARGETS
    targets = tuple(t.strip() for t in str(text).split(",") if t.strip())
    unknown = [t for t in targets if t not in TARGETS]
    if unknown or not targets:
        raise ValueError(
            f"--targets expects 'all' or names from {TARGETS}. Received: {text!r}"
        )
    return targets


def parse_floats(text, name):
    try:
        values = [float(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{name} expects comma-separated numbers. Received: {text!r}") from None
    if not values or min(values) <= 0:
        raise ValueError(f"{name} expects positive numbers. Received: {text!r}")
    return values


def parse_shots(text, name="--shots"):
    """`"1,5,10"` -> `[1, 5, 10]`; `""` -> `[]`. Positive ints only."""
    try:
        values = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{name} expects comma-separated ints. Received: {text!r}") from None
    if values and min(values) < 1:
        raise ValueError(f"{name} expects positive ints. Received: {text!r}")
    return values


def split_labelled(labels, label_fraction, val_fraction, seed):
    """The labelled subset of the training images and its validation part.

    Args:
        labels: training labels `(N,)`.
        label_fraction: float in (0, 1]. Share of the training images whose labels are used.
        val_fraction: float in [0, 1). Share of the labelled subset held out for selection.
        seed: int. Picks the subset and the split (both stratified).

    Returns:
        `(train, val, other)` index arrays: fine-tuning images, validation images (empty
        when `val_fraction` is 0) and the training images outside the labelled subset (what
        the supervised arm pre-trains on).
    """
    from sklearn.model_selection import train_test_split

    if not 0 < label_fraction <= 1:
        raise ValueError(f"label_fraction must be in (0, 1]. Received: {label_fraction!r}")
    if not 0 <= val_fraction < 1:
        raise ValueError(f"val_fraction must be in [0, 1). Received: {val_fraction!r}")
    everything = np.arange(len(labels))
    if label_fraction < 1:
        labelled, other = train_test_split(
            everything, train_size=label_fraction, stratify=labels, random_state=seed
        )
    else:
        labelled, other = everything, everything[:0]
    if val_fraction == 0:
        return labelled, labelled[:0], other
    train, val = train_test_split(
        labelled, test_size=val_fraction, stratify=labels[labelled], random_state=seed
    )
    return train, val, other


def select_best(grid):
    """The validation-selected run of a (learning rate, length) grid.

    Args:
        grid: list of dicts with `learning_rate`, `steps`, `val_accuracy`, `val_loss` (the
            scores at the end of each run; None without a validation split) and anything else.

    Returns:
        The chosen dict: the highest validation accuracy; ties go to the lower validation
        loss, then to the shorter run and the smaller rate. Without a validation split the
        grid must hold exactly one run (nothing can be chosen), and that run is returned.
    """
    if not grid:
        raise ValueError("select_best needs at least one run.")
    if grid[0]["val_accuracy"] is None:
        if len(grid) > 1:
            raise ValueError(
                "Without a validation split nothing can choose between runs; give one learning "
                f"rate and one length. Received: {len(grid)} runs"
            )
        return grid[0]
    return min(
        grid,
        key=lambda p: (-p["val_accuracy"], p["val_loss"], p["steps"], p["learning_rate"]),
    )


def paired_stats(values, baseline):
    """Gain of `values` over `baseline` (paired by seed), in points, and paired tests.

    Returns a dict: `mean`, `std` (ddof 1), `per_seed`, `ci95` (t interval of the mean),
    `wins` / `losses` / `ties`, `t_test_p` (scipy `ttest_rel`, two-sided), `wilcoxon_p`
    (signed-rank, two-sided, exact for small samples) and `sign_test_p` (binomial test on
    wins vs losses). A p-value is None where the test is undefined (fewer than 2 seeds, or
    no difference at all).
    """
    values = np.asarray(values, "float64")
    baseline = np.asarray(baseline, "float64")
    gains = 100.0 * (values - baseline)
    n = len(gains)
    out = dict(
        mean=float(gains.mean()),
        std=float(gains.std(ddof=1)) if n > 1 else 0.0,
        per_seed=[round(float(g), 2) for g in gains],
        wins=int((gains > 1e-9).sum()),
        losses=int((gains < -1e-9).sum()),
        ties=int((np.abs(gains) <= 1e-9).sum()),
        ci95=None,
        t_test_p=None,
        wilcoxon_p=None,
        sign_test_p=None,
    )
    if n > 1 and out["std"] > 0:
        half = float(scipy.stats.t.ppf(0.975, n - 1) * out["std"] / np.sqrt(n))
        out["ci95"] = [out["mean"] - half, out["mean"] + half]
        out["t_test_p"] = float(scipy.stats.ttest_rel(values, baseline).pvalue)
    if out["wins"] + out["losses"] > 0:
        nonzero = gains[np.abs(gains) > 1e-9]
        out["wilcoxon_p"] = float(scipy.stats.wilcoxon(nonzero).pvalue)
        out["sign_test_p"] = float(
            scipy.stats.binomtest(out["wins"], out["wins"] + out["losses"], 0.5).pvalue
        )
    return out


def mean_std(values):
    values = np.asarray(values, "float64")
    return dict(
        mean=float(values.mean()),
        std=float(values.std(ddof=1)) if len(values) > 1 else 0.0,
        per_seed=[round(float(v), 4) for v in values],
    )


# ----------------------------------------------------------------------------- models


def adam(learning_rate, steps, warmup):
    schedule = WarmupDecay(learning_rate, total_steps=steps, warmup_steps=warmup, decay="cosine")
    return keras.optimizers.Adam(schedule, global_clipnorm=1.0)


def encoder_state(model):
    """NumPy copies of an encoder's weights by layer name (no buffer shared with `model`)."""
    return {
        layer.name: [np.array(w, copy=True) for w in layer.get_weights()]
        for layer in model.layers
        if layer.weights and layer.name not in ("head", "pre_logits")
    }


def build_encoder(state=None, seed=0):
    """A plain `ViT(include_top=False, pooling=None)`, random (`seed`) or from `state`."""
    keras.utils.set_random_seed(seed)
    encoder = ViT(
        "Ti/4", image_size=IMAGE_SIZE, num_channels=1, include_top=False, pooling=None, **MODEL
    )
    for name, values in (state or {}).items():
        encoder.get_layer(name).set_weights([np.array(v, copy=True) for v in values])
    return encoder


def classifier(seed, state=None):
    """The fine-tuning classifier; a pre-trained `state` goes in as `--init` does it."""
    source = build_encoder(state, seed) if state is not None else None
    keras.utils.set_random_seed(seed)
    model = ViT("Ti/4", image_size=IMAGE_SIZE, num_channels=1, num_classes=NUM_CLASSES, **MODEL)
    if source is not None:
        transfer_weights(source, model)  # what `keras-vit finetune --init` does
    return model


def pretrain_mpp(x_train, target, args, seed):
    """Masked patch prediction on all training images; returns (encoder state, final loss)."""
    keras.utils.set_random_seed(seed)
    model = mpp.build_mpp_model(
        "Ti/4", image_size=IMAGE_SIZE, num_channels=1, target=target, seed=seed, **MODEL
    )
    model.compile(optimizer=adam(args.pretrain_lr, args.pretrain_steps, args.pretrain_steps // 20))
    data = Batches(x_train, None, args.batch_size, args.pretrain_steps, seed, augment=True)
    history = model.fit(data, epochs=1, verbose=0)
    return encoder_state(mpp.extract_encoder(model)), float(history.history["loss"][-1])


def pretrain_mae(x_train, args, seed):
    """A masked autoencoder (`keras_vit.models.mae`) on all training images, labels unused, with
    the same optimizer, steps and batches as the MPP arms; returns (encoder state, final loss).

    The recipe's digits decoder (width 64, 2 blocks, 4 heads, MLP 128), mask ratio 0.75 and
    per-patch normalised targets (`norm_pix_loss`, the paper's choice) unless `--mae-*` say
    otherwise."""
    keras.utils.set_random_seed(seed)
    model = mae.build_mae_model(
        "Ti/4", image_size=IMAGE_SIZE, num_channels=1, seed=seed, mask_ratio=args.mae_mask_ratio,
        norm_pix_loss=not args.mae_raw_pixels, decoder_hidden_dim=64, decoder_num_layers=2,
        decoder_num_heads=4, decoder_mlp_dim=128, **MODEL,
    )  # fmt: skip
    model.compile(optimizer=adam(args.pretrain_lr, args.pretrain_steps, args.pretrain_steps // 20))
    data = Batches(x_train, None, args.batch_size, args.pretrain_steps, seed, augment=True)
    history = model.fit(data, epochs=1, verbose=0)
    return encoder_state(mae.extract_mae_encoder(model)), float(history.history["loss"][-1])


def pretrain_supervised(x, y, args, seed):
    """A classifier on the labels outside the labelled subset; returns (state, final loss)."""
    model = classifier(seed)
    model.compile(
        optimizer=adam(args.pretrain_lr, args.pretrain_steps, args.pretrain_steps // 20),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    data = Batches(x, y, args.batch_size, args.pretrain_steps, seed + 2000, augment=True)
    history = model.fit(data, epochs=1, verbose=0)
    return encoder_state(model), float(history.history["loss"][-1])


def _scores(logits, y):
    """(accuracy, mean cross-entropy) of logits `(N, K)` against labels `(N,)`."""
    logits = np.asarray(logits, "float64")
    logits = logits - logits.max(-1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    loss = float(-log_probs[np.arange(len(y)), y].mean())
    return float((logits.argmax(-1) == y).mean()), loss


def finetune(model, train, learning_rate, steps, args, seed, evaluate):
    """Fine-tunes `model` on `train` = (images 0..255, labels) for `steps` steps.

    Adam, `learning_rate` peak after a 10% linear warm-up, cosine decay to 0, gradient clipping
    at global norm 1, batch `args.finetune_batch_size`, random affine jitter. Returns
    `{name: (accuracy, loss)}` of the trained model on each `evaluate[name] = (images, labels)`,
    computed in one predict call (one compiled shape).
    """
    model.compile(
        optimizer=adam(learning_rate, steps, steps // 10),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    data = Batches(*train, args.finetune_batch_size, steps, seed + 1000)
    model.fit(data, epochs=1, verbose=0)
    names = list(evaluate)
    inputs = np.concatenate([to_inputs(evaluate[n][0]) for n in names])
    logits = model.predict(inputs, batch_size=len(inputs), verbose=0)
    scores, offset = {}, 0
    for n in names:
        labels = evaluate[n][1]
        scores[n] = _scores(logits[offset : offset + len(labels)], labels)
        offset += len(labels)
    return scores


def features(state, images, seed):
    """Frozen encoder features for few-shot, for each array of 0..255 `images`.

    Returns one `{"token": class token, "gap": mean patch token}` dict per array.
    """
    encoder = build_encoder(state, seed)
    out = []
    for x in images:
        # One eager call (no compiled predict function to build per encoder; the model is tiny).
        tokens = keras.ops.convert_to_numpy(encoder(to_inputs(x)))
        out.append({"token": tokens[:, 0], "gap": tokens[:, 1:].mean(axis=1)})
    return out


# ----------------------------------------------------------------------------- the study


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-4", help="Ints and ranges: 0,1,2 or 0-9.")
    parser.add_argument(
        "--targets", "--target", dest="targets", default="color",
        help=f"MPP targets, comma-separated from {TARGETS}, or 'all'. Defaults to color.",
    )
    parser.add_argument(
        "--supervised", action="store_true",
        help="Add the supervised pre-training arm (labels of the images outside the subset).",
    )
    parser.add_argument(
        "--mae", action="store_true",
        help="Add the masked autoencoder arm (keras_vit.models.mae, same steps and optimizer).",
    )
    parser.add_argument("--mae-mask-ratio", dest="mae_mask_ratio", type=float, default=0.75)
    parser.add_argument(
        "--mae-raw-pixels", dest="mae_raw_pixels", action="store_true",
        help="MAE targets the raw pixels (default: per-patch normalised, norm_pix_loss).",
    )
    parser.add_argument("--label-fraction", dest="label_fraction", type=float, default=0.1)
    parser.add_argument(
        "--val-fraction", dest="val_fraction", type=float, default=0.3,
        help="Share of the labelled images held out to choose LR and length (0: no choice).",
    )
    parser.add_argument("--pretrain-steps", dest="pretrain_steps", type=int, default=1500)
    parser.add_argument("--pretrain-lr", dest="pretrain_lr", type=float, default=1e-3)
    parser.add_argument("--batch-size", dest="batch_size", type=int, default=64)
    parser.add_argument(
        "--pretrain-once", dest="pretrain_once", action="store_true",
        help="Pre-train once (first seed) and fine-tune every seed from it (the old protocol).",
    )
    parser.add_argument(
        "--finetune-steps", dest="finetune_steps", default="1000,4000",
        help="Fine-tuning lengths (cosine schedule to 0), comma-separated; chosen on validation.",
    )
    parser.add_argument(
        "--finetune-lrs", "--finetune-lr", dest="finetune_lrs", default="1e-3,3e-3",
        help="Fine-tuning learning rates (Adam peak), comma-separated; chosen on validation.",
    )
    parser.add_argument("--finetune-batch-size", dest="finetune_batch_size", type=int, default=32)
    parser.add_argument(
        "--refit", action="store_true",
        help="Train the selected (learning rate, length) again on the whole labelled subset "
        "(validation images included) and report that model instead of the selected run.",
    )
    parser.add_argument(
        "--shots", default="1,5,10,25", help="Few-shot sizes per class ('' to skip)."
    )
    parser.add_argument("--out", default="runs/bench_mpp")
    parser.add_argument(
        "--summarise", nargs="+", metavar="RESULTS_JSON",
        help="Train nothing: merge the runs of these results.json files (one run per seed, "
        "e.g. seeds run as separate processes) and print the tables; with --out, write the "
        "merged results.json there.",
    )
    return parser


def check_args(args):
    """Checks the flags before any work; returns (seeds, targets, lrs, lengths, shots)."""
    for name in ("pretrain_steps", "batch_size", "finetune_batch_size"):
        value = getattr(args, name)
        if value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1. Received: {value}")
    seeds = parse_seeds(args.seeds)
    targets = parse_targets(args.targets)
    lrs = parse_floats(args.finetune_lrs, "--finetune-lrs")
    lengths = parse_shots(args.finetune_steps, "--finetune-steps")
    if not lengths:
        raise ValueError(f"--finetune-steps names no length. Received: {args.finetune_steps!r}")
    if args.val_fraction == 0 and len(lrs) * len(lengths) > 1:
        raise ValueError(
            "Without a validation split (--val-fraction 0) nothing can choose between runs: "
            "give one learning rate and one length. "
            f"Received: --finetune-lrs {args.finetune_lrs} --finetune-steps {args.finetune_steps}"
        )
    if args.supervised and args.label_fraction >= 1:
        raise ValueError(
            "The supervised arm pre-trains on the images outside the labelled subset; with "
            "--label-fraction 1 there are none. Drop --supervised. "
            f"Received: label_fraction={args.label_fraction}"
        )
    return seeds, targets, lrs, lengths, parse_shots(args.shots)


def arm_names(targets, supervised, mae=False):
    return (["scratch"] + [f"mpp-{t}" for t in targets] + (["mae"] if mae else [])
            + (["supervised"] if supervised else []))  # fmt: skip


class _Clock:
    """Wall and CPU (process) seconds since creation."""

    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def seconds(self):
        return dict(
            wall=round(time.perf_counter() - self.wall, 1),
            cpu=round(time.process_time() - self.cpu, 1),
        )


def run_seed(seed, data, args, plan, shared, log):
    """Pre-trains, fine-tunes (the grid, then the refit) and few-shot-evaluates every arm."""
    x_train, x_test, y_train, y_test = data
    targets, lrs, lengths, shots = plan
    train, val, other = split_labelled(y_train, args.label_fraction, args.val_fraction, seed)
    states, pretraining = {"scratch": None}, {}
    for target in targets:
        arm, clock = f"mpp-{target}", _Clock()
        if args.pretrain_once and arm in shared:
            states[arm], loss = shared[arm]
        else:
            states[arm], loss = pretrain_mpp(x_train, target, args, seed)
            shared[arm] = (states[arm], loss)
        pretraining[arm] = dict(final_loss=round(loss, 4), seconds=clock.seconds())
        log(f"seed {seed}  pre-train {arm:<16} loss {loss:.4f}  "
            f"{pretraining[arm]['seconds']['wall']} s")
    if args.mae:
        clock = _Clock()
        states["mae"], loss = pretrain_mae(x_train, args, seed)
        pretraining["mae"] = dict(final_loss=round(loss, 4), seconds=clock.seconds())
        log(f"seed {seed}  pre-train {'mae':<16} loss {loss:.4f}  "
            f"{pretraining['mae']['seconds']['wall']} s")
    if args.supervised:
        clock = _Clock()
        states["supervised"], loss = pretrain_supervised(x_train[other], y_train[other], args, seed)
        pretraining["supervised"] = dict(
            final_loss=round(loss, 4), images=int(len(other)), seconds=clock.seconds()
        )
        log(f"seed {seed}  pre-train supervised       loss {loss:.4f} on {len(other)} labelled "
            f"images  {pretraining['supervised']['seconds']['wall']} s")
    labelled = np.concatenate([train, val])
    test = (x_test, y_test)
    evaluate = {"test": test} if not len(val) else {"val": (x_train[val], y_train[val]),
                                                     "test": test}
    arms = {}
    for arm, state in states.items():
        clock = _Clock()
        grid = []
        for steps in lengths:
            for lr in lrs:
                scores = finetune(classifier(seed, state), (x_train[train], y_train[train]),
                                  lr, steps, args, seed, evaluate)
                val_acc, val_loss = scores.get("val", (None, None))
                grid.append(dict(learning_rate=lr, steps=steps, val_accuracy=val_acc,
                                 val_loss=val_loss, test_accuracy=scores["test"][0]))
        best = select_best(grid)
        result = dict(selected=best, test_accuracy=best["test_accuracy"], grid=grid)
        if args.refit and len(val):
            scores = finetune(classifier(seed, state), (x_train[labelled], y_train[labelled]),
                              best["learning_rate"], best["steps"], args, seed, {"test": test})
            result["test_accuracy"] = result["refit_test_accuracy"] = scores["test"][0]
        result["seconds"] = clock.seconds()
        arms[arm] = result
        val_text = (
            f"val {100 * best['val_accuracy']:.1f}%  " if best["val_accuracy"] is not None else ""
        )
        log(f"seed {seed}  fine-tune {arm:<16} lr {best['learning_rate']:g} x "
            f"{best['steps']} steps  {val_text}test {100 * result['test_accuracy']:.1f}%"
            f"{' (refit)' if 'refit_test_accuracy' in result else ''}  "
            f"{result['seconds']['wall']} s")
    fewshot = {}
    if shots:
        clock = _Clock()
        for arm, state in states.items():
            f_train, f_test = features(state, (x_train, x_test), seed)
            fewshot[arm] = {
                kind: {
                    str(n): r["accuracy"]
                    for n, r in fewshot_accuracy(
                        f_train[kind], y_train, f_test[kind], y_test, NUM_CLASSES, shots, seed=seed
                    ).items()
                }
                for kind in FEATURES
            }
        log(f"seed {seed}  few-shot {shots} shots x {len(states)} encoders, {shots[-1]}-shot "
            "(mean patch token): " + ", ".join(
                f"{arm} {100 * fewshot[arm]['gap'][str(shots[-1])]:.1f}%" for arm in states)
            + f"  {clock.seconds()['wall']} s")
    return dict(
        seed=seed,
        labelled=int(len(labelled)),
        finetune_images=int(len(train)),
        val_images=int(len(val)),
        pretraining=pretraining,
        arms=arms,
        fewshot=fewshot,
    )


def summarise(runs, arm_list, shots):
    """Mean, std and per-seed accuracies of each arm; gains over scratch with paired tests.

    `test_accuracy` is each arm's reported result (the refit when there was one);
    `selected_run_test_accuracy` the selected grid run's own (trained without the validation
    images); `selected` the chosen learning rates and lengths per seed.
    """
    test = {arm: [r["arms"][arm]["test_accuracy"] for r in runs] for arm in arm_list}
    summary = dict(test_accuracy={arm: mean_std(v) for arm, v in test.items()})
    summary["selected_run_test_accuracy"] = {
        arm: mean_std([r["arms"][arm]["selected"]["test_accuracy"] for r in runs])
        for arm in arm_list
    }
    summary["gain_over_scratch"] = {
        arm: paired_stats(test[arm], test["scratch"]) for arm in arm_list if arm != "scratch"
    }
    if "supervised" in arm_list:
        summary["supervised_minus_mpp"] = {
            arm: paired_stats(test["supervised"], test[arm])
            for arm in arm_list
            if arm.startswith("mpp-") or arm == "mae"
        }
    summary["selected"] = {
        arm: dict(
            steps=[r["arms"][arm]["selected"]["steps"] for r in runs],
            learning_rates=[r["arms"][arm]["selected"]["learning_rate"] for r in runs],
        )
        for arm in arm_list
    }
    if shots:
        summary["fewshot"] = {
            arm: {
                kind: {
                    str(n): mean_std([r["fewshot"][arm][kind][str(n)] for r in runs])
                    for n in shots
                }
                for kind in FEATURES
            }
            for arm in arm_list
        }
        summary["fewshot_gain_over_scratch"] = {
            arm: {
                kind: {
                    str(n): paired_stats(
                        [r["fewshot"][arm][kind][str(n)] for r in runs],
                        [r["fewshot"]["scratch"][kind][str(n)] for r in runs],
                    )
                    for n in shots
                }
                for kind in FEATURES
            }
            for arm in arm_list
            if arm != "scratch"
        }
    return summary


def _p(value):
    return "n/a" if value is None else f"{value:.2g}"


def _gains(g):
    return ", ".join(f"{x:+.1f}" for x in g["per_seed"])


def format_tables(summary, arm_list, shots):
    """Markdown tables of the summary (what RESULTS.md shows)."""
    acc = summary["test_accuracy"]
    seeds = len(acc["scratch"]["per_seed"])
    lines = [
        f"Test accuracy, {seeds} seeds (mean +- std over seeds; gains in points, paired by seed):",
        "",
        "| arm | test accuracy | gain over scratch | per-seed gains | wins/losses | "
        "paired t-test p | Wilcoxon p |",
        "|---|---|---|---|---|---|---|",
    ]
    for arm in arm_list:
        a = acc[arm]
        text = f"| {arm} | {100 * a['mean']:.1f} +- {100 * a['std']:.1f}% |"
        if arm == "scratch":
            lines.append(text + " - | - | - | - | - |")
            continue
        g = summary["gain_over_scratch"][arm]
        lines.append(
            text + f" {g['mean']:+.1f} +- {g['std']:.1f} | {_gains(g)} | "
            f"{g['wins']}/{g['losses']} | {_p(g['t_test_p'])} | {_p(g['wilcoxon_p'])} |"
        )
    for arm, g in summary.get("supervised_minus_mpp", {}).items():
        lines.append(
            f"| supervised - {arm} | | {g['mean']:+.1f} +- {g['std']:.1f} | {_gains(g)} | "
            f"{g['wins']}/{g['losses']} | {_p(g['t_test_p'])} | {_p(g['wilcoxon_p'])} |"
        )
    lines += ["", "Chosen on validation (learning rate x steps, per seed):", ""]
    for arm, chosen in summary["selected"].items():
        pairs = zip(chosen["learning_rates"], chosen["steps"], strict=True)
        lines.append(f"- {arm}: " + ", ".join(f"{lr:g} x {n}" for lr, n in pairs))
    if shots:
        lines += [
            "",
            "Few-shot linear evaluation of the pre-trained encoders (test accuracy, mean +- std):",
            "",
            "| encoder | feature | " + " | ".join(f"{n}-shot" for n in shots) + " |",
            "|---|---|" + "---|" * len(shots),
        ]
        for arm in arm_list:
            for kind in FEATURES:
                cells = summary["fewshot"][arm][kind]
                lines.append(
                    f"| {arm} | {kind} | "
                    + " | ".join(
                        f"{100 * cells[str(n)]['mean']:.1f} +- {100 * cells[str(n)]['std']:.1f}%"
                        for n in shots
                    )
                    + " |"
                )
    return "\n".join(lines)


def merge_results(paths):
    """One results dict from several `results.json` (runs merged, sorted by seed).

    The files must share the arms and every setting but the seeds (and `out`); a seed in two
    files is an error. Runs are independent per seed (pre-training included), so seeds run in
    separate processes merge into what one process would have written.
    """
    results = []
    for path in paths:
        with open(path) as f:
            results.append(json.load(f))
    first = results[0]

    def key(result):
        settings = {
            k: v for k, v in result["settings"].items() if k not in ("seeds", "out", "summarise")
        }
        return json.dumps([settings, result["arms"], result["backend"]], sort_keys=True)

    for path, result in zip(paths[1:], results[1:], strict=True):
        if key(result) != key(first):
            raise ValueError(
                f"{path} has other settings or arms than {paths[0]}; only the seeds may differ."
            )
    runs = sorted((run for r in results for run in r["runs"]), key=lambda run: run["seed"])
    seeds = [run["seed"] for run in runs]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"A seed appears in more than one file. Seeds: {seeds}")
    shots = parse_shots(first["settings"]["shots"])
    return dict(
        first,
        command=[r["command"] for r in results],
        date=[r["date"] for r in results],
        settings=dict(first["settings"], seeds=seeds, out=None),
        runs=runs,
        summary=summarise(runs, first["arms"], shots),
        seconds=dict(
            wall=round(sum(r["seconds"]["wall"] for r in results), 1),
            cpu=round(sum(r["seconds"]["cpu"] for r in results), 1),
        ),
    )


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.summarise:
        result = merge_results(args.summarise)
        print(f"seeds {result['settings']['seeds']} from {len(args.summarise)} file(s)")
        print(format_tables(result["summary"], result["arms"],
                            parse_shots(result["settings"]["shots"])))
        if args.out != build_parser().get_default("out"):
            os.makedirs(args.out, exist_ok=True)
            with open(os.path.join(args.out, "results.json"), "w") as f:
                json.dump(result, f, indent=1)
        return result
    seeds, targets, lrs, lengths, shots = check_args(args)
    arm_list = arm_names(targets, args.supervised, args.mae)
    clock = _Clock()

    def log(message):
        print(f"[{time.perf_counter() - clock.wall:7.1f} s] {message}", flush=True)

    data = load_digits(IMAGE_SIZE, 0.3, 0)  # fixed 30% test split
    log(f"{keras.backend.backend()}: seeds {seeds}, arms {arm_list}, learning rates "
        f"{[f'{lr:g}' for lr in lrs]} x lengths {lengths}, refit {args.refit}, shots {shots}")
    runs, shared = [], {}
    os.makedirs(args.out, exist_ok=True)
    for seed in seeds:
        seed_clock = _Clock()
        runs.append(run_seed(seed, data, args, (targets, lrs, lengths, shots), shared, log))
        runs[-1]["seconds"] = seed_clock.seconds()
        summary = summarise(runs, arm_list, shots)
        result = dict(
            backend=keras.backend.backend(),
            versions=dict(keras=keras.__version__, numpy=np.__version__,
                          scipy=scipy.__version__),
            machine=dict(platform=platform.platform(), processor=platform.processor(),
                         cpu_count=os.cpu_count()),
            date=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            command="python benchmarks/mpp_digits.py "
            + " ".join(sys.argv[1:] if argv is None else argv),
            settings=dict(vars(args), seeds=seeds, targets=list(targets)),
            model=MODEL,
            test_examples=int(len(data[3])),
            arms=arm_list,
            runs=runs,
            summary=summary,
            seconds=clock.seconds(),
        )
        with open(os.path.join(args.out, "results.json"), "w") as f:  # after every seed
            json.dump(result, f, indent=1)
    print(format_tables(summary, arm_list, shots), flush=True)
    log(f"done: {len(seeds)} seeds, {result['seconds']['cpu']} s CPU; results in "
        f"{os.path.join(args.out, 'results.json')}")
    return result


if __name__ == "__main__":
    main()
