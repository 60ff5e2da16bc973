"""Fine-tuning recipe (paper Sec. 4.1, Appendix B.1.1, Table 4).

SGD with momentum 0.9, cosine decay after a linear warm-up, no weight decay, gradient clipping at
global norm 1, a new zero-initialised head, and the position embedding resampled from the
pre-training resolution to the fine-tuning one.

Command (defaults: the offline `digits` preset, 24 px, a few minutes on 2 CPU cores):

    keras-vit finetune --out runs/finetune                          # from scratch (no --init)
    keras-vit finetune --init runs/pretrain/model.keras --out runs/finetune   # 16 px -> 24 px
    keras-vit finetune --config recipes/finetune_digits.py          # as an experiment file

Paper preset (ViT-B/16 from the official ImageNet-21k checkpoint to CIFAR-10 at 384 px; one
TPUv3-8 or 8 GPUs, hours):

    keras-vit finetune --preset paper --weights ViT-B_16.npz --dataset tfds:cifar10 \
        --data-dir DIR --distribution data_parallel --out runs/b16_cifar10

Expected: the digits preset reaches >= 98% test accuracy (30% of digits held out); the paper
preset 98.1-99.0% on CIFAR-10 (Table 2/5, ViT-B/16 ImageNet-21k).

`--init` takes any checkpoint keras_vit reads (`keras_vit.runner.init_checkpoint`): one of our
saved models or a converted one (`MODEL.keras`, e.g. the pretrain recipe's), a Hugging Face
`save_pretrained` folder, or a timm checkpoint file with `--timm-name NAME`, on every family
keras_vit reads. The model is rebuilt at the new image size with the same architecture, every
layer copied by name, the position embedding resampled (`PatchEncoder.load_position_embedding`;
timm and Hugging Face checkpoints are read at the new size by their own loader), relative
position tables resized, `pre_logits` dropped and the head re-created with zeros.
`--weights FILE.npz` loads an official checkpoint through
`keras_vit.weights.npz.checkpoints.load_npz` (architecture from `--model`).

`--lora-rank N` fine-tunes with LoRA (`keras_vit.enable_lora` on `--lora-targets`, by default
the attention's query and value, scale `--lora-alpha / N`): the encoder is frozen, the adapters
and the new head train. `model.keras` holds the merged kernels (a plain model) and
`lora.npz` the adapters and head (`keras_vit.load_lora_weights` puts them on the base model).

`--qat` fine-tunes quantization-aware (`keras_vit.quantization_aware`): every projection of the
blocks and the head fake-quantizes its input (8 bits, the range set by the first training batch,
then a moving average) and kernel (`--qat-weight-bits`, default 7), so the test accuracy is the
integer model's; `model.keras` loads quantization-aware and
`keras-vit export model.keras model.onnx` writes its integer ONNX graph.
"""

import contextlib
import logging
import os

import keras
import numpy as np

from keras_vit.distribution.gather import device_copy, to_host
from keras_vit.layers import NaFlexPatchEncoder, PatchEncoder, fake_quant
from keras_vit.layers.relative_position import resize_relative_position_table
from keras_vit.models.config import RATES, ViTConfig
from keras_vit.models.flexi import FlexiViT
from keras_vit.models.vit import ViT
from keras_vit.runner import presets, pretrain
from keras_vit.runner.checks import (
    check_distillation_settings,
    check_recipe_config,
    lora_settings,
)
from keras_vit.runner.config import jsonable
from keras_vit.runner.flexi import flexi_model
from keras_vit.runner.init_checkpoint import check_init_sizes, load_init_model
from keras_vit.runner.run import run_training
from keras_vit.training import distillation, lora, lora_files, multihost, qat
from keras_vit.training.distribution import STRATEGIES, without_distribution

logger = logging.getLogger(__name__)

# The presets (paper Table 4 / Appendix B.1.1, and the offline digits one) are data in
# keras_vit.runner.presets, read there without a framework by the command line.
PAPER = presets.FINETUNE_PAPER
DIGITS = presets.FINETUNE_DIGITS
PRESETS = {"digits": DIGITS, "paper": PAPER}


def get_config(preset="digits", smoke=False):
    """The fine-tuning config: `preset` `"digits"` (offline default) or `"paper"` (Table 4).

    `smoke=True` shrinks it for tests (`keras_vit.runner.config.SMOKE`) at the digits learning rate.
    """
    return presets.get_config("finetune", preset, smoke)


def init_kwargs(source, config):
    """Builder arguments of a fine-tuning model that keeps `source`'s architecture.

    Every field of `ViTConfig.from_model(source)` (sizes, encoder options, stem, `fc_norm`,
    channels) but the input size and the head: `pre_logits` is dropped, the pooling and
    `fc_norm` kept unless `config` sets them (`--pooling`, `--fc-norm`: MAE's protocol is
    `"gap"` with `fc_norm`), and a tokens-only encoder (e.g. masked patch prediction's or
    MAE's `encoder.keras`) fine-tunes with the class token if it has one, else with global
    average pooling. The regularisation rates are the fine-tuning run's: `dropout_rate`,
    `drop_path_rate`, `patch_dropout_rate` and `remat` come from `config`, the attention
    dropout stays at the builder default. The source's input spec (`preprocessing`) is kept,
    so the recipe's pipelines feed the pixels the checkpoint was trained on. With
    `config["naflex"]` the model is the source's NaFlex twin (`naflex=True`, position table
    over the patches only, at the source's grid).
    """
    arch = ViTConfig.from_model(source)
    if arch.backbone is not None:
        raise ValueError(
            "Fine-tuning rebuilds the --init model from its config; a model with a custom "
            "backbone stem cannot be rebuilt. Received: a backbone "
            f"{type(arch.backbone).__name__!r}"
        )
    kwargs = arch.to_kwargs("size", "encoder", "hybrid")
    for rate in RATES:
        kwargs.pop(rate)
    kwargs.pop("backbone")
    kwargs.update(
        num_channels=arch.num_channels,
        fc_norm=arch.fc_norm if config.get("fc_norm") is None else bool(config["fc_norm"]),
        pooling=config.get("pooling") or arch.pooling or ("token" if arch.class_token else "gap"),
        dropout_rate=config["dropout_rate"],
        drop_path_rate=config.get("drop_path_rate") or 0.0,
        patch_dropout_rate=config.get("patch_dropout_rate") or 0.0,
        remat=config["remat"],
        preprocessing=arch.preprocessing,  # the source's input spec, saved with the model
    )
    if arch.naflex or config.get("naflex"):
        # NaFlex: the table keeps the source's grid (each image resamples it to its own).
        kwargs.update(naflex=True, prefix_position_embedding=False, image_size=arch.image_size)
    return kwargs


# Norms of a fine-tuning head that may be new to the --init model (its `fc_norm`, or the final
# norm when a source with fc_norm is fine-tuned without): they start as built.
NEW_HEAD_NORMS = ("fc_norm", "encoder_norm")

# The PatchEncoder weights copied as they are (the position embedding is resampled).
PATCH_ENCODER_WEIGHTS = (
    "kernel",
    "bias",
    "class_embedding",
    "distillation_embedding",
    "register_embeddings",
)


def _copy_patch_encoder(src, layer):
    # Copy through NumPy (one tensor at a time, gathered from every process if sharded): on JAX
    # a shared buffer would be freed with the other model.
    for attr in PATCH_ENCODER_WEIGHTS:
        if hasattr(layer, attr) and hasattr(src, attr):  # a new token stays as built
            getattr(layer, attr).assign(to_host(getattr(src, attr)))
    if isinstance(layer, NaFlexPatchEncoder):
        if isinstance(src, NaFlexPatchEncoder):
            for w, v in zip(layer.weights, src.weights, strict=True):
                w.assign(to_host(v))
        elif layer.position_embedding == "learned":  # a plain model's NaFlex twin
            posemb = to_host(src.position_embeddings)
            prefix = src.num_prefix_positions
            layer.position_embeddings.assign(posemb[:, prefix:])
            if prefix:  # NaFlex tokens have no position rows: fold each into its token
                start = int(src.class_token)
                if src.class_token:
                    layer.class_embedding.assign(
                        to_host(layer.class_embedding) + posemb[:, :1]
                    )
                if src.num_register_tokens:
                    registers = to_host(layer.register_embeddings)
                    layer.register_embeddings.assign(registers + posemb[:, start:prefix])
        return
    if layer.position_embedding == "learned":
        posemb = to_host(src.position_embeddings)
        extra = layer.num_prefix_positions - src.num_prefix_positions
        if extra > 0:  # a new distillation token: its position starts as the class's
            posemb = np.concatenate(
                [posemb[:, :1], np.repeat(posemb[:, :1], extra, 1), posemb[:, 1:]], 1
            )
        layer.load_position_embedding(posemb, source_grid=src.grid_size)


def _source_value(variable, on_devices):
    """A copy of a source weight: on its devices (`on_devices`), else a NumPy array."""
    return device_copy(variable) if on_devices else keras.ops.convert_to_numpy(variable)


def _resized(weight, value, source, target):
    """`value` of `weight` for `target`'s grid: relative position tables are resized."""
    shape = tuple(weight.shape)
    if tuple(value.shape) == shape or not weight.path.endswith(
        "relative_position_bias_table"
    ):
        return value
    value = to_host(value)
    arch = ViTConfig.from_model(target)
    return resize_relative_position_table(
        value,
        arch.grid_size,
        ViTConfig.from_model(source).grid_size,
        class_token=bool(arch.class_token),
    )


def _sharded(config):
    return config.get("distribution") in STRATEGIES


def _init_scope(config):
    """Where the `--init` model is read: sharded under a sharding strategy, else locally."""
    if _sharded(config):
        return contextlib.nullcontext()
    return without_distribution()


def transfer_weights(source, target, on_devices=False):
    """Copies `source`'s weights into `target` layer by layer (matched by name).

    The position embedding and relative position bias tables are resampled to `target`'s
    grid; `head` (new, zero-initialised) and `pre_logits` (dropped for fine-tuning) are not
    copied, nor `head_dist`; a distillation token `source` lacks starts as built, its
    position as the class token's, and so does a norm of the head `source` lacks (`fc_norm`
    when fine-tuning adds it, as MAE's protocol does: ones and zeros). Returns the copied
    layer names. With `on_devices` (both models sharded by a `keras.distribution`) a weight
    of the same shape is copied device to device, and only the resampled ones visit the host,
    one tensor at a time.
    """
    quantized = sorted(
        {
            f"{layer.name} ({mode})"
            for layer in source._flatten_layers(include_self=False)
            for mode in [getattr(layer, "quantization_mode", None)]
            if mode
        }
    )
    if quantized:
        raise ValueError(
            f"The --init model {source.name!r} is quantized: its layers {quantized[:3]} hold "
            "integer weights, and fine-tuning needs float ones. Fine-tune the float model and "
            f"quantize the result. Received: {len(quantized)} quantized layer(s)"
        )
    copied = []
    source_names = {layer.name for layer in source.layers}
    for layer in target.layers:
        if not layer.weights or layer.name in ("head", "head_dist", "pre_logits"):
            continue
        if layer.name in NEW_HEAD_NORMS and layer.name not in source_names:
            continue  # a head norm the --init model lacks (fc_norm added): starts as built
        try:
            src = source.get_layer(layer.name)
        except ValueError:
            raise ValueError(f"The --init model has no layer {layer.name!r} to copy.") from None
        if isinstance(layer, (PatchEncoder, NaFlexPatchEncoder)):
            _copy_patch_encoder(src, layer)
        else:
            weights = [_source_value(v, on_devices) for v in src.weights]
            values = [
                _resized(w, v, source, target)
                for w, v in zip(layer.weights, weights, strict=False)
            ]
            shapes = [tuple(w.shape) for w in layer.weights]
            if [tuple(v.shape) for v in values] != shapes:
                raise ValueError(
                    f"Layer {layer.name!r}: weight shapes differ between the --init model and "
                    f"the fine-tuning model. Received: {[tuple(v.shape) for v in src.weights]}"
                    f" vs {shapes}"
                )
            for weight, value in zip(layer.weights, values, strict=True):
                weight.assign(value)
        copied.append(layer.name)
    return copied


def zero_head(model):
    for w in model.head.weights:
        w.assign(np.zeros(tuple(w.shape), "float32"))


def check_init_architecture(config):
    """Refuses a `--model` or size flag that contradicts the `--init` checkpoint, before any
    data is loaded or anything is written (a checkpoint defines the architecture; without such
    flags there is nothing to compare and nothing is loaded here)."""
    if config.get("model") is None and not config.get("model_overrides"):
        return
    with _init_scope(config):
        source, _ = load_init_model(config)
    check_init_sizes(getattr(source, "backbone", source), config)
    del source  # its memory (a sharded giant's) before the run starts


def build_model(num_classes, config):
    """Builds the fine-tuning model: from `init` (any `--init` checkpoint), `weights` (.npz)
    or from scratch."""
    if config["init"] and config["weights"]:
        raise ValueError("Give either --init (a checkpoint) or --weights (an .npz), not both.")
    if config.get("timm_name") and not config["init"]:
        raise ValueError(
            "--timm-name names the architecture of a timm checkpoint given with --init FILE. "
            f"Received: timm_name={config['timm_name']!r}, init=None"
        )
    if config["init"]:
        # A local copy, read only to copy from: under ModelParallel over several processes its
        # weights would be sharded over processes and unreadable here. Under a sharding
        # strategy (a giant) it is read sharded, one tensor at a time, and copied on the devices.
        with _init_scope(config):
            source, kind = load_init_model(config)
        if isinstance(source, FlexiViT):  # a FlexiViT run's model.keras: its backbone
            source = source.backbone
        check_init_sizes(source, config, check_model=False)  # the variant: checked by `run`
        arch = init_kwargs(source, config)
        if config.get("distillation_token"):
            arch["distillation_token"] = True
        arch.setdefault("image_size", config["image_size"])
        # Every size comes from `arch` (the variant code only fills what it leaves out); the
        # model keeps the checkpoint's name (a Ti/4 run's model stays `vit_ti4`).
        model = ViT(config["model"] or "B/16", num_classes=num_classes, name=source.name, **arch)
        copied = transfer_weights(source, model, on_devices=_sharded(config))
        info = {
            "name": model.name,
            "init": config["init"],
            "init_format": kind,
            "architecture": jsonable(arch),
            "source_image_size": list(ViTConfig.from_model(source).image_size),
            "copied_layers": len(copied),
        }
        del source  # its memory (a sharded giant's) before training starts
        if config.get("timm_name"):
            info["timm_name"] = config["timm_name"]
        return model, info
    head = dict(pooling=config.get("pooling") or "token", fc_norm=bool(config.get("fc_norm")))
    model, info = pretrain.build_model(num_classes, dict(config, **head))
    if config["weights"]:
        from keras_vit.weights.npz.checkpoints import load_npz

        load_npz(model, config["weights"])
        zero_head(model)  # paper: the pre-trained head is replaced by a zero-initialised one
        return model, dict(info, init=config["weights"])
    logger.warning("No --init or --weights: fine-tuning starts from a random initialisation.")
    return model, info


def build_lora_model(num_classes, config):
    """`build_model`, then LoRA on its blocks when `lora_rank` is set (the rest frozen), or
    quantization-aware training with `qat`."""
    model, info = build_model(num_classes, config)
    if config.get("qat"):
        qat.quantization_aware(model, weight_bits=config["qat_weight_bits"])
        return model, dict(info, qat=fake_quant.quantization_aware_settings(model))
    settings = lora_settings(config)
    if settings is None:
        return flexi_model(model, info, config)
    rank, targets, alpha = settings
    try:
        lora.enable_lora(model, rank, targets=targets, alpha=alpha)
    except ValueError as error:  # e.g. a target this model's blocks lack: name the flags
        raise ValueError(f"{error} (--lora-rank, --lora-targets, --lora-alpha)") from None
    trainable = int(sum(np.prod(w.shape) for w in model.trainable_weights))
    return model, dict(info, lora=dict(lora.get_lora_settings(model), trainable_params=trainable))


def save_adapters(model, setup):
    """The `finish` hook of a LoRA run: the adapters and head in `out/lora.npz` (process 0)."""
    if lora.get_lora_settings(model) is None:
        return {}
    path = os.path.join(setup.out, "lora.npz")
    if multihost.is_chief():
        lora_files.save_lora_weights(model, path)
    return {"lora_weights_path": path}


def check_distillation(config):
    """Checks `teacher` / `distillation` / `distillation_tau` before any data is loaded, and
    that the teacher takes the run's images (before anything is written to --out)."""
    check_distillation_settings(config)
    if config.get("teacher"):
        distillation.check_teacher(
            config["teacher"], image_size=config["image_size"],
            num_channels=config.get("num_channels"),
        )  # fmt: skip


def build_distilled_model(num_classes, config):
    """`build_lora_model`, wrapped in a `Distiller` with the config's teacher when it has one.

    The student gets the distillation token: from `--init` without one, the token starts as
    built and its position embedding as the class token's."""
    if not config.get("teacher"):
        return build_lora_model(num_classes, config)
    config = dict(config, distillation_token=True)
    model, info = build_lora_model(num_classes, config)
    wrapped = distillation.Distiller(
        model, config["teacher"], config["distillation"], tau=config["distillation_tau"]
    )
    return wrapped, dict(
        info,
        distillation=dict(
            teacher=config["teacher"], mode=config["distillation"],
            tau=config["distillation_tau"], alpha=wrapped.alpha,
        ),
    )


def run(config, callbacks=()):
    """Fine-tunes as configured; returns the metrics (also in `out/metrics.json`)."""
    check_recipe_config("finetune", config)  # before any data is loaded
    check_distillation(config)
    if config["init"]:
        check_init_architecture(config)  # the checkpoint defines it: agree before any output
    return run_training(
        config, build_distilled_model, "finetune", callbacks=callbacks, finish=save_adapters
    )
