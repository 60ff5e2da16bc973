"""Compiling a recipe's model from its config: the optimizer with its schedule, the loss, the
metrics; the default `compile` and `evaluate` hooks of `run_training`."""

import keras

from keras_vit.training import optimizers as optimizers_lib
from keras_vit.training.layer_decay import with_layer_decay
from keras_vit.training.schedules import WarmupDecay
from keras_vit.training.settings import check_decay, check_ema


def optimizer_from_config(config, total_steps, warmup_steps, model=None):
    """The config's optimizer by `keras_vit.training.build_optimizer` (the one optimizer builder),
    with the warm-up + decay `WarmupDecay` schedule of the run's step plan.

    `ema` (a momentum) keeps Keras' own moving average of the weights (`use_ema`), which
    replaces the weights at the end of `fit`; `layer_decay` (a rate, needs `model`) gives each
    block its own rate (`keras_vit.training.layer_decay.with_layer_decay`).
    """
    schedule = WarmupDecay(
        float(config["learning_rate"]),
        total_steps=total_steps,
        warmup_steps=warmup_steps,
        decay=config["decay"],
    )
    check_finetune_options(config)
    optimizer = optimizers_lib.build_optimizer(
        config["optimizer"],
        schedule,
        weight_decay=config["weight_decay"],
        global_clipnorm=config["global_clipnorm"],
        gradient_accumulation_steps=config["gradient_accumulation_steps"],
        ema_momentum=config.get("ema"),
        **({"beta_2": config["beta_2"]} if config.get("beta_2") is not None else {}),
    )
    if config.get("layer_decay") is not None:
        if model is None:
            raise ValueError("layer_decay (--layer-decay) needs the model the optimizer trains.")
        optimizer = with_layer_decay(optimizer, model, config["layer_decay"])
    return optimizer


def check_finetune_options(config):
    """Checks `ema` (a momentum in [0, 1)) and `layer_decay` (in (0, 1]); raises `ValueError`."""
    check_ema(config.get("ema"))
    if config.get("layer_decay") is not None:
        check_decay(config["layer_decay"])


def compile_kwargs(config):
    """The `model.compile` settings of a run: `jit_compile` and `steps_per_execution`."""
    return {
        "jit_compile": config.get("jit_compile", "auto"),
        "steps_per_execution": config.get("steps_per_execution") or 1,
    }


def compile_model(model, config, total_steps, warmup_steps):
    """Compiles a classifier: the config's optimizer, (smoothed) cross-entropy, accuracy.

    The accuracy is a weighted metric: the training data carry no weights (no change), and a
    multi-process evaluation's padding (weight 0) does not count.
    """
    model.compile(
        # A wrapper that trains a model (a `Distiller`) names it `saved_model`.
        optimizer=optimizer_from_config(
            config, total_steps, warmup_steps, getattr(model, "saved_model", model)
        ),
        loss=optimizers_lib.build_loss(config["label_smoothing"]),
        weighted_metrics=[keras.metrics.CategoricalAccuracy(name="accuracy")],
        **compile_kwargs(config),
    )



def compile_classifier(model, config, setup):
    """The default `compile` hook of `run_training`: `compile_model`, no extra metrics."""
    compile_model(model, config, setup.total_steps, setup.warmup_steps)
    return {}


def evaluate_classifier(model, setup):
    """The default `evaluate` hook of `run_training`: loss and accuracy on the test split, once
    after training (`setup.eval_ds`; per-epoch validation sees `setup.val_ds`)."""
    test_loss, test_accuracy = model.evaluate(setup.eval_ds, steps=setup.eval_steps, verbose=0)
    return {"test_loss": float(test_loss), "test_accuracy": float(test_accuracy)}

