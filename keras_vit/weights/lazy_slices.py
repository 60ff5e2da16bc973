"""Which block of a checkpoint tensor a block of a Keras variable comes from, per transform.

`source_block(transform, target_index, shapes, index)` answers for the transforms of
`keras_vit.weights.loading` that only move axes (PyTorch's Linear, Conv2d and per-head
layouts, timm's fused q/k/v): `(source_index, finish)`, where `finish` turns the source block
into the target block. None means the transform must see the whole tensor (a resampled or
family-specific one; the caller then transforms it once).

Example:

>>> import numpy as np
>>> weight = np.arange(12.0).reshape(3, 4)  # a torch Linear (out=3, in=4)
>>> target = (slice(1, 3), slice(0, 3))     # rows 1:3 of the Keras kernel (in=4, out=3)
>>> from keras_vit.weights.loading import LINEAR  # registered there
>>> source, finish = source_block(LINEAR, target, ((4, 3),), 0)
>>> np.array_equal(finish(weight[source]), weight.T[target])
True
"""


def normalize(index, shape):
    """`index` (slices, ints, Ellipsis) as one `slice(start, stop)` per dimension."""
    if not isinstance(index, tuple):
        index = (index,)
    if any(i is Ellipsis for i in index):
        at = index.index(Ellipsis)
        index = index[:at] + (slice(None),) * (len(shape) - len(index) + 1) + index[at + 1 :]
    index = index + (slice(None),) * (len(shape) - len(index))
    out = []
    for i, d in zip(index, shape, strict=True):
        if isinstance(i, slice):
            start, stop, step = i.indices(d)
            if step != 1:
                raise ValueError(f"Only contiguous slices are read lazily. Received: {index}")
            out.append(slice(start, stop))
        else:
            i = int(i) % d
            out.append(slice(i, i + 1))
    return tuple(out)


def _full(s, size):
    return s.start == 0 and s.stop == size


def _identity(t, shapes, index):
    return t, lambda a: a


def _linear(t, shapes, index):  # (out, in) -> (in, out)
    return (t[1], t[0]), lambda a: a.T


def _conv(t, shapes, index):  # (out, in, kh, kw) -> (kh, kw, in, out)
    return (t[3], t[2], t[0], t[1]), lambda a: a.transpose(2, 3, 1, 0)


def _heads_rows(t_heads, width, offset=0):
    """The rows `h0 * width : h1 * width` (plus `offset`) of the heads `t_heads`."""
    return slice(offset + t_heads.start * width, offset + t_heads.stop * width)


def _heads_in_weight(t, shapes, index, offset=0):  # (H*Dh, D) -> (D, H, Dh)
    _, _, width = shapes[index]
    if not _full(t[2], width):
        return None
    rows = _heads_rows(t[1], width, offset)
    count = (t[0].stop - t[0].start, t[1].stop - t[1].start, width)
    return (rows, t[0]), lambda a: a.T.reshape(count)


def _heads_in_bias(t, shapes, index, offset=0):  # (H*Dh,) -> (H, Dh)
    _, width = shapes[index]
    if not _full(t[1], width):
        return None
    count = (t[0].stop - t[0].start, width)
    return (_heads_rows(t[0], width, offset),), lambda a: a.reshape(count)


def _heads_out_weight(t, shapes, index):  # (D, H*Dh) -> (H, Dh, D)
    _, width, _ = shapes[index]
    if not _full(t[1], width):
        return None
    count = (t[0].stop - t[0].start, width, t[2].stop - t[2].start)
    return (t[2], _heads_rows(t[0], width)), lambda a: a.T.reshape(count)


def _fused(per_head):
    """timm's fused q, k, v: target `index` is the `index`-th third of the source rows."""

    def block(t, shapes, index):
        heads, width = shapes[index][-2], shapes[index][-1]
        return per_head(t, shapes, index, offset=index * heads * width)

    return block


_BLOCKS = {
    "identity": _identity,
    "linear": _linear,
    "conv": _conv,
    "heads_in_weight": _heads_in_weight,
    "heads_in_bias": _heads_in_bias,
    "heads_out_weight": _heads_out_weight,
    "fused_heads_in_weight": _fused(_heads_in_weight),
    "fused_heads_in_bias": _fused(_heads_in_bias),
}
# {id(transform): kind}: the transforms `keras_vit.weights.loading` registers (`register`), so
# that a family's own transform of the same name is never taken for one of these.
_KNOWN = {}


def register(transform, kind):
    """Declares that `transform` moves axes as `kind` (a key of `_BLOCKS`) does."""
    if kind not in _BLOCKS:
        raise ValueError(f"kind must be one of {sorted(_BLOCKS)}. Received: {kind!r}")
    _KNOWN[id(transform)] = (transform, kind)


def source_block(transform, target_index, shapes, index):
    """`(source_index, finish)` for block `target_index` of target `index` of `transform`, or
    None (a transform nobody registered). `transform` None is the identity."""
    if transform is None:
        kind = "identity"
    else:
        known = _KNOWN.get(id(transform))
        if known is None or known[0] is not transform:
            return None
        kind = known[1]
    return _BLOCKS[kind](tuple(target_index), shapes, index)
