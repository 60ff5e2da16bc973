"""Step planning: epochs, steps per epoch, total and warm-up steps of a config for a dataset."""

from keras_vit import data
from keras_vit.runner.config import check_warmup


def plan_steps(config, num_train):
    """Returns `(epochs, steps_per_epoch, total_steps, warmup_steps)` for a config.

    The warm-up is `warmup_epochs` epochs when set, else `warmup_steps` when set (both as
    given: one not shorter than the run is refused), else `warmup_fraction` of the total steps
    (a preset's default, which scales with the run: `quickstart --epochs 1` warms up for 5% of
    its one epoch)."""
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
        if warmup >= total:
            raise ValueError(
                f"warmup_epochs ({config['warmup_epochs']} epochs, {warmup} steps) must be "
                f"shorter than the run ({epochs} epochs, {total} steps): lower it or train "
                "longer."
            )
    elif config.get("warmup_steps") is not None:
        warmup = int(config["warmup_steps"])
    else:  # derived from the run's length: its share of the total steps
        warmup = min(round((config.get("warmup_fraction") or 0.0) * total), total - 1)
    check_warmup(warmup, total)
    return epochs, per_epoch, total, warmup

