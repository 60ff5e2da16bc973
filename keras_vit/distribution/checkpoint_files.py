"""The files of a sharded checkpoint, read as data: its index (`sharded.json`) and block names.

A sharded checkpoint (`keras_vit.distribution.checkpoint`) is a folder of `.safetensors` files,
one per process (`process-00000-of-00002.safetensors`), each holding blocks of variables named
`<group>/<position>/<start>:<stop>,...` (`weights/12/0:16,0:32`: rows 0-15, columns 0-31 of the
13th weight), and the index `sharded.json`. A folder may come from anyone: the index is parsed
as JSON and every field checked (the format and version, the file names and sizes, each
variable's path, shape and dtype), and every block name and header against it (group,
position, bounds inside the shape, the block's shape and dtype, no two blocks overlapping,
every value covered), before anything is assigned. A problem is a `ValueError` naming the
file. Nothing here imports a framework.
"""

import hashlib
import json
import math
import os
import re

MANIFEST = "sharded.json"  # (keras_vit.saving.SHARDED_MANIFEST: load_model reads it)
FORMAT = "keras_vit sharded"
VERSION = 1
GROUPS = ("weights", "optimizer")
# Keras dtype names a checkpoint may hold -> the safetensors dtype of their blocks.
DTYPES = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
    "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2", "int64": "I64", "int32": "I32",
    "int16": "I16", "int8": "I8", "uint64": "U64", "uint32": "U32", "uint16": "U16",
    "uint8": "U8", "bool": "BOOL",
}  # fmt: skip
_FILE = re.compile(r"process-(\d{5})-of-(\d{5})\.safetensors")
_KEY = re.compile(r"([a-z]+)/(\d+)/((?:\d+:\d+)(?:,\d+:\d+)*)?")


def file_name(index, count):
    """The file process `index` of `count` writes."""
    return f"process-{index:05d}-of-{count:05d}.safetensors"


def is_checkpoint_file(name):
    """Whether `name` is one of the files a sharded checkpoint holds (its index or a part)."""
    return name == MANIFEST or _FILE.fullmatch(name) is not None


def block_key(group, position, index):
    """The name of the block `index` (one `slice` per dimension) of variable `position`."""
    return f"{group}/{position}/" + ",".join(f"{s.start}:{s.stop}" for s in index)


def is_sharded_checkpoint(path):
    """Whether `path` is a folder written by `save_sharded` (it holds `sharded.json`)."""
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, MANIFEST))


def fingerprint(folder):
    """The SHA-256 of a complete sharded checkpoint's index (unique per checkpoint: it holds a
    random id), or None when `folder` is no complete sharded checkpoint."""
    try:
        read_manifest(folder)
        with open(os.path.join(folder, MANIFEST), "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except (OSError, ValueError):
        return None


def _damaged(path, what):
    return ValueError(f"{path!r} is damaged or not a keras_vit sharded checkpoint: {what}.")


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _check_entry(path, group, position, entry):
    where = f"{group}[{position}]"
    if not isinstance(entry, dict) or set(entry) != {"path", "shape", "dtype"}:
        raise _damaged(path, f"{where} must be an object with path, shape and dtype: {entry!r}")
    if not isinstance(entry["path"], str) or not entry["path"]:
        raise _damaged(path, f"{where} has no variable path: {entry['path']!r}")
    shape = entry["shape"]
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        raise _damaged(path, f"{where} ({entry['path']}) has shape {shape!r}")
    if entry["dtype"] not in DTYPES:
        raise _damaged(
            path, f"{where} ({entry['path']}) has dtype {entry['dtype']!r}, not one of "
            f"{sorted(DTYPES)}"
        )  # fmt: skip


def read_manifest(folder):
    """The checked index (`sharded.json`) of a sharded checkpoint folder, as a dict.

    Raises:
        FileNotFoundError: no folder, or no `sharded.json` in it.
        ValueError: the index is no JSON object of this format and version, a field has the
            wrong kind (each named), or a file it lists is missing or of another size (an
            incomplete or damaged checkpoint).
    """
    folder = os.fspath(folder)
    path = os.path.join(folder, MANIFEST)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{folder!r} is not a sharded checkpoint: it has no {MANIFEST} (written by "
            "keras_vit.distribution.save_sharded)."
        )
    try:
        with open(path, "rb") as f:
            manifest = json.loads(f.read().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise _damaged(path, f"it is not valid JSON ({error})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise _damaged(path, f"it holds no object with format {FORMAT!r}")
    if manifest.get("version") != VERSION:
        raise ValueError(
            f"{path!r} has format version {manifest.get('version')!r}; this keras_vit reads "
            f"version {VERSION}. Upgrade keras_vit."
        )
    count = manifest.get("num_processes")
    if not _is_int(count) or count < 1:
        raise _damaged(path, f"num_processes is {count!r}")
    files = manifest.get("files")
    expected = {file_name(i, count) for i in range(count)}
    if not isinstance(files, dict) or set(files) != expected:
        raise _damaged(
            path, f"its files must be {sorted(expected)} (one per process); they are "
            f"{sorted(files) if isinstance(files, dict) else files!r}"
        )  # fmt: skip
    groups = manifest.get("groups")
    if not isinstance(groups, dict) or "weights" not in groups or not set(groups) <= set(GROUPS):
        raise _damaged(path, f"its groups must be 'weights' and optionally 'optimizer': {groups!r}")
    for group, entries in groups.items():
        if not isinstance(entries, list):
            raise _damaged(path, f"group {group!r} is no list")
        for position, entry in enumerate(entries):
            _check_entry(path, group, position, entry)
    if manifest.get("model") is not None and not isinstance(manifest["model"], dict):
        raise _damaged(path, "its model config is no JSON object")
    problems = []
    for name, size in sorted(files.items()):
        file = os.path.join(folder, name)
        if not _is_int(size) or size < 8:
            raise _damaged(path, f"the size of {name} is {size!r}")
        if not os.path.isfile(file):
            problems.append(f"{name} (missing)")
        elif os.path.getsize(file) != size:
            problems.append(f"{name} ({os.path.getsize(file)} bytes, {size} expected)")
    if problems:
        raise ValueError(
            f"The sharded checkpoint {folder!r} is incomplete or damaged: {', '.join(problems)}."
        )
    return manifest


def parse_block(file, key, shape, dtype, manifest):
    """`(group, position, starts, stops)` of the block `key` of `file` (its header's `shape`
    and safetensors `dtype`), checked against the index.

    Raises:
        ValueError: the name is no block name, or names no variable of the index, or its
            bounds, shape or dtype contradict the variable's (naming the file and the block).
    """
    match = _KEY.fullmatch(key)
    if match is None:
        raise _damaged(file, f"{key!r} is no block name (<group>/<position>/<start>:<stop>,...)")
    group, position = match.group(1), int(match.group(2))
    entries = manifest["groups"].get(group)
    if entries is None or position >= len(entries):
        raise _damaged(file, f"block {key!r} names no variable of {MANIFEST}")
    entry = entries[position]
    bounds = [part.split(":") for part in match.group(3).split(",")] if match.group(3) else []
    starts = tuple(int(start) for start, _ in bounds)
    stops = tuple(int(stop) for _, stop in bounds)
    full = entry["shape"]
    if len(bounds) != len(full) or any(
        not 0 <= a <= b <= d for a, b, d in zip(starts, stops, full, strict=True)
    ):
        raise _damaged(file, f"block {key!r} lies outside {entry['path']} {tuple(full)}")
    if list(shape) != [b - a for a, b in zip(starts, stops, strict=True)]:
        raise _damaged(file, f"block {key!r} holds an array of shape {tuple(shape)}")
    if dtype != DTYPES[entry["dtype"]]:
        raise _damaged(file, f"block {key!r} is {dtype}; {entry['path']} is {entry['dtype']}")
    return group, position, starts, stops


def _overlap(a, b):
    return all(
        max(s1, s2) < min(e1, e2) for s1, e1, s2, e2 in zip(a[0], a[1], b[0], b[1], strict=True)
    )


def check_coverage(folder, manifest, blocks):
    """Raises a `ValueError` naming the variable when its blocks overlap or leave values out.

    `blocks`: `{(group, position): [(file, key, starts, stops)]}` (`parse_block`'s results).
    """
    for group, entries in manifest["groups"].items():
        for position, entry in enumerate(entries):
            found = blocks.get((group, position), [])
            bounds = [(starts, stops) for _, _, starts, stops in found]
            for i, a in enumerate(bounds):
                for j in range(i):
                    if _overlap(a, bounds[j]):
                        raise _damaged(
                            folder, f"the blocks {found[j][1]!r} ({found[j][0]}) and "
                            f"{found[i][1]!r} ({found[i][0]}) of {entry['path']} overlap"
                        )  # fmt: skip
            size = sum(math.prod(b - a for a, b in zip(*pair, strict=True)) for pair in bounds)
            if size != math.prod(entry["shape"]):
                raise ValueError(
                    f"The sharded checkpoint {folder!r} is incomplete or damaged: the blocks of "
                    f"{group} {entry['path']!r} {tuple(entry['shape'])} hold {size} of its "
                    f"{math.prod(entry['shape'])} values."
                )
