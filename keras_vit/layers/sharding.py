"""Sharding roles: what each variable of a layer is to tensor and fully-sharded parallelism.

A layer class that owns projections declares `sharding_roles`: `{pattern: role}`, where a
pattern (a regex, fullmatched) names one of its sublayers or its own variables. The role says
what the variable is in the computation; `keras_vit.distribution` turns a role into a layout:

- `COLUMN`: an in-projection (q, k, v, MLP in, gate / up). Tensor parallelism splits its
  outputs over the `model` axis: a Dense kernel's axis 1, an `EinsumDense` kernel's heads axis
  (1), a conv kernel's output channels; the bias alike.
- `ROW`: an out-projection (attention output, MLP out, down). Its inputs are split: the
  kernel's axis 0 (features or heads); the bias stays whole (one all-reduce after it).
- `KEY_VALUE`: a key / value in-projection: `COLUMN` when the model axis divides its heads,
  else whole (grouped-query attention with fewer key / value heads than the axis: Megatron
  replicates them too).
- `HEADS`: a per-head table `(..., heads)` (relative position bias): its last axis.
- `WIDTH`: an embedding of the model width `(..., D)` (patch kernel, position table): its
  last axis where the model axis divides it.
- `REPLICATED`: small tables and vectors (norm scales, tokens): whole on the `model` axis.

`COLUMN`, `ROW` and `HEADS` are strict: a model axis that does not divide the heads or the
widths is an error naming the dimension. Fully-sharded data parallelism (FSDP) needs no role:
it takes the largest remaining dimension the data axis divides (big_vision's `fsdp` rule).

The innermost layer that declares a pattern for a variable decides: a `Dense` named `query`
inside `MultiHeadSelfAttention` is `COLUMN` because the attention says so, whatever block holds
it and whatever the block is called. A projection that no layer claims (a model's `head`, the
MAE decoder's `decoder_pred`, a hybrid stem's convolutions) gets `PROJECTION`: `COLUMN` where the
axis divides its outputs, else `ROW` where it divides its inputs. Any other unclaimed variable
is `REPLICATED` for tensor parallelism (FSDP still shards it); `keras_vit.distribution` refuses
a large one that nothing shards.

Example:

>>> import keras
>>> from keras_vit.layers.attention import MultiHeadSelfAttention
>>> attention = MultiHeadSelfAttention(num_heads=2)
>>> attention.build((None, 4, 8))
>>> role_of([attention, attention.query_dense], "kernel")
('column', 'MultiHeadSelfAttention')
"""

import re

import keras

COLUMN = "column"
ROW = "row"
KEY_VALUE = "key_value"
HEADS = "heads"
WIDTH = "width"
REPLICATED = "replicated"
# The role of a projection no layer claims (see the module docstring); never declared.
PROJECTION = "projection"
ROLES = (COLUMN, ROW, KEY_VALUE, HEADS, WIDTH, REPLICATED)

# The leaf layer kinds a `PROJECTION` applies to when nothing claims them.
_PROJECTIONS = (keras.layers.Dense, keras.layers.EinsumDense, keras.layers.Conv2D)


def declared_roles(layer):
    """The `{pattern: role}` table of `layer`'s class (empty when it declares none)."""
    table = getattr(type(layer), "sharding_roles", None) or {}
    for pattern, role in table.items():
        if role not in ROLES:
            raise ValueError(
                f"{type(layer).__name__}.sharding_roles[{pattern!r}] must be one of {ROLES}. "
                f"Received: {role!r}"
            )
    return table


def role_of(chain, variable_name):
    """The role of a variable and who says so: `(role, class name or "generic")`.

    Args:
        chain: the layers that hold the variable, outermost first (the last one owns it).
        variable_name: str. The variable's own name (`"kernel"`, `"bias"`, ...).

    Returns:
        `(role, source)`: the role of the innermost layer whose `sharding_roles` names the
        variable (or the sublayer holding it) and that layer's class name; else
        `(PROJECTION, "generic")` for the variables of an unclaimed Dense, EinsumDense or
        Conv2D, and `(REPLICATED, "generic")` for any other.
    """
    chain = list(chain)
    for i in range(len(chain) - 1, -1, -1):
        table = declared_roles(chain[i])
        if not table:
            continue
        name = chain[i + 1].name if i + 1 < len(chain) else variable_name
        for pattern, role in table.items():
            if re.fullmatch(pattern, name):
                return role, type(chain[i]).__name__
    if chain and isinstance(chain[-1], _PROJECTIONS):
        return PROJECTION, "generic"
    return REPLICATED, "generic"
