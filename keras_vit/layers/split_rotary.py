"""Multidimensional rotary embeddings with rotate-half pairs, one part of the head per axis.

Gemma 4's vision tower (timm's `Gemma4RotaryEmbedding2D` and `apply_multidimensional_rope`)
splits each head into one part per axis (columns, then rows), and rotates each part by its own
position with the rotate-half convention (`[-x2, x1]` of the part's halves; `rotary.py`'s
EVA-02 tables rotate interleaved pairs instead). Frequencies `1 / theta ** (2i / part)` with
`part = head_dim // axes`.
"""

from keras import ops

__all__ = ["apply_split_rotary", "split_rotary_table"]


def check_split_head_dim(head_dim, num_axes=2):
    """`head_dim` if it is an int divisible by `2 * num_axes`, else a ValueError."""
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim % (2 * num_axes):
        raise ValueError(
            f"head_dim must be a positive multiple of {2 * num_axes} (a pair per rotated "
            f"channel, {num_axes} axes). Received: head_dim={head_dim!r}"
        )
    return head_dim


def split_rotary_table(positions, head_dim, theta=100.0):
    """The `(cos, sin)` tables `(N, head_dim)` of tokens at `positions` (a list of `(N,)`
    float tensors, one per axis, in the order their parts sit in the head).

    Example:

    >>> import numpy as np
    >>> cos, sin = split_rotary_table([np.arange(4.0), np.zeros(4)], head_dim=8)
    >>> tuple(cos.shape)
    (4, 8)
    """
    num_axes = len(positions)
    part = check_split_head_dim(head_dim, num_axes) // num_axes
    exponent = ops.arange(0, part, 2, dtype="float32") / float(part)
    inverse = 1.0 / ops.power(float(theta), exponent)  # (part / 2,)
    angles = []
    for axis in positions:
        freqs = ops.cast(axis, "float32")[:, None] * inverse[None, :]
        angles.append(ops.concatenate([freqs, freqs], axis=-1))  # (N, part)
    angles = ops.concatenate(angles, axis=-1)
    return ops.cos(angles), ops.sin(angles)


def apply_split_rotary(x, cos, sin, num_axes=2):
    """Rotates `x` `(B, N, heads, head_dim)` by a `split_rotary_table` `(N, head_dim)`, part
    by part: `x * cos + rotate_half(x) * sin` within each axis' part."""
    x = ops.convert_to_tensor(x)
    cos = ops.cast(cos, x.dtype)[:, None, :]
    sin = ops.cast(sin, x.dtype)[:, None, :]
    head_dim = x.shape[-1]
    part = head_dim // num_axes
    rotated = []
    for i in range(num_axes):
        first = x[..., i * part : i * part + part // 2]
        second = x[..., i * part + part // 2 : (i + 1) * part]
        rotated += [-second, first]
    rotated = ops.concatenate(rotated, axis=-1)
    return x * cos + rotated * sin
