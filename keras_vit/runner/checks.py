"""The checks of a training config's values, before any data is loaded (no framework imported).

The command line runs `check_config` on the merged config (preset < file < smoke < flags)
before TensorFlow, JAX or PyTorch is imported, and every recipe runs it again first thing
(a library caller's config), so a bad value is refused within a second with the key, its flag
and the value received.
"""

import math
import numbers
import os

from keras_vit.runner.flag_names import flag_name, flag_or_key
from keras_vit.runner.threads import backend_name
from keras_vit.training.settings import (
    DISTILLATION_MODES,
    check_decay,
    check_ema,
    check_lora_settings,
    check_repeats,
    check_validation_fraction,
)

# A peak learning rate above this is a typo (1e30, 3e3 for 3e-3): every optimizer here
# (AdamW, Adam, SGD with momentum) diverges long before it.
MAX_LEARNING_RATE = 10.0


def _is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _label(key):
    return f"{key} ({flag_or_key(key)})"


def check_finite(config):
    """Refuses a non-finite number (`inf`, `nan`) anywhere in `config`, naming its key."""
    for key, value in config.items():
        values = value if isinstance(value, (list, tuple)) else [value]
        bad = [v for v in values if _is_real(v) and not math.isfinite(v)]
        if bad:
            raise ValueError(
                f"{_label(key)} must be a finite number; {bad[0]!r} would make the run "
                f"diverge or never end. Received: {key}={value!r}"
            )


def check_config(config):
    """Checks a training config's numbers before any data is loaded; raises `ValueError`."""
    check_finite(config)
    for key in ("steps", "epochs", "batch_size", "eval_batch_size", "steps_per_epoch",
                "warmup_epochs", "backup_every", "init_timeout", "steps_per_execution"):
        value = config.get(key)
        if value is None and key not in ("batch_size", "eval_batch_size"):
            continue
        if not _is_int(value) or value < 1:
            raise ValueError(
                f"{key} ({flag_or_key(key)}) must be a positive integer. Received: {key}={value!r}"
            )
    if config.get("steps") is not None and config.get("epochs") is not None:
        raise ValueError(
            "Give either steps (--steps) or epochs (--epochs), not both: drop one of them. "
            f"Received: steps={config['steps']!r}, epochs={config['epochs']!r}"
        )
    if config.get("steps") is None and config.get("epochs") is None:
        raise ValueError("One of steps (--steps) or epochs (--epochs) must be set. Received none.")
    if (config.get("steps_per_execution") or 1) > 1 and backend_name() == "torch":
        raise ValueError(
            "steps_per_execution (--steps-per-execution) must be 1 on the PyTorch backend "
            "(Keras runs PyTorch one step per call). Received: "
            f"steps_per_execution={config['steps_per_execution']!r}"
        )
    _check_warmup_settings(config)
    lr = config.get("learning_rate")
    if not _is_real(lr) or not 0 < lr <= MAX_LEARNING_RATE:
        raise ValueError(
            f"learning_rate (--lr) must be > 0 and at most {MAX_LEARNING_RATE:g} (a larger peak "
            f"rate diverges with every optimizer here). Received: {lr!r}"
        )
    for key in ("weight_decay", "rotation"):
        value = config.get(key)
        if value is not None and (not _is_real(value) or value < 0):
            raise ValueError(f"{_label(key)} must be a number >= 0. Received: {key}={value!r}")
    for key in ("label_smoothing", "dropout_rate", "drop_path_rate", "patch_dropout_rate"):
        value = config.get(key, 0.0) or 0.0
        if not _is_real(value) or not 0 <= value < 1:
            raise ValueError(f"{_label(key)} must be in [0, 1). Received: {key}={value!r}")
    _check_self_supervised(config)
    tau = config.get("distillation_tau")
    if tau is not None and (not _is_real(tau) or not tau > 0):
        raise ValueError(f"distillation_tau (--distillation-tau) must be > 0. Received: {tau!r}")
    check_repeats(config.get("repeated_augmentation", 1), config["batch_size"])
    check_ema(config.get("ema"))
    if config.get("layer_decay") is not None:
        check_decay(config["layer_decay"])
    check_validation_fraction(config.get("validation_fraction", 0.0))
    _check_distribution(config)
    freq = config.get("validation_freq", 1)
    if not _is_int(freq) or freq < 0:
        raise ValueError(
            f"validation_freq must be an integer >= 0 (0: no per-epoch validation). "
            f"Received: validation_freq={freq!r}"
        )


def _check_distribution(config):
    """The distribution mode and the mesh arguments that go with it
    (`keras_vit.training.distribution.check_mode`). That module imports Keras, so it is read
    only when the config asks for a distribution: a default run stays framework-free here."""
    keys = ("distribution", "model_parallel_size", "mesh")
    if all(config.get(key) is None for key in keys):
        return
    from keras_vit.training.distribution import check_mode

    check_mode(
        config.get("distribution"),
        model_parallel_size=config.get("model_parallel_size"),
        mesh=config.get("mesh"),
    )


def _check_warmup_settings(config):
    warmup, fraction = config.get("warmup_steps"), config.get("warmup_fraction")
    if warmup is None:
        if fraction is None and config.get("warmup_epochs") is None:
            raise ValueError(
                "warmup_steps (--warmup-steps) must be an integer >= 0, or None with "
                "warmup_fraction (a share of the run). Received: warmup_steps=None, "
                "warmup_fraction=None"
            )
    elif not _is_int(warmup) or warmup < 0:
        raise ValueError(
            f"warmup_steps (--warmup-steps) must be an integer >= 0. Received: {warmup!r}"
        )
    if fraction is not None and (not _is_real(fraction) or not 0 <= fraction < 1):
        raise ValueError(
            f"warmup_fraction (config key) must be a share of the run in [0, 1). Received: "
            f"warmup_fraction={fraction!r}"
        )
    if warmup is not None and config.get("steps") is not None and not config.get("warmup_epochs"):
        check_warmup(warmup, config["steps"])


def _check_self_supervised(config):
    """The masking of the self-supervised recipes: a share that leaves something to learn."""
    ratio = config.get("mask_ratio")
    if "mask_ratio" in config and (not _is_real(ratio) or not 0 < ratio < 1):
        raise ValueError(
            "mask_ratio (--mask-ratio) must be in (0, 1): the share of each image's patches "
            "the encoder does not see and the decoder reconstructs (0 masks nothing, so the "
            f"loss is 0 and nothing is learnt; the paper's is 0.75). Received: {ratio!r}"
        )
    rate = config.get("corruption_rate")
    if "corruption_rate" in config and (not _is_real(rate) or not 0 < rate <= 1):
        raise ValueError(
            "corruption_rate (--corruption-rate) must be in (0, 1]: the share of patches "
            "corrupted and predicted (0 leaves nothing to predict; the paper's is 0.5). "
            f"Received: {rate!r}"
        )


def check_warmup(warmup, total):
    if warmup >= total:
        raise ValueError(
            f"warmup_steps ({warmup}, --warmup-steps) must be smaller than the total number of "
            f"training steps ({total}): lower --warmup-steps or train longer."
        )


def check_recipe_config(recipe, config, files=True):
    """Every check of a recipe's config that needs no framework (`check_config`, then what
    the recipe adds: FlexiViT patch sizes, LoRA, distillation, NaFlex, `--init`'s format).
    `files=False` (`--print-config`) leaves out what depends on files existing here (the
    `--init` checkpoint, the teacher): the values are checked, the environment is not."""
    check_config(config)
    if recipe in ("pretrain", "finetune"):
        check_patch_sizes(config)
    if recipe != "finetune":
        return
    from keras_vit.runner.init_checkpoint import init_format
    from keras_vit.runner.naflex import check_naflex

    lora_settings(config)
    check_qat(config)
    check_distillation_settings(config, files=files)
    check_naflex(config)
    if config.get("init") and config.get("weights"):
        raise ValueError(
            "Give either --init (a checkpoint) or --weights (an .npz), not both. Received: "
            f"init={config['init']!r}, weights={config['weights']!r}"
        )
    if config.get("timm_name") and not config.get("init"):
        raise ValueError(
            "--timm-name names the architecture of a timm checkpoint given with --init FILE. "
            f"Received: timm_name={config['timm_name']!r}, init=None"
        )
    if config.get("init") and files:
        init_format(config["init"], config.get("timm_name"))


def check_patch_sizes(config):
    """The config's `patch_sizes` (FlexiViT) as a tuple (None when unset), each dividing
    `image_size`."""
    sizes = config.get("patch_sizes")
    if sizes is None:
        return None
    sizes = tuple(sizes)
    image_size = config["image_size"]
    height, width = (image_size, image_size) if _is_int(image_size) else tuple(image_size)
    bad = [p for p in sizes if not _is_int(p) or p <= 0 or height % p or width % p]
    if not sizes or bad:
        raise ValueError(
            f"--patch-sizes must be positive ints that divide the image size {(height, width)}. "
            f"Received: patch_sizes={list(sizes)}"
        )
    if config.get("lora_rank") is not None:
        raise ValueError("--patch-sizes (FlexiViT) and --lora-rank cannot be combined.")
    return sizes


def _as_tuple(value):
    return tuple(value) if isinstance(value, (list, tuple)) else value


def lora_settings(config):
    """`(rank, targets, alpha)` of the config's LoRA (checked), or None without `lora_rank`."""
    if config.get("lora_rank") is None:
        given = [
            f"{key}={config[key]!r}"
            for key, default in (("lora_targets", ("query", "value")), ("lora_alpha", None))
            if config.get(key) is not None and _as_tuple(config[key]) != _as_tuple(default)
        ]
        if given:
            raise ValueError(
                f"{' and '.join(given)} need a LoRA rank: without lora_rank (--lora-rank) the "
                "whole model is fine-tuned. Received: lora_rank=None "
                "(--lora-rank, --lora-targets, --lora-alpha)"
            )
        return None
    try:
        return check_lora_settings(
            config["lora_rank"], config["lora_targets"], config["lora_alpha"]
        )
    except ValueError as error:
        raise ValueError(f"{error} (--lora-rank, --lora-targets, --lora-alpha)") from None


def check_qat(config):
    """Checks `qat` / `qat_weight_bits` (before any framework); returns whether QAT is on."""
    enabled, bits = config.get("qat", False), config.get("qat_weight_bits", 7)
    if not isinstance(enabled, bool):
        raise ValueError(f"qat (--qat) must be true or false. Received: qat={enabled!r}")
    if not enabled:
        if bits != 7:
            raise ValueError(
                "qat_weight_bits (--qat-weight-bits) sets the weights of quantization-aware "
                f"training: it needs --qat. Received: qat_weight_bits={bits!r} without --qat"
            )
        return False
    if isinstance(bits, bool) or not isinstance(bits, int) or not 2 <= bits <= 8:
        raise ValueError(
            "qat_weight_bits (--qat-weight-bits) must be an int in [2, 8]. Received: "
            f"qat_weight_bits={bits!r}"
        )
    for key in ("lora_rank", "teacher", "patch_sizes"):
        if config.get(key) is not None:
            raise ValueError(
                f"--qat and {flag_name(key)} do not combine: quantization-aware training "
                "fine-tunes the whole model. Drop one of them."
            )
    return True


def check_distillation_settings(config, files=True):
    """`teacher` / `distillation` / `distillation_tau`, before any data is loaded (the
    teacher's own fit to the run's images is checked by the recipe, which loads it)."""
    teacher, mode = config.get("teacher"), config.get("distillation")
    if (teacher is None) != (mode is None):
        raise ValueError(
            "Distillation needs both --teacher FILE.keras and --distillation hard|soft. "
            f"Received: teacher={teacher!r}, distillation={mode!r}"
        )
    if mode is None:
        return
    if mode not in DISTILLATION_MODES:
        raise ValueError(
            f"distillation (--distillation) must be one of {DISTILLATION_MODES}. "
            f"Received: {mode!r}"
        )
    tau = config.get("distillation_tau", 1.0)
    if not _is_real(tau) or not 0 < tau < math.inf:
        raise ValueError(f"distillation_tau (--distillation-tau) must be > 0. Received: {tau!r}")
    if not str(teacher).endswith(".keras") or (files and not os.path.exists(teacher)):
        raise ValueError(
            f"teacher (--teacher) must be an existing .keras file. Received: {teacher!r}"
        )
    for key in ("lora_rank", "patch_sizes"):
        if config.get(key) is not None:
            raise ValueError(
                f"Distillation and {flag_name(key)} do not combine: drop one of them."
            )
