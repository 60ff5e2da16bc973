"""Experiment files (`--config FILE`) and the recipe config a command line asks for.

An experiment file is data, never executed. A `.py` file may hold a docstring,
comments and top-level assignments of literal values to `RECIPE` (the command
it is for), `PRESET` (`"digits"` or `"paper"`) and `CONFIG` (a dict, written
`{...}` or `dict(key=value, ...)`); the values are read with `ast.literal_eval`.
A `.json` file holds one object with the same three keys.

Precedence, lowest first: the recipe's preset, the file's `CONFIG`, the
`--smoke` shrink, then the flags given on the command line.
"""

import ast
import copy
import json
import numbers
import os

from keras_vit.cli.flags import MODEL_SIZE_FLAGS

FILE_KEYS = ("RECIPE", "PRESET", "CONFIG")
_NOT_CONFIG = ("command", "config", "debug", "overwrite", "preset", "print_config", "smoke")
_NOT_CONFIG += MODEL_SIZE_FLAGS


def _literal(node, path):
    """The value of a literal expression; `dict(a=1)` is read as `{"a": 1}`."""
    if isinstance(node, ast.Call):
        if (
            isinstance(node.func, ast.Name)
            and node.func.id == "dict"
            and not node.args
            and all(k.arg is not None for k in node.keywords)
        ):
            return {k.arg: _literal(k.value, path) for k in node.keywords}
    elif isinstance(node, ast.Dict):
        if None not in node.keys:
            pairs = zip(node.keys, node.values, strict=True)
            return {_literal(k, path): _literal(v, path) for k, v in pairs}
    elif isinstance(node, (ast.List, ast.Tuple)):
        values = [_literal(v, path) for v in node.elts]
        return values if isinstance(node, ast.List) else tuple(values)
    else:
        try:
            return ast.literal_eval(node)
        except ValueError:
            pass
    raise ValueError(
        f"{path}, line {node.lineno}: expected a literal value (number, string, True/False/None, "
        f"list, tuple, {{...}} or dict(key=value, ...)); received {ast.unparse(node)!r}. "
        "An experiment file is data and is never executed: write the value itself."
    )


def _read_python(path, text):
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as error:
        raise ValueError(
            f"{path}, line {error.lineno}: not a valid Python-syntax experiment file "
            f"({error.msg})."
        ) from None
    values = {}
    for i, node in enumerate(tree.body):
        if (
            i == 0
            and isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            continue  # the docstring
        if not (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            raise ValueError(
                f"{path}, line {node.lineno}: expected only assignments like "
                f"CONFIG = dict(steps=100) to {', '.join(FILE_KEYS)}; received "
                f"{ast.unparse(node)[:80]!r}. An experiment file is data and is never executed."
            )
        values[node.targets[0].id] = (_literal(node.value, path), node.lineno)
    return values


def read_config_file(path):
    """Reads an experiment file into `{"RECIPE": str|None, "PRESET": str|None, "CONFIG": dict}`.

    Args:
        path: str. A `.py` file of literal assignments or a `.json` object.

    Returns:
        A dict with the keys `RECIPE`, `PRESET` and `CONFIG` (None / {} when absent).

    Raises:
        FileNotFoundError: no such file.
        ValueError: anything but literal assignments to RECIPE, PRESET and CONFIG, or
            values of the wrong type; the message names the file (and the line).

    Example:

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "run.py")
    >>> with open(path, "w") as f:
    ...     _ = f.write('RECIPE = "finetune"\\nCONFIG = dict(steps=10, seed=None)\\n')
    >>> read_config_file(path)
    {'RECIPE': 'finetune', 'PRESET': None, 'CONFIG': {'steps': 10, 'seed': None}}
    >>> os.remove(path)
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Experiment file not found: {path!r} (given to --config).")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as error:
        raise ValueError(
            f"Experiment file {path!r} is not UTF-8 text ({error.reason} at byte {error.start}). "
            "Save it as UTF-8."
        ) from None
    if path.endswith(".json"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"{path}, line {error.lineno}: not valid JSON ({error.msg})."
            ) from None
        if not isinstance(data, dict):
            raise ValueError(
                f"{path}: expected a JSON object with the keys {', '.join(FILE_KEYS)}; "
                f"received a {type(data).__name__}."
            )
        values = {key: (value, None) for key, value in data.items()}
    else:
        values = _read_python(path, text)
    unknown = sorted(set(values) - set(FILE_KEYS))
    if unknown:
        name = unknown[0]
        line = values[name][1]
        where = f"{path}, line {line}" if line else path
        raise ValueError(
            f"{where}: expected only the names {', '.join(FILE_KEYS)}; received {name!r}. "
            "Put recipe settings inside CONFIG."
        )
    result = {key: values.get(key, (None, None))[0] for key in FILE_KEYS}
    for key, kind in (("RECIPE", str), ("PRESET", str), ("CONFIG", dict)):
        if result[key] is not None and not isinstance(result[key], kind):
            raise ValueError(
                f"{path}: expected {key} to be a {kind.__name__}; received "
                f"{type(result[key]).__name__} {result[key]!r}."
            )
    result["CONFIG"] = result["CONFIG"] or {}
    return result


def _kind_of(default):
    """What a config key whose default is `default` accepts: `(description, check)`, or None
    (any value: a key whose default is None)."""
    if default is None:
        return None
    if isinstance(default, bool):
        return "true or false", lambda v: isinstance(v, bool)
    if isinstance(default, numbers.Number):
        return "a number (or a list of numbers)", lambda v: _is_number(v) or (
            isinstance(v, (list, tuple)) and bool(v) and all(_is_number(x) for x in v)
        )
    if isinstance(default, (list, tuple)):
        return "a list", lambda v: isinstance(v, (list, tuple))
    if isinstance(default, dict):
        return "a dict", lambda v: isinstance(v, dict)
    if isinstance(default, str):  # a name, or a setting like verbose="auto" that takes numbers
        return "a string, number or true/false", lambda v: isinstance(v, (str, numbers.Number))
    return None


def _is_number(value):
    return isinstance(value, numbers.Number) and not isinstance(value, bool)


def _check_kind(key, value, default, where):
    """A value of a kind `key` never takes (`"image_size": "abc"`, `"augment": "mixup"`) is
    refused while the config is read, naming the key, what it takes and what it received."""
    kind = _kind_of(default)
    if value is None or kind is None or kind[1](value):
        return
    raise ValueError(
        f"{where}: config key {key!r} expects {kind[0]}, like its default {default!r}; "
        f"received {value!r} ({type(value).__name__})."
    )


def _apply(config, layer, where):
    """Applies one layer of settings (file, smoke shrink or flags) in place."""
    unknown = sorted(set(layer) - set(config))
    if unknown:
        raise ValueError(
            f"{where}: unknown config key {unknown[0]!r}. Known keys: {', '.join(sorted(config))}."
        )
    if layer.get("steps") is not None and layer.get("epochs") is not None:
        raise ValueError(
            f"{where}: expected steps or epochs, not both; received steps={layer['steps']} and "
            f"epochs={layer['epochs']}. Keep one of them."
        )
    for key, value in layer.items():
        _check_kind(key, value, config[key], where)
        if isinstance(config[key], tuple) and isinstance(value, list):
            value = tuple(value)  # JSON has no tuples
        config[key] = value
    if layer.get("steps") is not None and "epochs" in config:
        config["epochs"] = None
    if layer.get("epochs") is not None and "steps" in config:
        config["steps"] = None
    # A warm-up given in one unit replaces the others (a preset's share of the run included).
    for given, cleared in (("warmup_steps", ("warmup_epochs", "warmup_fraction")),
                           ("warmup_epochs", ("warmup_fraction",)),
                           ("warmup_fraction", ("warmup_steps",))):  # fmt: skip
        if layer.get(given) is not None:
            config.update({key: None for key in cleared if key in config and key not in layer})
    if layer.get("model") is not None and "model_overrides" not in layer:
        config["model_overrides"] = {}  # a new variant code brings its own sizes


def config_from_args(module, command, args):
    """The recipe config of `module` for parsed `args`: preset < file < smoke < flags.

    Args:
        module: a recipe module with `get_config(preset, smoke=...)`.
        command: str. The command name (`"finetune"`), checked against a file's RECIPE.
        args: `argparse.Namespace` of that command.

    Returns:
        The config dict for `module.run`.
    """
    file = {"RECIPE": None, "PRESET": None, "CONFIG": {}}
    if getattr(args, "config", None):
        file = read_config_file(args.config)
        if file["RECIPE"] is not None and file["RECIPE"] != command:
            raise ValueError(
                f"{args.config} is an experiment for `keras-vit {file['RECIPE']}` "
                f"(RECIPE = {file['RECIPE']!r}); received it in `keras-vit {command}`. Run "
                f"keras-vit {file['RECIPE']} --config {args.config}"
            )
    preset = args.preset or file["PRESET"] or "digits"
    config = copy.deepcopy(module.get_config(preset))
    if file["CONFIG"]:
        _apply(config, file["CONFIG"], args.config)
    if args.smoke:
        base, small = module.get_config(preset), module.get_config(preset, smoke=True)
        _apply(config, {k: v for k, v in small.items() if base.get(k) != v}, "--smoke")
    flags = {
        k: v for k, v in vars(args).items() if v is not None and k not in _NOT_CONFIG
    }
    if flags.get("distribution") == "none":
        flags["distribution"] = None
    if flags.get("verbose") not in (None, "auto"):
        flags["verbose"] = int(flags["verbose"])
    sizes = {k: getattr(args, k) for k in MODEL_SIZE_FLAGS if getattr(args, k, None) is not None}
    # A fine-tuning checkpoint (--init) defines the architecture: the preset's model and sizes
    # never apply to it; only what the file or the flags state (checked against it).
    explicit = {**file["CONFIG"], **flags}
    init = command == "finetune" and bool(explicit.get("init"))
    if init:
        config["model"] = explicit.get("model")
        config["model_overrides"] = dict(file["CONFIG"].get("model_overrides") or {})
    if sizes:
        keep = init or "model" not in flags
        flags["model_overrides"] = {**((config.get("model_overrides") or {}) if keep else {}),
                                    **sizes}  # fmt: skip
    if getattr(args, "overwrite", False):
        flags["overwrite"] = True
    _apply(config, flags, "the command line")
    if init and "model" not in explicit:
        config["model"] = None  # the --init checkpoint's architecture, recorded as such
    return config


def explicit_keys(args):
    """The config keys the user set: flags given on the command line and the experiment
    file's `CONFIG` keys (never the preset's or the smoke shrink's)."""
    keys = {k for k, v in vars(args).items() if v is not None and k not in _NOT_CONFIG}
    keys |= {k for k in MODEL_SIZE_FLAGS if getattr(args, k, None) is not None}
    if getattr(args, "overwrite", False):
        keys.add("overwrite")
    if getattr(args, "config", None):
        keys |= set(read_config_file(args.config)["CONFIG"])
    return keys
