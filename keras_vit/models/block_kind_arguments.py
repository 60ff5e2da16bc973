"""Earlier versions' block arguments mapped onto `ViTConfig.block_kind`: `block_type`
("parallel_scaling" or not) and `block_norm` (the residual norm placement, "post" or not), and
the kind that `num_parallel > 1` alone implies. Read by `ViTConfig`'s constructor (with a
DeprecationWarning) and `ViTConfig.from_dict` (saved configs of earlier versions, silently);
`config_checks.check_block_kind` checks the result.
"""

from keras_vit.layers._checks import is_int
from keras_vit.layers.block_base import BLOCK_NORMS  # declared once, by the blocks
from keras_vit.layers.block_kinds import BLOCK_KINDS

# Earlier versions' `block_type` values (`block_norm`'s are the blocks' BLOCK_NORMS).
BLOCK_TYPES = ("standard", "parallel_scaling")


def legacy_names(kind):
    """Earlier versions' `block_type` / `block_norm` of the block kind `kind`.

    >>> legacy_names("post")
    {'block_type': 'standard', 'block_norm': 'post'}
    """
    return {
        "block_type": "parallel_scaling" if kind == "parallel_scaling" else "standard",
        "block_norm": "post" if kind == "post" else "pre",
    }


def block_kind_arguments(arguments, block_type=None, block_norm=None):
    """`{"block_kind": ..., "num_parallel": ...}` of `ViTConfig`'s arguments, where None (or
    absent) means "implied": the kind earlier versions' `block_type` / `block_norm` name, else
    `"parallel"` for `num_parallel > 1` (as in earlier versions), else `"pre"`; 2 branches for
    `"parallel"`, else 1. Contradictions are ValueErrors; `check_block_kind` checks the rest.

    >>> block_kind_arguments({"num_parallel": 3})
    {'block_kind': 'parallel', 'num_parallel': 3}
    >>> block_kind_arguments({}, block_norm="post")
    {'block_kind': 'post', 'num_parallel': 1}
    """
    kind = _legacy_kind(arguments.get("block_kind"), block_type, block_norm)
    count = arguments.get("num_parallel")
    if kind is None:
        kind = "parallel" if is_int(count) and count > 1 else "pre"
    if count is None:
        count = 2 if kind == "parallel" else 1
    return {"block_kind": kind, "num_parallel": count}


def _legacy_kind(kind, block_type, block_norm):
    """`kind`, or the kind `block_type` / `block_norm` name (None: neither names one)."""
    given = {
        name: value
        for name, value in (("block_type", block_type), ("block_norm", block_norm))
        if value is not None
    }
    for name, allowed in (("block_type", BLOCK_TYPES), ("block_norm", BLOCK_NORMS)):
        if name in given and given[name] not in allowed:
            raise ValueError(f"{name} must be one of {allowed}. Received: {name}={given[name]!r}")
    shown = ", ".join(f"{name}={value!r}" for name, value in given.items())
    if kind is None:
        named = [value for value in given.values() if value in ("post", "parallel_scaling")]
        if len(named) > 1:
            raise ValueError(
                "block_type='parallel_scaling' and block_norm='post' name two block kinds: pass "
                f"one block_kind, a key of keras_vit.layers.BLOCK_KINDS. Received: {shown}"
            )
        return named[0] if named else None
    if kind in BLOCK_KINDS:
        wrong = [f"{name}={value!r}" for name, value in given.items()
                 if legacy_names(kind)[name] != value]  # fmt: skip
        if wrong:
            raise ValueError(
                f"block_kind={kind!r} contradicts {', '.join(wrong)} (earlier versions' names of "
                f"the block kind): pass block_kind alone. Received: block_kind={kind!r}, {shown}"
            )
    return kind
