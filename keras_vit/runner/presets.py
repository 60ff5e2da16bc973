"""Every recipe's presets and run settings, as data (no framework is imported here).

`get_config(recipe, preset, smoke)` is what each recipe module's `get_config` returns; the
command line builds and checks a whole config from it (flags, experiment files,
`keras_vit.runner.checks`) before TensorFlow, JAX or PyTorch is imported, so a bad value is
refused within a second.

The digits presets' warm-ups scale with the run: `warmup_steps=None` with `warmup_fraction` F is
F of the run's total steps (`keras_vit.runner.steps.plan_steps`), so `--epochs 1` shortens the
warm-up with the run; an explicit `--warmup-steps` (or `warmup_epochs`) is used as given, and
one not shorter than the run is refused. The paper presets keep the paper's step counts.
"""

import os

from keras_vit.runner.threads import backend_name

# Settings of a run rather than of the experiment: shared by every training recipe.
RUNTIME = dict(
    data_dir=None,
    num_channels=3,
    on_corrupt="error",
    download=False,
    eval_batch_size=256,
    validation_freq=1,  # 0: no per-epoch validation (the test metrics are computed at the end)
    # Share of the training split held out for per-epoch validation and best.keras when the
    # dataset has no validation split of its own (keras_vit.data.load_splits); 0: none.
    validation_fraction=0.1,
    steps_per_epoch=None,  # None: one pass over the training data
    warmup_epochs=None,  # set: warm-up for this many epochs (replaces warmup_steps)
    # With warmup_steps None: warm-up for this share of the run's steps (scales with the run).
    warmup_fraction=None,
    mixed_precision=None,
    # Training steps per call of the compiled train function (Keras' `steps_per_execution`):
    # > 1 cuts the per-step host overhead (Python, callbacks) that can leave a fast GPU idle.
    steps_per_execution=1,
    distribution=None,
    # The (batch, model) device mesh of the sharding strategies (fsdp, tensor_parallel, fsdp_tp;
    # None: every device on the strategy's axis) and the devices per replica of model_parallel.
    mesh=None,
    model_parallel_size=None,
    # Several processes (JAX, keras.distribution.initialize): None reads Keras'
    # KERAS_DISTRIBUTION_JOB_ADDRESSES / _NUM_PROCESSES / _PROCESS_ID; multi_host=True lets JAX
    # find the cluster (Cloud TPU pod, SLURM, ...); init_timeout bounds the wait for the others.
    job_addresses=None,
    num_processes=None,
    process_id=None,
    multi_host=False,
    init_timeout=300,  # keras_vit.training.multihost.DEFAULT_TIMEOUT (a test checks they agree)
    seed=0,
    out="runs/run",
    overwrite=False,  # True: what a finished run wrote in `out` is removed first
    backup_every=1,  # epochs between resumable backups (and always after the last epoch)
    checkpoints=True,  # checkpoints/last.keras and best.keras
    tensorboard=True,  # logs/
    verbose="auto",  # Keras fit verbosity; "auto": a progress bar on a terminal, else 2
)

# The one smoke shrink (tests): a 2-layer width-32 model, 16 px, batch 32, 3 epochs of 8 steps,
# validation after the last epoch only.
SMOKE = dict(
    model="mu/4",
    model_overrides={},
    image_size=16,
    batch_size=32,
    epochs=3,
    steps=None,
    steps_per_epoch=8,
    validation_freq=3,
    warmup_steps=1,
    warmup_epochs=None,
    warmup_fraction=None,
    eval_batch_size=270,
)

# --- pretrain: paper Sec. 4.1, Appendix B.1, Table 3 ------------------------------------------

# ImageNet-21k, ViT-B/16 (lr 1e-3, wd 0.03, dropout 0.1), Adam 0.9/0.999, batch 4096, 10k linear
# warm-up then linear decay, 90 epochs, 224 px, pre-logits of hidden size.
PRETRAIN_PAPER = dict(
    model="B/16",
    model_overrides={},
    image_size=224,
    dataset="tfds:imagenet21k",
    eval_split=None,
    batch_size=4096,
    epochs=90,
    steps=None,
    optimizer="adamw",
    learning_rate=1e-3,
    weight_decay=0.03,
    warmup_steps=10_000,
    decay="linear",
    global_clipnorm=1.0,
    gradient_accumulation_steps=None,
    label_smoothing=0.0,
    dropout_rate=0.1,
    patch_dropout_rate=0.0,  # patch dropout (FLIP, timm's patch_drop_rate): in training only
    drop_path_rate=0.0,  # stochastic depth (DeiT, BEiT, MAE fine-tuning): in training only
    remat=False,  # gradient checkpointing of every transformer block (memory for compute)
    # "auto" is Keras' choice: XLA on JAX, and on TensorFlow only with a GPU/TPU; True also
    # compiles TensorFlow on CPU (faster: benchmarks/RESULTS.md), on PyTorch torch.compile.
    jit_compile="auto",
    pooling="token",
    fc_norm=False,  # a LayerNorm on the pooled vector instead of the final norm (MAE, BEiT)
    representation_size=768,
    crop_scale=(0.08, 1.0),
    crop_ratio=(3 / 4, 4 / 3),
    rotation=0.0,  # degrees; > 0 rotates each crop by a random angle in [-rotation, rotation]
    flip=None,
    augment=[],
    patch_sizes=None,  # FlexiViT: a list of patch sizes, one drawn per batch (keras_vit.FlexiViT)
    # Fine-tuning toolkit (off by default): every image N times per batch under
    # different augmentations (DeiT), a moving average of the weights kept by the optimizer
    # (its momentum; the average is the run's model), layer-wise learning-rate decay (BEiT).
    repeated_augmentation=1,
    ema=None,
    layer_decay=None,
)

# The model and data of every offline `digits` preset: a 4-layer width-64 ViT (MLP 128, 4 heads)
# with 4 px patches on scikit-learn's digits (each preset picks its image size).
DIGITS_MODEL = dict(
    model="Ti/4",
    model_overrides=dict(num_layers=4, hidden_dim=64, mlp_dim=128, num_heads=4),
    dataset="digits",
)

# The digits jitter of the fine-tuning and quickstart presets. Digits are centred: mild crops
# (area 80-100%, aspect 0.9-1.1; (0.6, 1) with ratios 3/4-4/3 gives 97.4% fine-tuning) rotated
# by up to 12 degrees in the same resampling pass (Keras' RandomRotation/Translation/Zoom layers
# resample the batch again, a blur the test images never get: 90% test accuracy with them).
DIGITS_JITTER = dict(crop_scale=(0.8, 1.0), crop_ratio=(0.9, 1.1), rotation=12.0)

# Offline default: the digits model at 16 px, batch 64, 30 epochs, AdamW 2e-3 (the paper's
# weight decay 0.03 and linear decay), no dropout, pre-logits of width 64, and a warm-up of 100
# of the run's 510 steps (30 epochs of 17 batches), scaled with the run.
PRETRAIN_DIGITS = dict(
    PRETRAIN_PAPER,
    **DIGITS_MODEL,
    image_size=16, batch_size=64, epochs=30,
    learning_rate=2e-3, warmup_steps=None, warmup_fraction=100 / 510,
    dropout_rate=0.0, representation_size=64, crop_scale=(0.6, 1.0),
)  # fmt: skip

# --- finetune: paper Sec. 4.1, Appendix B.1.1, Table 4 ----------------------------------------

# CIFAR-10 from ImageNet-21k ViT-B/16: batch 512, 10k steps, 384 px, LR from {0.001, 0.003,
# 0.01, 0.03} (0.01 here), 500 warm-up steps (official code), cosine.
FINETUNE_PAPER = dict(
    PRETRAIN_PAPER,
    dataset="tfds:cifar10",
    image_size=384,
    batch_size=512,
    epochs=None,
    steps=10_000,
    optimizer="sgd",
    learning_rate=0.01,
    weight_decay=0.0,
    warmup_steps=500,
    decay="cosine",
    dropout_rate=0.0,
    representation_size=None,
    # The head's pooling ("token", "gap") and fc_norm: None keeps the --init model's (from
    # scratch: "token", no fc_norm); MAE's fine-tuning protocol is "gap" with fc_norm.
    pooling=None,
    fc_norm=None,
    # --init: a .keras model, a Hugging Face folder, or a timm checkpoint file with its
    # timm model name (timm_name); keras_vit.runner.init_checkpoint. The checkpoint defines
    # the architecture: `model` and `model_overrides` then only state it (refused when they
    # contradict it).
    init=None,
    timm_name=None,
    weights=None,
    lora_rank=None,
    lora_targets=("query", "value"),
    lora_alpha=None,
    # Quantization-aware training (keras_vit.quantization_aware): fake-quantized int8 inputs
    # (ranges from the first batch, then a moving average) and qat_weight_bits weights.
    qat=False,
    qat_weight_bits=7,
    # DeiT distillation from a teacher (.keras): "hard" or "soft" (temperature distillation_tau);
    # the student is built with the distillation token.
    teacher=None,
    distillation=None,
    distillation_tau=1.0,
    # NaFlex (--naflex): each image at its own aspect ratio, at most max_patches patches
    # (keras_vit.runner.naflex); a plain --init checkpoint fine-tunes as its NaFlex twin.
    naflex=False,
    max_patches=None,
)

# Offline default: the paper's fine-tuning optimizer (SGD momentum 0.9, cosine, clip 1, no weight
# decay) on digits at 24 px, from scratch unless --init/--weights. 1,257 training images overfit
# a ViT: what brings it from 94.6% to 98.2-98.9% test accuracy (benchmarks/RESULTS.md) is
# (1) training crops resampled on the same pixel grid as the evaluation resize (a data-pipeline
# fix), (2) the quickstart's jitter (`DIGITS_JITTER`: mild crops plus a rotation of +-12 degrees
# in one resampling pass), (3) label smoothing 0.1 and 60 epochs of batch 32, LR 0.03, a warm-up
# of 100 of the run's 2,100 steps (60 epochs of 35 batches), scaled with the run (about 5
# minutes on 2 CPU cores with JAX).
FINETUNE_DIGITS = dict(
    FINETUNE_PAPER,
    **DIGITS_MODEL,
    **DIGITS_JITTER,
    image_size=24, batch_size=32, epochs=60, steps=None,
    learning_rate=0.03, warmup_steps=None, warmup_fraction=100 / 2100,
    label_smoothing=0.1,
)  # fmt: skip

# --- pretrain-mpp: paper Sec. 4.6, Appendix B.1.2 ---------------------------------------------

# Adam, LR 2e-4, 10k warm-up steps, cosine decay, batch 4096, 1M steps (gains flatten after
# 100k). ViT-B/16 at 224 px; 3-bit mean colour targets, 50% corruption, 80/10/10.
MPP_PAPER = dict(
    PRETRAIN_PAPER,
    dataset="tfds:imagenet2012", batch_size=4096, epochs=None, steps=1_000_000,
    optimizer="adam", learning_rate=2e-4, weight_decay=0.0,
    warmup_steps=10_000, decay="cosine",
    dropout_rate=0.0, representation_size=None,
    target="color", corruption_rate=0.5, mask_fraction=0.8, random_fraction=0.1,
)  # fmt: skip

# Offline default: the supervised digits preset's model, image size, batch, warm-up and crops;
# 2000 steps at LR 1e-3 (the warm-up: 100 of the run's 2,014 steps, 106 epochs of 19 batches,
# scaled with the run).
SHARED_WITH_PRETRAIN = (*DIGITS_MODEL, "image_size", "batch_size")
MPP_DIGITS = dict(
    MPP_PAPER,
    **{key: PRETRAIN_DIGITS[key] for key in (*SHARED_WITH_PRETRAIN, "crop_scale")},
    steps=2000, learning_rate=1e-3, warmup_steps=None, warmup_fraction=100 / 2014,
)  # fmt: skip

# --- pretrain-mae: He et al., 2022 -------------------------------------------------------------

# Appendix A.1 (Table 8): ViT-B/16 at 224 px, ImageNet-1k.
MAE_PAPER = dict(
    PRETRAIN_PAPER,
    dataset="tfds:imagenet2012", batch_size=4096, epochs=800, steps=None,
    optimizer="adamw", learning_rate=1.5e-4 * 4096 / 256, weight_decay=0.05, beta_2=0.95,
    warmup_steps=0, decay="cosine", global_clipnorm=None,
    dropout_rate=0.0, representation_size=None, crop_scale=(0.2, 1.0), flip=True,
    mask_ratio=0.75, norm_pix_loss=True, decoder_hidden_dim=512, decoder_num_layers=8,
    decoder_num_heads=16, decoder_mlp_dim=2048,
)  # fmt: skip

# Offline default: the digits model and data of the other digits presets; a small decoder
# (width 64, 2 blocks, 4 heads), raw-pixel targets, 2000 steps at LR 1e-3, no warm-up.
MAE_DIGITS = dict(
    MAE_PAPER,
    **{key: PRETRAIN_DIGITS[key] for key in (*SHARED_WITH_PRETRAIN, "crop_scale")},
    epochs=None, steps=2000, learning_rate=1e-3, flip=None,
    norm_pix_loss=False, decoder_hidden_dim=64, decoder_num_layers=2, decoder_num_heads=4,
    decoder_mlp_dim=128,
)  # fmt: skip

# --- quickstart ---------------------------------------------------------------------------------


# The quickstart's settings (`keras_vit.runner.quickstart.train` takes them as keyword
# overrides): the model, the schedule and the seed.
QUICKSTART_DEFAULTS = dict(
    # a 4-layer width-64 ViT (MLP 128, 4 heads) cutting 16 px digits into 4 px patches
    image_size=16, patch_size=4, num_layers=4, hidden_dim=64, mlp_dim=128, num_heads=4,
    # 60 epochs of batch 64, AdamW 2e-3 with weight decay 0.05 after a warm-up of 5% of the run
    # (3 of the 60 epochs; `warmup_epochs=N` sets it instead, and must be shorter than the run)
    epochs=60, batch_size=64, learning_rate=2e-3, weight_decay=0.05, warmup_fraction=0.05,
    warmup_epochs=None,
    label_smoothing=0.1,
    seed=0,
    # no validation split: the quickstart evaluates the test split once, after training; > 0
    # holds out that share of the training digits and validates on it after every epoch
    validation_fraction=0.0,
)


def _quickstart_digits():
    # The supervised digits preset (a 4-layer width-64 ViT, 4 px patches on 16 px digits) with
    # the quickstart's numbers (60 epochs of batch 64, AdamW 2e-3 with weight decay 0.05, label
    # smoothing 0.1), cosine decay after a warm-up of 5% of the run (3 of the default 60
    # epochs), the fine-tuning jitter and no pre-logits layer.
    settings = ("image_size", "epochs", "batch_size", "learning_rate", "weight_decay",
                "label_smoothing")  # fmt: skip
    return dict(
        PRETRAIN_DIGITS,
        **DIGITS_JITTER,
        **{key: QUICKSTART_DEFAULTS[key] for key in settings},
        warmup_steps=None,
        warmup_fraction=QUICKSTART_DEFAULTS["warmup_fraction"],
        decay="cosine",
        representation_size=None,
    )


QUICKSTART_DIGITS = _quickstart_digits()


def quickstart_out():
    """The quickstart's default folder, one per backend: `runs/quickstart/<backend>` (so that
    `KERAS_BACKEND=jax keras-vit quickstart` runs after the TensorFlow one)."""
    return os.path.join("runs", "quickstart", backend_name())


# --- fewshot: paper Sec. 4.1, "Metrics" ----------------------------------------------------------

FEWSHOT_DEFAULTS = dict(
    model_path=None,
    dataset="digits",
    data_dir=None,
    eval_split=None,
    image_size=None,  # None: the model's input size
    num_channels=3,
    batch_size=256,
    shots=(1, 5, 10, 25),
    seeds=(0, 1, 2),
    on_corrupt="error",
    download=False,
    mixed_precision=None,
    distribution=None,
    out="runs/fewshot",
    overwrite=False,  # True: a finished evaluation's metrics.json in `out` is replaced
    seed=0,
)


def fewshot_config(preset="digits", smoke=False):
    """The few-shot config. `smoke=True`: shots (1, 2), one seed."""
    if preset not in ("digits", "paper"):
        raise ValueError(f"preset must be 'digits' or 'paper'. Received: preset={preset!r}")
    config = dict(FEWSHOT_DEFAULTS)
    if preset == "paper":
        config.update(dataset="tfds:cifar10", image_size=224, shots=(1, 5, 10, 25))
    if smoke:
        config.update(shots=(1, 2), seeds=(0,))
    return config


# --- the table ----------------------------------------------------------------------------------

# recipe: (presets, run settings, smoke overrides). Run settings may depend on the preset.
RECIPES = {
    "pretrain": (
        {"digits": PRETRAIN_DIGITS, "paper": PRETRAIN_PAPER},
        lambda preset: dict(out="runs/pretrain"),
        dict(representation_size=32),
    ),
    "finetune": (
        {"digits": FINETUNE_DIGITS, "paper": FINETUNE_PAPER},
        lambda preset: dict(out="runs/finetune"),
        dict(learning_rate=0.03),
    ),
    "pretrain_mpp": (
        {"digits": MPP_DIGITS, "paper": MPP_PAPER},
        lambda preset: dict(out="runs/mpp", validation_freq=0),
        dict(batch_size=16, epochs=None, steps=6, eval_batch_size=64, validation_freq=0),
    ),
    "pretrain_mae": (
        {"digits": MAE_DIGITS, "paper": MAE_PAPER},
        # The paper's 40 warm-up epochs: `warmup_epochs` is a run setting (RUNTIME), set here.
        lambda preset: dict(
            out="runs/mae", validation_freq=0, warmup_epochs=40 if preset == "paper" else None
        ),
        dict(batch_size=16, epochs=None, steps=6, eval_batch_size=64, validation_freq=0,
             decoder_hidden_dim=16, decoder_num_layers=1, decoder_num_heads=2,
             decoder_mlp_dim=32),  # fmt: skip
    ),
    "quickstart": (
        {"digits": QUICKSTART_DIGITS},
        lambda preset: dict(
            out=quickstart_out(),
            num_channels=1,
            validation_freq=0,
            checkpoints=False,
            tensorboard=False,
            backup_every=10,  # a 60-epoch run of seconds per epoch: back up every 10 epochs
        ),
        dict(validation_freq=0, warmup_fraction=None, warmup_epochs=1),
    ),
}


def make_config(presets, preset, smoke=False, runtime=None, smoke_overrides=None):
    """`presets[preset]` + `RUNTIME` (+ `runtime`), shrunk by `SMOKE` (+ `smoke_overrides`)."""
    if preset not in presets:
        raise ValueError(f"preset must be one of {sorted(presets)}. Received: preset={preset!r}")
    config = dict(presets[preset], **RUNTIME)
    config.update({k: v for k, v in presets[preset].items() if k in RUNTIME})
    config.update(runtime or {})
    if smoke:
        config.update(SMOKE, **(smoke_overrides or {}))
    return config


def get_config(recipe, preset="digits", smoke=False):
    """The config of `recipe` (`"pretrain"`, `"finetune"`, `"pretrain_mpp"`, `"pretrain_mae"`,
    `"quickstart"`, `"fewshot"`) for `preset`, shrunk for tests with `smoke=True`.

    Example:

    >>> get_config("finetune", smoke=True)["model"]
    'mu/4'
    """
    if recipe == "fewshot":
        return fewshot_config(preset, smoke)
    if recipe not in RECIPES:
        raise ValueError(f"recipe must be one of {sorted(RECIPES)}. Received: recipe={recipe!r}")
    presets, runtime, smoke_overrides = RECIPES[recipe]
    return make_config(presets, preset, smoke, runtime(preset), smoke_overrides)


def recipe(name):
    """An object whose `get_config(preset, smoke=...)` is `get_config(name, ...)` (what a recipe
    module offers, without importing it)."""
    import functools
    import types

    return types.SimpleNamespace(name=name, get_config=functools.partial(get_config, name))
