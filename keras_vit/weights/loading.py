"""The strict loader every checkpoint format goes through: check everything, then assign.

A loader pairs each array of a checkpoint with the model variable(s) it becomes, collects every
problem (missing arrays, unexpected arrays, wrong shapes) and only assigns when there is none:
a failed load leaves the model's weights as they were, and one `ValueError` lists all the
problems at once. `keras_vit.weights.npz.checkpoints.load_npz` (official `.npz`) plans its own
pairing and shares `commit`; PyTorch-layout checkpoints (timm, Hugging Face) describe theirs with
a name table for `load_state_dict`:

    {source_key: (keras_variable_path, transform)}

where `keras_variable_path` is a `Variable.path` of the model (`"encoderblock_0/attention/query/
kernel"`), or a tuple of paths when one array feeds several variables (timm's fused `qkv`), and
`transform` a `Transform` below: how the PyTorch layout becomes the Keras one.
"""

import dataclasses
from collections.abc import Callable

import keras
import numpy as np

from keras_vit.models.variable_paths import block
from keras_vit.weights import lazy, lazy_slices

KINDS = ("dtype", "missing", "unexpected", "shape")

# NumPy dtype kinds a weight may be read from: float, signed and unsigned int. Bool, complex,
# strings, bytes, objects and datetimes are refused (a float() of them is meaningless or fails
# half-way through a load).
_NUMERIC_KINDS = "fiu"


def shape_of(x):
    """The shape of an array or variable as a tuple of Python ints."""
    return tuple(int(d) for d in x.shape)


def dtype_problem(value):
    """Why `value` cannot be a weight (a non-numeric, bool or complex array), or None."""
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        value = np.asarray(value)
        dtype = value.dtype
    try:
        kind = np.dtype(dtype).kind
    except TypeError:  # a framework dtype NumPy does not know (bfloat16 is widened earlier)
        return None
    if kind in _NUMERIC_KINDS:
        return None
    what = {"b": "bool", "c": "complex"}.get(kind, "non-numeric")
    return f"holds {what} values (dtype {np.dtype(dtype).name}); a weight must be a real number"


def integer_problem(value, variable):
    """Why the integer array `value` cannot fill the float `variable`, or None.

    A float weight is never stored as integers by timm, transformers or big_vision: integers
    there mean a damaged or mislabelled file (or a buffer under a weight's name), and a silent
    cast would load meaningless numbers. Integer buffers the loaders know (BEiT's
    `relative_position_index`, BatchNorm's `num_batches_tracked`) are skipped, never assigned.
    To load integer values on purpose, cast them first (`{k: v.astype("float32")}`) and pass
    the dict.
    """
    dtype = getattr(value, "dtype", None)
    dtype = np.asarray(value).dtype if dtype is None else dtype
    try:
        kind = np.dtype(dtype).kind
    except TypeError:
        return None
    if kind not in "iu" or not keras.backend.is_float_dtype(variable.dtype):
        return None
    return (
        f"holds integers (dtype {np.dtype(dtype).name}) where the model's weight "
        f"{variable.path} is {variable.dtype}: expected a float tensor (cast it yourself, "
        "e.g. value.astype('float32'), to load integer values on purpose)"
    )


def dtype_problems(arrays):
    """`{key: reason}` for every array of `arrays` that cannot be a weight."""
    found = {}
    for key, value in arrays.items():
        why = dtype_problem(value)
        if why:
            found[key] = why
    return found


def walk_layers(model):
    """Every layer of `model`, nested models (a stem, a backbone) flattened."""
    for layer in model.layers:
        if isinstance(layer, keras.Model):
            yield from walk_layers(layer)
        else:
            yield layer


MAX_LINES = 24  # an error lists at most about this many problems (then counts per kind)
PER_KIND = 6


def _shown(problems, lines):
    """The problem lines of an error: all of a few; of many, the first of each kind and counts
    (a checkpoint of another architecture has hundreds, and a screenful says as much)."""
    if len(lines) <= MAX_LINES:
        return lines
    shown = []
    for kind in KINDS:
        found = problems.get(kind, ())
        shown += [f"  {kind:<10} {line}" for line in found[:PER_KIND]]
        if len(found) > PER_KIND:
            shown.append(f"  {kind:<10} ... and {len(found) - PER_KIND} more")
    counts = ", ".join(f"{len(problems[k])} {k}" for k in KINDS if problems.get(k))
    wrong = len(problems.get("shape", ())) + len(problems.get("missing", ()))
    advice = ""
    if wrong > len(lines) // 2:
        advice = (
            "; most weights are missing or of other shapes: is the file a checkpoint of another "
            "model, or the model name (or sizes) another than the file's?"
        )
    shown.append(f"  ({counts}{advice})")
    return shown


def commit(model, assignments, problems, notes, *, source, strict=True, logger, hint="", keys=()):
    """Assigns `assignments` when there are no `problems`; else raises one `ValueError`.

    Args:
        model: the `keras.Model` being loaded (for its name).
        assignments: list of `(variable, value)`.
        problems: dict {"dtype" | "missing" | "unexpected" | "shape": [line]}. A "dtype"
            problem (an array of strings, bools, complex numbers, or integers for a float
            weight) always raises.
        notes: list of log lines (kept heads, resampled grids, ...), logged at INFO.
        source: str. What is loaded (a path or a description), for the messages.
        strict: bool. When False, problems are logged and what matches is assigned.
        logger: the `logging.Logger` of the calling loader.
        hint: str. Appended to the error's first line (e.g. how to load partially).
        keys: the source's array names, quoted when nothing matches.

    Returns:
        The number of variables assigned.

    Raises:
        ValueError: listing every problem (strict), or when nothing matches at all.
    """
    # Every value is converted (and its shape checked) before the first assignment, so that
    # a value that cannot become its variable fails the load with the model untouched.
    problems = {kind: list(problems.get(kind, ())) for kind in KINDS}
    ready = []
    for variable, value in assignments:
        why = dtype_problem(value) or integer_problem(value, variable)
        if why is None and not lazy.is_lazy(value):  # a lazy value is read when assigned
            try:
                value = np.asarray(value, dtype=variable.dtype)
            except (TypeError, ValueError, OverflowError) as error:
                why = f"cannot become {variable.dtype}: {error}"
        if why is not None:
            problems["dtype"].append(f"{variable.path}: {why}")
        elif shape_of(value) != shape_of(variable):
            problems["shape"].append(
                f"{variable.path}: expected {shape_of(variable)}, found {shape_of(value)}"
            )
        else:
            ready.append((variable, value))
    if problems["dtype"]:  # never skipped, strict or not: the file is damaged or not weights
        strict = True
    lines = [f"  {kind:<10} {line}" for kind in KINDS for line in problems.get(kind, ())]
    if lines and strict:
        raise ValueError(
            f"Cannot load {source} into model '{model.name}': {len(lines)} problem(s)"
            f"{hint}:\n" + "\n".join(_shown(problems, lines))
        )
    if lines:
        logger.warning("skipped %d array(s) of %s:\n%s", len(lines), source, "\n".join(lines))
    if not ready:
        raise ValueError(
            f"No array of {source} matches a weight of model '{model.name}'. "
            f"Received: {len(keys)} arrays, e.g. {sorted(keys)[:3]}"
        )
    lazy.assign(ready, logger)  # lazy values one tensor at a time, onto their layouts
    for note in notes:
        logger.info("%s", note)
    logger.info("assigned %d model weights from %s", len(ready), source)
    return len(ready)


# --- transforms: PyTorch layouts -> Keras layouts ---------------------------------------------


class Mismatch(ValueError):
    """A source array that cannot become its variables (its text says why)."""


@dataclasses.dataclass(frozen=True)
class Transform:
    """How one source array becomes one or more model variables.

    Attributes:
        name: str. For messages.
        source_shape: callable `(target_shapes) -> shape`: the source shape the targets
            expect (shown in errors).
        apply: callable `(array, target_shapes) -> tuple of arrays`, one per target. With
            `exact` it only sees arrays of `source_shape`; otherwise it may adapt other
            shapes (resampling) or raise `Mismatch` saying why it cannot. The caller checks
            the result shapes either way.
        exact: bool. Whether the source must have exactly `source_shape`. Defaults to True.
    """

    name: str
    source_shape: Callable
    apply: Callable
    exact: bool = True


IDENTITY = Transform("identity", lambda shapes: shapes[0], lambda a, shapes: (a,))

# torch.nn.Linear weight (out, in) -> keras Dense kernel (in, out).
LINEAR = Transform("linear", lambda shapes: shapes[0][::-1], lambda a, shapes: (a.T,))

# torch Conv2d weight (out, in, kh, kw) -> keras Conv2D kernel (kh, kw, in, out).
CONV = Transform(
    "conv",
    lambda shapes: (shapes[0][3], shapes[0][2], shapes[0][0], shapes[0][1]),
    lambda a, shapes: (a.transpose(2, 3, 1, 0),),
)

# A query / key / value Linear of H heads (Hugging Face's separate ones): weight (H*Dh, D)
# -> kernel (D, H, Dh); bias (H*Dh,) -> (H, Dh).
HEADS_IN_WEIGHT = Transform(
    "heads_in_weight",
    lambda shapes: (shapes[0][1] * shapes[0][2], shapes[0][0]),
    lambda a, shapes: (a.T.reshape(shapes[0]),),
)
HEADS_IN_BIAS = Transform(
    "heads_in_bias",
    lambda shapes: (shapes[0][0] * shapes[0][1],),
    lambda a, shapes: (a.reshape(shapes[0]),),
)

# The attention output projection: Linear weight (D, H*Dh) -> kernel (H, Dh, D).
HEADS_OUT_WEIGHT = Transform(
    "heads_out_weight",
    lambda shapes: (shapes[0][2], shapes[0][0] * shapes[0][1]),
    lambda a, shapes: (a.T.reshape(shapes[0]),),
)


def _split3(transform):
    """timm's fused q, k, v: the source stacks three arrays of `transform` on axis 0."""
    return Transform(
        f"fused_{transform.name}",
        lambda shapes: (
            3 * transform.source_shape(shapes[:1])[0],
            *transform.source_shape(shapes[:1])[1:],
        ),
        lambda a, shapes: tuple(
            transform.apply(part, (shape,))[0]
            for part, shape in zip(np.split(a, 3), shapes, strict=True)
        ),
    )


# timm's fused qkv: weight (3D, D), q, k, v stacked -> three (D, H, Dh) kernels ...
QKV_WEIGHT = _split3(HEADS_IN_WEIGHT)
# ... and its bias (3D,) -> three (H, Dh) biases.
QKV_BIAS = _split3(HEADS_IN_BIAS)

# How each of these moves axes, so that a sharded load reads only the blocks it places.
for _transform, _kind in (
    (IDENTITY, "identity"), (LINEAR, "linear"), (CONV, "conv"),
    (HEADS_IN_WEIGHT, "heads_in_weight"), (HEADS_IN_BIAS, "heads_in_bias"),
    (HEADS_OUT_WEIGHT, "heads_out_weight"), (QKV_WEIGHT, "fused_heads_in_weight"),
    (QKV_BIAS, "fused_heads_in_bias"),
):  # fmt: skip
    lazy_slices.register(_transform, _kind)


def torch_norm(key, path):
    """Table entries of a torch LayerNorm / GroupNorm `key` -> the Keras norm layer `path`."""
    return {
        f"{key}.weight": (f"{path}/gamma", IDENTITY),
        f"{key}.bias": (f"{path}/beta", IDENTITY),
    }


def torch_linear(key, path):
    """Table entries of a torch Linear `key` -> the Keras Dense layer `path`."""
    return {
        f"{key}.weight": (f"{path}/kernel", LINEAR),
        f"{key}.bias": (f"{path}/bias", IDENTITY),
    }


def position_embedding(grid_size, num_prefix_rows, resample):
    """A learned `(1, prefix + h * w, D)` position embedding, resampled to `grid_size` if needed.

    Args:
        grid_size: (h, w) of the model's patch grid.
        num_prefix_rows: int. Rows before the grid (kept as they are).
        resample: callable `(posemb, grid_size, num_prefix_rows) -> posemb` for a checkpoint
            of another (square) grid: how the source library resamples.

    Returns:
        A `Transform` that accepts any `(1, T, D)` array of the model's width.
    """

    def apply(array, shapes):
        expected = shapes[0]
        if array.ndim != 3 or array.shape[0] != 1 or array.shape[2] != expected[2]:
            raise Mismatch(f"found {shape_of(array)}")
        if shape_of(array) == expected:
            return (array,)
        try:
            return (resample(array, grid_size, num_prefix_rows),)
        except ValueError as error:
            why = f"found {shape_of(array)}, which cannot be resampled: {error}"
            raise Mismatch(why) from error

    return Transform("position_embedding", lambda shapes: shapes[0], apply, exact=False)


def zero_qkv_biases(num_layers):
    """`fills` for the query/key/value biases of `num_layers` blocks (a checkpoint without them)."""
    return {
        block(i, "attention", name, "bias"): 0.0
        for i in range(num_layers)
        for name in ("query", "key", "value")
    }


# --- the generic loader -----------------------------------------------------------------------


def model_variables(model):
    """{variable path: variable} of every weight of `model`; paths must be unique."""
    variables = {}
    for variable in model.weights:
        if variable.path in variables:
            raise ValueError(
                f"Model '{model.name}' has two weights with the path {variable.path!r}: "
                "layer names must be unique."
            )
        variables[variable.path] = variable
    return variables


def _targets(paths):
    return (paths,) if isinstance(paths, str) else tuple(paths)


def without_new_head(table, arrays, keys, logger):
    """`table` without the head entries `keys` when the checkpoint has none of them.

    A checkpoint without a classifier (a backbone) loads into a model with a head: the head
    is new (its zero initialisation stays) rather than missing.
    """
    present = [key for key in keys if key in table]
    if present and not any(key in arrays for key in present):
        logger.info("the checkpoint has no %s: the model's head stays zero-initialised", present[0])
        return {k: v for k, v in table.items() if k not in present}
    return table


def plan_state_dict(model, arrays, table, *, fills=None, skip=None):
    """Pairs every array with its variables through `table`, changing nothing.

    Args:
        model: a built `keras.Model`.
        arrays: dict {source key: np.ndarray}.
        table: dict {source key: (variable path or tuple of paths, Transform)}: every entry
            is expected in `arrays`.
        fills: optional dict {variable path: value} for variables the checkpoint has no
            array for by design (e.g. zero biases of a layer trained without them).
        skip: optional dict {source key: note}: arrays deliberately left out (a head of
            another class count), each logged with its note; their variables keep their
            values.

    Returns:
        `(assignments, problems, notes)`: `[(variable, value)]`, a dict
        {"dtype" | "missing" | "unexpected" | "shape": [line]}, and log lines.
    """
    variables = model_variables(model)
    fills = dict(fills or {})
    skip = dict(skip or {})
    problems = {kind: [] for kind in KINDS}
    notes = [note for key, note in skip.items() if key in arrays]
    assignments = []
    covered = set()
    bad = dtype_problems(arrays)
    problems["dtype"] += [f"{key}: {why}" for key, why in bad.items()]
    for key, value in arrays.items():
        if key not in table and key not in skip:
            problems["unexpected"].append(f"{key}: found {shape_of(value)}, no such model weight")
    for key, (paths, transform) in table.items():
        paths = _targets(paths)
        absent = [p for p in paths if p not in variables]
        if absent:
            raise ValueError(
                f"The name table maps {key!r} to {absent}, which model '{model.name}' does not "
                "have (a table that does not fit the model's architecture)."
            )
        targets = [variables[p] for p in paths]
        covered.update(paths)
        if key in skip:  # left out on purpose: the model keeps its own values
            continue
        shapes = tuple(shape_of(v) for v in targets)
        expected = tuple(transform.source_shape(shapes))
        if key not in arrays:
            problems["missing"].append(f"{key}: expected {expected}, not in the checkpoint")
            continue
        if key in bad:
            continue
        value = arrays[key]
        value = value if lazy.is_lazy(value) else np.asarray(value)
        why = integer_problem(value, targets[0])
        if why:
            problems["dtype"].append(f"{key}: {why}")
            continue
        if transform.exact and shape_of(value) != expected:
            problems["shape"].append(f"{key}: expected {expected}, found {shape_of(value)}")
            continue
        try:
            if lazy.is_lazy(value) and transform.exact:  # read at assignment, block by block
                results = lazy.deferred(value, transform, shapes)
            else:
                results = transform.apply(np.asarray(value), shapes)
        except Mismatch as why:
            problems["shape"].append(f"{key}: expected {expected}, {why}")
            continue
        if any(shape_of(r) != s for r, s in zip(results, shapes, strict=True)):
            problems["shape"].append(f"{key}: expected {expected}, found {shape_of(value)}")
            continue
        if shape_of(value) != expected:  # an adapting transform (a resampled grid)
            notes.append(f"resized {key} from {shape_of(value)} to {expected} ({transform.name})")
        assignments += list(zip(targets, results, strict=True))
    for path, value in fills.items():
        variable = variables[path]
        value = np.broadcast_to(np.asarray(value, dtype="float32"), shape_of(variable))
        assignments.append((variable, value))
        covered.add(path)
    unmapped = [p for p in variables if p not in covered]
    if unmapped:
        notes.append(
            f"{len(unmapped)} model weights have no array in the checkpoint and stay as they "
            "are: " + ", ".join(unmapped)
        )
    return assignments, problems, notes


def load_state_dict(model, arrays, table, *, source, logger, fills=None, skip=None, strict=True):
    """Loads a PyTorch-layout state dict into `model` through a name table, all or nothing.

    Args:
        model: a built `keras.Model`.
        arrays: dict {source key: np.ndarray} (`keras_vit.weights.state_dict.read_state_dict`).
        table: dict {source key: (variable path(s), Transform)}, see `plan_state_dict`.
        source: str. What is loaded, for messages.
        logger: the caller's `logging.Logger`.
        fills, skip: see `plan_state_dict`.
        strict: bool. When True (default) any missing, unexpected or mis-shaped array raises
            one `ValueError` listing them all and nothing is assigned.

    Returns:
        The model.

    Example:

    >>> import logging
    >>> inputs = keras.Input((3,))
    >>> dense = keras.Model(inputs, keras.layers.Dense(2, name="fc")(inputs))
    >>> torch_layout = {"fc.weight": np.ones((2, 3)), "fc.bias": np.zeros(2)}
    >>> table = {"fc.weight": ("fc/kernel", LINEAR), "fc.bias": ("fc/bias", IDENTITY)}
    >>> _ = load_state_dict(dense, torch_layout, table, source="a dict",
    ...                     logger=logging.getLogger("demo"))
    >>> keras.ops.convert_to_numpy(dense.get_layer("fc").kernel).tolist()
    [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]]
    """
    assignments, problems, notes = plan_state_dict(model, arrays, table, fills=fills, skip=skip)
    commit(model, assignments, problems, notes, source=source, strict=strict, logger=logger)
    return model
