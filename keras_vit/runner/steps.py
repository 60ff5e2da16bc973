"""Step planning: epochs, steps per epoch, total and warm-up steps of a config for a dataset."""

from keras_vit import data
from keras_vit.runner.config import check_warmup


def plan_steps(config, num_train):
    """Returns `(epochs, steps_per_epoch, total_steps, warmup_steps)` for a config."""
    per_epoch = data.steps_per_epoch_for(num_train, config["batch_size"])
    if config.get("steps_per_epoch"):
        per_epoch = min(per_epoch, int(config["steps_per_epoch"]))
    if config.get("steps"):
        total = int(config["steps"])
        per_epoch = min(per_epoch, total)
        epochs = data.epochs_for_steps(total, per_epoch)
        total = epochs * per_epoch
    else:
        epochs = int(config["epochs"])
        total = epochs * per_epoch
    if config.get("warmup_epochs"):
        warmup = int(config["warmup_epochs"]) * per_epoch
    else:
        warmup = int(config["warmup_steps"])
    check_warmup(warmup, total)
    return epochs, per_epoch, total, warmup

