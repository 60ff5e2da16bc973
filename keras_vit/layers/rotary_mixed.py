"""RoPE-ViT's mixed 2-D rotary embeddings: learned frequencies per block and head.

timm's `RotaryEmbeddingMixed` (`rope_type='mixed'`, the `vit_*_rope_mixed_*` models): each block
`l` and head `h` rotates its patch queries and keys by the angles
`x * f[0, l, h, k] + y * f[1, l, h, k]` of every token's column `x` and row `y` (timm's
`grid_indexing='xy'`, integer positions), with `f` a trainable `(2, layers, heads, head_dim / 2)`
weight; the frequency pairs then rotate as EVA-02's (`apply_rotary_embedding`).
"""

import math

import keras
from keras import ops

from keras_vit.layers._checks import check_positive_int, check_positive_int_pair
from keras_vit.layers.rotary import _check_head_dim, feature_grid, grid_positions, grid_tokens

__all__ = ["MixedRotaryEmbedding", "mixed_rotary_embedding"]


def mixed_rotary_frequencies(num_layers, num_heads, head_dim, temperature, angles):
    """timm's `init_random_2d_freqs`: `(2, layers, heads, head_dim / 2)` from per-head angles.

    `head_dim / 4` magnitudes `temperature ** (-4 i / head_dim)`, each turned by the block's and
    head's angle `a` (`angles`, `(layers, heads, 1)`) and by `a + pi / 2`:
    `fx = [m cos a, m cos(a + pi/2)]`, `fy = [m sin a, m sin(a + pi/2)]`.
    """
    del num_layers, num_heads  # the shape of `angles`
    exponent = ops.arange(0, head_dim, 4, dtype="float32") / float(head_dim)
    magnitude = 1.0 / ops.power(float(temperature), exponent)
    turned = angles + math.pi / 2
    fx = ops.concatenate([magnitude * ops.cos(angles), magnitude * ops.cos(turned)], -1)
    fy = ops.concatenate([magnitude * ops.sin(angles), magnitude * ops.sin(turned)], -1)
    return ops.stack([fx, fy], axis=0)


def mixed_rotary_embedding(grid_size, frequencies):
    """The `(H * W, heads, 2 * head_dim)` sines then cosines of one block's mixed RoPE.

    Args:
        grid_size: `(H, W)`: ints or scalar tensors.
        frequencies: `(2, heads, head_dim / 2)`: the x (column) and y (row) frequencies.

    Returns:
        float32 `(H * W, heads, 2 * head_dim)`, row-major tokens, interleaved pairs.
    """
    rows, cols = grid_positions(grid_size)
    height, width = grid_size
    t_x = ops.reshape(ops.broadcast_to(cols[None, :], (height, width)), (-1,))
    t_y = ops.reshape(ops.broadcast_to(rows[:, None], (height, width)), (-1,))
    return mixed_token_table(t_x, t_y, frequencies)


def mixed_token_table(columns, rows, frequencies):
    """Sines then cosines `(..., heads, 2 * head_dim)` of tokens at `columns`, `rows` `(...)`.

    Angles `x * fx + y * fy` per head (`frequencies` `(2, heads, head_dim / 2)`), each
    repeated twice (interleaved pairs). The positions may be a grid's
    (`mixed_rotary_embedding`) or each token's own (NaFlex: `keras_vit.layers.naflex_rotary`).
    """
    frequencies = ops.cast(frequencies, "float32")
    t_x, t_y = columns[..., None, None], rows[..., None, None]
    angles = t_x * frequencies[0] + t_y * frequencies[1]  # (..., heads, hd / 2)
    angles = ops.repeat(angles, 2, axis=-1)
    return ops.concatenate([ops.sin(angles), ops.cos(angles)], axis=-1)


@keras.saving.register_keras_serializable(package="keras_vit")
class MixedRotaryEmbedding(keras.layers.Layer):
    """RoPE-ViT's mixed RoPE: one table per block from learned frequencies, per input grid.

    Holds the trainable `frequencies` `(2, num_layers, num_heads, head_dim / 2)` (timm's
    `rope.freqs`, initialised as timm does: magnitudes `temperature ** (-4 i / head_dim)`
    turned by a random angle per block and head) and returns, for the grid `(H / ph, W / pw)`
    of the `(B, H, W, C)` map it is called on, a list of `num_layers` tables
    `(N, num_heads, 2 * head_dim)`: block `l`'s attention rotates its patch queries and keys by
    the `l`-th (`MultiHeadSelfAttention(...)(tokens, rotary_embedding=tables[l])`).

    Args:
        num_layers: int. Blocks (one table each).
        num_heads: int. Attention heads.
        head_dim: int. Per-head width, divisible by 4.
        temperature: float. Of the initial magnitudes. Defaults to 10 (timm's).
        patch_size: int or `(height, width)`: the grid is the input's size over it.
            Defaults to 1.

    Call arguments:
        inputs: `(B, H, W, C)` feature map (only its shape is read).

    Returns:
        A list of `num_layers` float32 tensors `(N, num_heads, 2 * head_dim)`.

    Example:

    >>> import numpy as np
    >>> rope = MixedRotaryEmbedding(num_layers=2, num_heads=3, head_dim=8)
    >>> [tuple(t.shape) for t in rope(np.zeros((1, 2, 5, 4), "float32"))]
    [(10, 3, 16), (10, 3, 16)]

    Reference:
        Heo et al., 2024, "Rotary Position Embedding for Vision Transformer"
        (arXiv 2403.13298), Sec. 3.3 (RoPE-Mixed).
    """

    def __init__(self, num_layers, num_heads, head_dim, temperature=10.0, patch_size=1, **kwargs):
        super().__init__(**kwargs)
        self.num_layers = check_positive_int(num_layers, "num_layers")
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.head_dim = _check_head_dim(head_dim)
        if (
            isinstance(temperature, bool)
            or not isinstance(temperature, (int, float))
            or temperature <= 0
        ):
            raise ValueError(f"temperature must be positive. Received: temperature={temperature!r}")
        self.temperature = float(temperature)
        self.patch_size = check_positive_int_pair(patch_size, "patch_size")

    def _initial_frequencies(self, shape, dtype=None):
        angles = keras.random.uniform((self.num_layers, self.num_heads, 1)) * (2 * math.pi)
        frequencies = mixed_rotary_frequencies(
            self.num_layers, self.num_heads, self.head_dim, self.temperature, angles
        )
        return ops.cast(ops.reshape(frequencies, shape), dtype or "float32")

    def build(self, input_shape):
        self.frequencies = self.add_weight(
            name="frequencies",
            shape=(2, self.num_layers, self.num_heads, self.head_dim // 2),
            initializer=self._initial_frequencies,
            dtype="float32",
            autocast=False,
        )
        self.built = True

    def call(self, inputs):
        grid = feature_grid(inputs, self.patch_size, self.name)
        return [
            mixed_rotary_embedding(grid, self.frequencies[:, layer])
            for layer in range(self.num_layers)
        ]

    def compute_output_shape(self, input_shape):
        tokens = grid_tokens(input_shape, self.patch_size)
        return [(tokens, self.num_heads, 2 * self.head_dim)] * self.num_layers

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_layers": self.num_layers,
                "num_heads": self.num_heads,
                "head_dim": self.head_dim,
                "temperature": self.temperature,
                "patch_size": self.patch_size,
            }
        )
        return config
