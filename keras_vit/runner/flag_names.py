"""The one mapping from a config key to its command-line flag (`learning_rate` -> `--lr`).

The CLI defines its flags with `flag_name` and the runner names them in its errors; no framework is
imported here."""

# Config keys whose command-line flag is not `--key-with-dashes`; keys with no flag are named as
# config keys.
FLAGS = {"learning_rate": "--lr", "dropout_rate": "--dropout",
         "gradient_accumulation_steps": "--grad-accum", "multi_host": "--multi-host"}
NO_FLAG = ("eval_batch_size", "warmup_epochs", "backup_every")


def flag_name(key):
    """The flag of a config key: `crop_scale` -> `--crop-scale`, `learning_rate` -> `--lr`.

    Example:

    >>> flag_name("crop_scale"), flag_name("learning_rate")
    ('--crop-scale', '--lr')
    """
    return FLAGS.get(key, "--" + key.replace("_", "-"))


def flag_or_key(key):
    """`flag_name(key)`, or `"config key"` for the keys no flag sets (`NO_FLAG`)."""
    if key in NO_FLAG:
        return "config key"
    return flag_name(key)
